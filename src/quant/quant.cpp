// Quant type table and the row-level (de)quantization entry points over quant/formats.h.
#include "quant/quant.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <string>
#include <type_traits>

#include "base/error.h"
#include "base/half.h"
#include "quant/formats.h"
#include "quant/quantize.h"

namespace ft::quant {

namespace {
struct TypeInfo {
  QuantType type;
  std::string_view name;
  int32_t elems, bytes;
  DType dtype;
};
constexpr TypeInfo k_types[] = {
    {QuantType::F32, "F32", 1, 4, DType::F32},
    {QuantType::F16, "F16", 1, 2, DType::F16},
    {QuantType::Q4_0, "Q4_0", 32, sizeof(BlockQ4_0), DType::Q4_0},
    {QuantType::Q4_1, "Q4_1", 32, sizeof(BlockQ4_1), DType::Q4_1},
    {QuantType::Q8_0, "Q8_0", 32, sizeof(BlockQ8_0), DType::Q8_0},
    {QuantType::Q2_K, "Q2_K", 256, sizeof(BlockQ2_K), DType::Q2_K},
    {QuantType::Q3_K, "Q3_K", 256, sizeof(BlockQ3_K), DType::Q3_K},
    {QuantType::Q4_K, "Q4_K", 256, sizeof(BlockQ4_K), DType::Q4_K},
    {QuantType::Q5_K, "Q5_K", 256, sizeof(BlockQ5_K), DType::Q5_K},
    {QuantType::Q6_K, "Q6_K", 256, sizeof(BlockQ6_K), DType::Q6_K},
    {QuantType::IQ4_NL, "IQ4_NL", 32, sizeof(BlockIQ4_NL), DType::IQ4_NL},
    {QuantType::IQ4_XS, "IQ4_XS", 256, sizeof(BlockIQ4_XS), DType::IQ4_XS},
    {QuantType::BF16, "BF16", 1, 2, DType::BF16},
    {QuantType::MXFP4, "MXFP4", 32, sizeof(BlockMXFP4), DType::MXFP4},
    {QuantType::FP8_E4M3_B128, "FP8_E4M3_B128", 1, 1, DType::F8_E4M3_B128},
    {QuantType::NVFP4, "NVFP4", 16, sizeof(BlockNVFP4), DType::NVFP4},
};
constexpr QuantType k_all[] = {
    QuantType::F32,  QuantType::F16,  QuantType::Q4_0,   QuantType::Q4_1,   QuantType::Q8_0,
    QuantType::Q2_K, QuantType::Q3_K, QuantType::Q4_K,   QuantType::Q5_K,   QuantType::Q6_K,
    QuantType::IQ4_NL, QuantType::IQ4_XS, QuantType::BF16, QuantType::MXFP4,
    QuantType::FP8_E4M3_B128, QuantType::NVFP4,
};

const TypeInfo& info(QuantType t) {
  for (const auto& i : k_types)
    if (i.type == t) return i;
  FT_CHECK(false, "unknown QuantType {}", static_cast<uint32_t>(t));
  __builtin_unreachable();
}

std::string names_list() {
  std::string s;
  for (const auto& i : k_types) s += (s.empty() ? "" : ", ") + std::string(i.name);
  return s;
}

uint32_t id(QuantType t) { return static_cast<uint32_t>(t); }
}  // namespace

std::span<const QuantType> all_types() { return k_all; }

bool is_known(uint32_t v) {
  return std::any_of(std::begin(k_types), std::end(k_types),
                     [&](const TypeInfo& i) { return id(i.type) == v; });
}

int64_t block_elems(QuantType t) { return info(t).elems; }
int64_t block_bytes(QuantType t) { return info(t).bytes; }

size_t row_bytes(QuantType t, int64_t n) {
  const TypeInfo& i = info(t);
  if (n < 0 || n % i.elems != 0)
    fail("{} rows must be a multiple of {} elements, got {}", i.name, i.elems, n);
  return static_cast<size_t>(n / i.elems) * i.bytes;
}

std::string_view name(QuantType t) { return info(t).name; }

QuantType parse(std::string_view s) {
  std::string up(s);
  for (char& c : up) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (const auto& i : k_types)
    if (i.name == up) return i.type;
  fail("unknown quant type '{}' (supported: {})", s, names_list());
}

DType to_dtype(QuantType t) { return info(t).dtype; }

QuantType from_dtype(DType d) {
  for (const auto& i : k_types)
    if (i.dtype == d) return i.type;
  fail("dtype {} is not a weight format (supported: {})", dtype_name(d), names_list());
}

float nvfp4_global_scale(float amax) { return amax > 0.f ? amax / (448.f * 6.f) : 1.f; }

void dequantize_row(QuantType t, const void* src, float* dst, int64_t n, float global_scale) {
  row_bytes(t, n);  // validates n
  switch (t) {
    case QuantType::F32: std::copy_n(static_cast<const float*>(src), n, dst); return;
    case QuantType::F16:
      for (int64_t i = 0; i < n; ++i) dst[i] = half_f32(static_cast<const uint16_t*>(src)[i]);
      return;
    case QuantType::BF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(static_cast<const uint16_t*>(src)[i]);
      return;
    case QuantType::FP8_E4M3_B128:
      fail("FP8_E4M3_B128 has 2-D block scales: use dequantize_fp8_b128");
    default: break;
  }
  visit_format(id(t), [&](auto f) {
    using F = decltype(f);
    const auto* b = static_cast<const typename F::Block*>(src);
    for (int64_t i = 0; i < n / F::kElems; ++i) F::dequant(b[i], dst + i * F::kElems);
  });
  if (t == QuantType::NVFP4 && global_scale != 1.f)
    for (int64_t i = 0; i < n; ++i) dst[i] *= global_scale;
}

void quantize_row(QuantType t, const float* src, void* dst, int64_t n, float global_scale) {
  row_bytes(t, n);
  switch (t) {
    case QuantType::F32: std::copy_n(src, n, static_cast<float*>(dst)); return;
    case QuantType::F16:
      for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(dst)[i] = f32_to_f16(src[i]);
      return;
    case QuantType::BF16:
      for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(dst)[i] = f32_to_bf16(src[i]);
      return;
    case QuantType::FP8_E4M3_B128: fail("FP8_E4M3_B128 has 2-D block scales: use quantize_fp8_b128");
    case QuantType::NVFP4: {
      auto* b = static_cast<BlockNVFP4*>(dst);
      for (int64_t i = 0; i < n / 16; ++i) quantize_block(src + i * 16, b + i, global_scale);
      return;
    }
    default: break;
  }
  visit_format(id(t), [&](auto f) {
    using F = decltype(f);
    auto* b = static_cast<typename F::Block*>(dst);
    if constexpr (!std::is_same_v<F, NVFP4>)  // handled above (needs the global scale)
      for (int64_t i = 0; i < n / F::kElems; ++i) quantize_block(src + i * F::kElems, b + i);
  });
}

void quantize_fp8_b128(const float* src, int64_t rows, int64_t cols, uint8_t* q,
                       float* scale_inv) {
  const int64_t sc = (cols + 127) / 128;
  for (int64_t br = 0; br < rows; br += 128)
    for (int64_t bc = 0; bc < cols; bc += 128) {
      const int64_t re = std::min(rows, br + 128), ce = std::min(cols, bc + 128);
      float amax = 0.f;
      for (int64_t r = br; r < re; ++r)
        for (int64_t c = bc; c < ce; ++c) amax = std::max(amax, std::fabs(src[r * cols + c]));
      const float s = amax > 0.f ? amax / 448.f : 1.f;
      scale_inv[(br / 128) * sc + bc / 128] = s;
      for (int64_t r = br; r < re; ++r)
        for (int64_t c = bc; c < ce; ++c) q[r * cols + c] = f32_to_e4m3(src[r * cols + c] / s);
    }
}

void dequantize_fp8_b128(const uint8_t* q, const float* scale_inv, int64_t rows, int64_t cols,
                         float* dst) {
  const int64_t sc = (cols + 127) / 128;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      dst[r * cols + c] = e4m3_f32(q[r * cols + c]) * scale_inv[(r / 128) * sc + c / 128];
}

void mxfp4_from_hf(const uint8_t* blocks, const uint8_t* scales, int64_t n_blocks, void* dst) {
  auto* out = static_cast<BlockMXFP4*>(dst);
  for (int64_t b = 0; b < n_blocks; ++b) {
    uint8_t v[32];
    for (int j = 0; j < 16; ++j) {
      v[2 * j] = blocks[16 * b + j] & 0xf;
      v[2 * j + 1] = blocks[16 * b + j] >> 4;
    }
    out[b].e = scales[b];
    for (int i = 0; i < 16; ++i) out[b].qs[i] = static_cast<uint8_t>(v[i] | (v[i + 16] << 4));
  }
}

void nvfp4_from_modelopt(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols,
                         void* dst) {
  if (cols % 16) fail("NVFP4 rows must be a multiple of 16 elements, got {}", cols);
  auto* out = static_cast<BlockNVFP4*>(dst);
  const int64_t nb = cols / 16;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < nb; ++b) {
      BlockNVFP4& o = out[r * nb + b];
      o.d = scales[r * nb + b];
      std::copy_n(packed + r * (cols / 2) + 8 * b, 8, o.qs);
    }
}

void dequantize_rows(const TensorView& w, int64_t r0, int64_t r1, float* dst) {
  FT_CHECK(w.ndim == 2 && r0 >= 0 && r0 <= r1 && r1 <= w.shape[0], "{} rows {}..{}", w.name, r0,
           r1);
  const int64_t cols = w.shape[1];
  const size_t rb = dtype_row_bytes(w.dtype, cols);
  const auto* base = static_cast<const uint8_t*>(w.data);
  if (w.dtype == DType::F8_E4M3_B128) {
    FT_CHECK(w.scale_inv, "{}: F8_E4M3_B128 without scale_inv", w.name);
    const int64_t sc = (cols + 127) / 128;
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = 0; c < cols; ++c)
        dst[(r - r0) * cols + c] = e4m3_f32(base[r * rb + c]) * w.scale_inv[(r / 128) * sc + c / 128];
    return;
  }
  const QuantType t = from_dtype(w.dtype);
  for (int64_t r = r0; r < r1; ++r)
    dequantize_row(t, base + r * rb, dst + (r - r0) * cols, cols, w.global_scale);
}

}  // namespace ft::quant
