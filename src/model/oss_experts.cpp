// gpt-oss experts: interleaved gate_up_proj (bf16 x @ W layout or MXFP4 blocks/scales) split
// into canonical gate/up [I, H] and down [H, I] per expert; biases de-interleaved to f32.
#include "model/oss_experts.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "base/error.h"
#include "base/half.h"
#include "quant/quant.h"

namespace ft {

namespace {

std::string shape_of(std::initializer_list<int64_t> s) {
  std::string out = "[";
  for (int64_t d : s) out += (out.size() > 1 ? ", " : "") + std::to_string(d);
  return out + "]";
}

const TensorView& tensor(const SafetensorsSet& files, const std::string& name,
                         std::initializer_list<int64_t> shape, bool want_u8) {
  const TensorView& v = files.get(name);
  const bool float_type = v.dtype == DType::F32 || v.dtype == DType::F16 || v.dtype == DType::BF16;
  if (want_u8 ? v.dtype != DType::U8 : !float_type)
    fail("{}: tensor '{}' has dtype {}; expected {}", files.dir(), name, dtype_name(v.dtype),
         want_u8 ? "U8 (MXFP4 blocks / e8m0 scales)" : "F32, F16 or BF16");
  bool ok = v.ndim == static_cast<int>(shape.size());
  int i = 0;
  for (int64_t d : shape) ok = ok && v.shape[i++] == d;
  if (!ok)
    fail(
        "{}: tensor '{}' has shape {} but config.json implies {}; the weights do not match the "
        "config",
        files.dir(), name, v.shape_str(), shape_of(shape));
  return v;
}

float at_f32(const TensorView& v, int64_t i) {
  switch (v.dtype) {
    case DType::F32:
      return v.as<float>()[i];
    case DType::F16:
      return f16_to_f32(v.as<uint16_t>()[i]);
    default:
      return bf16_to_f32(v.as<uint16_t>()[i]);
  }
}

// A [E, rows, cols] buffer in `owned` viewed as E matrices of dtype `dt`.
std::vector<TensorView> stacked(std::vector<std::vector<uint8_t>>& owned, DType dt, int64_t E,
                                int64_t rows, int64_t cols, const std::string& name) {
  const size_t slice = static_cast<size_t>(rows) * dtype_row_bytes(dt, cols);
  auto& buf = owned.emplace_back(slice * E);
  std::vector<TensorView> out(E);
  for (int64_t e = 0; e < E; ++e) {
    TensorView& v = out[e];
    v.dtype = dt;
    v.ndim = 2;
    v.shape = {rows, cols, 1, 1};
    v.data = buf.data() + slice * e;
    v.name = fmt::format("{}[{}]", name, e);
  }
  return out;
}

// fn(e) for every expert, spread over the host's cores (a 120B checkpoint repacks ~3.6G blocks).
template <class Fn>
void for_each_expert(int64_t E, Fn fn) {
  const int64_t n = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, E);
  std::vector<std::thread> threads;
  for (int64_t t = 0; t < n; ++t)
    threads.emplace_back([&, t] {
      for (int64_t e = t; e < E; e += n) fn(e);
    });
  for (auto& th : threads) th.join();
}

// dst[e][c * rows + r] = src[e][(r * cols + c) * stride + offset] for elements of type T: the
// x @ W [E, rows(in), cols * stride] tensors of the hub into [cols, rows] matrices.
template <class T>
void transpose_into(const void* src, const std::vector<TensorView>& dst, int64_t E, int64_t rows,
                    int64_t cols, int64_t stride, int64_t offset) {
  for_each_expert(E, [&](int64_t e) {
    const T* s = static_cast<const T*>(src) + e * rows * cols * stride;
    T* d = static_cast<T*>(const_cast<void*>(dst[e].data));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) d[c * rows + r] = s[(r * cols + c) * stride + offset];
  });
}

void transpose_into(DType dt, const void* src, const std::vector<TensorView>& dst, int64_t E,
                    int64_t rows, int64_t cols, int64_t stride, int64_t offset) {
  if (dtype_size(dt) == 4)
    transpose_into<uint32_t>(src, dst, E, rows, cols, stride, offset);
  else
    transpose_into<uint16_t>(src, dst, E, rows, cols, stride, offset);
}

// MXFP4 hub tensors: blocks [E, rows, cols/32, 16], scales [E, rows, cols/32]; row r of expert e
// goes to row dst_row(r).second of (dst_row(r).first == 0 ? dst0 : dst1)[e].
template <class RowMap>
void repack_mxfp4(const SafetensorsSet& files, const std::string& base, int64_t E, int64_t rows,
                  int64_t cols, RowMap dst_row, std::vector<TensorView>* dst0,
                  std::vector<TensorView>* dst1) {
  if (cols % 32)
    fail("{}: {} has rows of {} elements, not whole 32-element MXFP4 blocks", files.dir(), base,
         cols);
  const int64_t nb = cols / 32;
  const TensorView& b = tensor(files, base + "_blocks", {E, rows, nb, 16}, true);
  const TensorView& s = tensor(files, base + "_scales", {E, rows, nb}, true);
  const size_t row_bytes = dtype_row_bytes(DType::MXFP4, cols);
  for_each_expert(E, [&](int64_t e) {
    for (int64_t r = 0; r < rows; ++r) {
      auto [which, to] = dst_row(r);
      const TensorView& d = (which == 0 ? *dst0 : *dst1)[e];
      const int64_t src = e * rows + r;
      quant::mxfp4_from_hf(b.as<uint8_t>() + src * nb * 16, s.as<uint8_t>() + src * nb, nb,
                           static_cast<uint8_t*>(const_cast<void*>(d.data)) + to * row_bytes);
    }
  });
}

}  // namespace

void load_oss_experts(const SafetensorsSet& files, const std::string& p, int64_t E, int64_t I,
                      int64_t H, std::vector<std::vector<uint8_t>>& owned, LayerWeights& L) {
  std::vector<TensorView> gate, up, down;
  // gate/up: MXFP4 rows [2I, H] (even rows gate), or x @ W [E, H, 2I] (even columns gate).
  if (files.has(p + "gate_up_proj_blocks")) {
    gate = stacked(owned, DType::MXFP4, E, I, H, p + "gate_up_proj (gate rows)");
    up = stacked(owned, DType::MXFP4, E, I, H, p + "gate_up_proj (up rows)");
    repack_mxfp4(
        files, p + "gate_up_proj", E, 2 * I, H,
        [](int64_t r) { return std::pair<int, int64_t>(r % 2, r / 2); }, &gate, &up);
  } else if (files.has(p + "gate_up_proj")) {
    const TensorView& gu = tensor(files, p + "gate_up_proj", {E, H, 2 * I}, false);
    gate = stacked(owned, gu.dtype, E, I, H, p + "gate_up_proj (gate columns)");
    up = stacked(owned, gu.dtype, E, I, H, p + "gate_up_proj (up columns)");
    transpose_into(gu.dtype, gu.data, gate, E, H, I, 2, 0);
    transpose_into(gu.dtype, gu.data, up, E, H, I, 2, 1);
  } else {
    fail("{}: no experts found under '{}' (looked for gate_up_proj and gate_up_proj_blocks)",
         files.dir(), p);
  }
  // down: MXFP4 rows [H, I], or x @ W [E, I, H].
  if (files.has(p + "down_proj_blocks")) {
    down = stacked(owned, DType::MXFP4, E, H, I, p + "down_proj");
    repack_mxfp4(
        files, p + "down_proj", E, H, I, [](int64_t r) { return std::pair<int, int64_t>(0, r); },
        &down, nullptr);
  } else {
    const TensorView& dn = tensor(files, p + "down_proj", {E, I, H}, false);
    down = stacked(owned, dn.dtype, E, H, I, p + "down_proj");
    transpose_into(dn.dtype, dn.data, down, E, I, H, 1, 0);
  }
  L.experts.resize(E);
  for (int64_t e = 0; e < E; ++e) L.experts[e] = {.gate = gate[e], .up = up[e], .down = down[e]};
  const TensorView& gub = tensor(files, p + "gate_up_proj_bias", {E, 2 * I}, false);
  const TensorView& db = tensor(files, p + "down_proj_bias", {E, H}, false);
  L.expert_gate_bias.resize(E * I);
  L.expert_up_bias.resize(E * I);
  L.expert_down_bias.resize(E * H);
  for (int64_t j = 0; j < E * I; ++j) {
    L.expert_gate_bias[j] = at_f32(gub, 2 * j);
    L.expert_up_bias[j] = at_f32(gub, 2 * j + 1);
  }
  for (int64_t j = 0; j < E * H; ++j) L.expert_down_bias[j] = at_f32(db, j);
}

}  // namespace ft
