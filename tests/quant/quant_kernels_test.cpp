// Quant GEMV/GEMM kernels: every format on every ISA table this CPU runs, against the f32 dot of
// the dequantized weights (within the bound int8 activation rounding allows) and against the
// scalar table (float summation order only); FP8 block-128; ops::matmul / matmul_grouped
// dispatch on quantized TensorViews.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/quant_kernels.h"
#include "backend/cpu/thread_pool.h"
#include "base/half.h"
#include "ops/ops.h"
#include "quant/formats.h"
#include "quant/quant.h"

namespace ft {
namespace {

using quant::QuantType;

std::vector<float> randn(int64_t n, uint32_t seed, float scale = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

struct QuantMatrix {
  QuantType t;
  int64_t rows, cols;
  std::vector<uint8_t> data;
  std::vector<float> deq;  // dequantized [rows, cols]
  float global = 1.f;
  TensorView view() const {
    TensorView v;
    v.dtype = quant::to_dtype(t);
    v.ndim = 2;
    v.shape = {rows, cols, 1, 1};
    v.data = data.data();
    v.global_scale = global;
    v.name = std::string(quant::name(t));
    return v;
  }
};

// FP8 e4m3 with 128x128 block scales (scale_inv through the view) and its dequantized values.
struct Fp8Matrix {
  int64_t rows, cols;
  std::vector<uint8_t> q;
  std::vector<float> s, deq;
  TensorView view() const {
    TensorView v;
    v.dtype = DType::F8_E4M3_B128;
    v.ndim = 2;
    v.shape = {rows, cols, 1, 1};
    v.data = q.data();
    v.scale_inv = s.data();
    return v;
  }
};

Fp8Matrix make_fp8(int64_t rows, int64_t cols, uint32_t seed) {
  Fp8Matrix m{rows, cols, std::vector<uint8_t>(rows * cols),
              std::vector<float>(quant::fp8_b128_scale_count(rows, cols)),
              std::vector<float>(rows * cols)};
  const auto w = randn(rows * cols, seed, 0.1f);
  quant::quantize_fp8_b128(w.data(), rows, cols, m.q.data(), m.s.data());
  quant::dequantize_rows(m.view(), 0, rows, m.deq.data());
  return m;
}

QuantMatrix make_matrix(QuantType t, int64_t rows, int64_t cols, uint32_t seed) {
  QuantMatrix m{t, rows, cols, {}, {}, 1.f};
  auto w = randn(rows * cols, seed, 0.05f);
  const size_t rb = quant::row_bytes(t, cols);
  m.data.resize(rb * rows);
  m.deq.resize(rows * cols);
  if (t == QuantType::NVFP4) m.global = quant::nvfp4_global_scale(0.25f);
  for (int64_t r = 0; r < rows; ++r) {
    quant::quantize_row(t, w.data() + r * cols, m.data.data() + r * rb, cols, m.global);
    quant::dequantize_row(t, m.data.data() + r * rb, m.deq.data() + r * cols, cols, m.global);
  }
  return m;
}

// Exact dot of dequantized weights with x, and the worst-case effect of rounding x to int8
// per 16 (half a step, amax/254, per element).
void reference(const QuantMatrix& m, const float* x, int64_t t, int64_t r, double* dot,
               double* bound) {
  double s = 0, b = 0;
  for (int64_t g = 0; g < m.cols / 16; ++g) {
    float amax = 0.f;
    for (int i = 0; i < 16; ++i) amax = std::max(amax, std::fabs(x[t * m.cols + 16 * g + i]));
    for (int i = 0; i < 16; ++i) {
      const int64_t c = 16 * g + i;
      s += double(m.deq[r * m.cols + c]) * x[t * m.cols + c];
      b += std::fabs(m.deq[r * m.cols + c]) * amax / 254.0;
    }
  }
  *dot = s;
  *bound = b;
}

// Magnitude of the terms the kernels sum in the decode() form (sum of |d u x| + |m x|): the
// scale of float rounding differences between ISA tables.
double decode_magnitude(const QuantMatrix& m, const float* x, int64_t t, int64_t r) {
  double mag = 0;
  quant::visit_format(static_cast<uint32_t>(m.t), [&](auto f) {
    using F = decltype(f);
    const size_t rb = quant::row_bytes(m.t, m.cols);
    const auto* blk = reinterpret_cast<const typename F::Block*>(m.data.data() + r * rb);
    uint8_t u[F::kElems];
    float d[F::kElems / 16], mm[F::kElems / 16];
    for (int64_t b = 0; b < m.cols / F::kElems; ++b) {
      F::decode(blk[b], u, d, mm);
      for (int i = 0; i < F::kElems; ++i)
        mag += (std::fabs(d[i / 16]) * quant::code<F>(u[i]) + std::fabs(mm[i / 16])) *
               std::fabs(x[t * m.cols + b * F::kElems + i]);
    }
  });
  return mag * m.global;
}

struct Acts {
  std::vector<int8_t> q;
  std::vector<float> d, s;
  cpu::QActs view(int shift) const { return {q.data() + shift, d.data(), s.data()}; }
};
// Quantized activations with q starting `shift` bytes into its buffer (misaligned loads).
Acts quantize(const std::vector<float>& x, int64_t n, int64_t k, int shift) {
  Acts a;
  a.q.resize(n * k + shift);
  a.d.resize(n * k / 16);
  a.s.resize(n * k / 16);
  cpu::quantize_acts(x.data(), n, k, a.q.data() + shift, a.d.data(), a.s.data());
  return a;
}

TEST(QuantActs, HandVector) {
  std::vector<float> x(32, 0.f);
  for (int i = 0; i < 16; ++i) x[i] = static_cast<float>(i * 8 - 60);  // amax 60 -> d 60/127
  x[16] = 127.f;                                                     // d = 1: q = x exactly
  x[17] = -3.f;
  x[18] = 2.5f;  // ties to even: 2
  Acts a = quantize(x, 1, 32, 0);
  EXPECT_EQ(a.d[1], 1.f);
  EXPECT_EQ(a.q[16], 127);
  EXPECT_EQ(a.q[17], -3);
  EXPECT_EQ(a.q[18], 2);
  EXPECT_EQ(a.s[1], 126.f);
  EXPECT_EQ(a.q[0], -127);  // -60 * 127/60
  EXPECT_FLOAT_EQ(a.d[0], 60.f / 127.f);
}

const QuantType k_block_types[] = {
    QuantType::Q4_0, QuantType::Q4_1, QuantType::Q8_0, QuantType::Q2_K,
    QuantType::Q3_K, QuantType::Q4_K, QuantType::Q5_K, QuantType::Q6_K,
    QuantType::IQ4_NL, QuantType::IQ4_XS, QuantType::MXFP4, QuantType::NVFP4,
};

// n <= 4 takes the SIMD tables' fused GEMV (whole 256-element super-blocks in registers, the
// rest through decode()), n = 5 the decode-once path; the column counts give rows of tail
// blocks only, super-blocks plus a tail, and whole super-blocks.
TEST(QuantKernels, EveryFormatEveryIsa) {
  for (QuantType t : k_block_types)
  for (const int64_t n : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{4}, int64_t{5}}) {
    const int64_t be = quant::block_elems(t);
    for (int64_t cols : {be * 3, be * 5 + (be == 16 ? int64_t{256} : 0), int64_t{1024} + (be == 256 ? 256 : 32), int64_t{2048}}) {
      if (cols % be) continue;
      const int64_t rows = 37, ldy = rows + 3;
      QuantMatrix m = make_matrix(t, rows, cols, static_cast<uint32_t>(cols + static_cast<int>(t)));
      auto x = randn(n * cols, 11);
      for (int64_t i = 0; i < n * cols; i += 7) x[i] *= 6.f;  // outliers within groups
      const Acts a = quantize(x, n, cols, 1);
      const size_t rb = quant::row_bytes(t, cols);
      std::vector<float> ys(n * ldy, -1.f);
      cpu::k_scalar_quant_kernels.for_dtype(quant::to_dtype(t))(
          a.view(1), n, cols, m.data.data(), rb, 0, rows, m.global, ys.data(), ldy);
      for (int64_t tt = 0; tt < n; ++tt)
        for (int64_t r = 0; r < rows; ++r) {
          double ref, bound;
          reference(m, x.data(), tt, r, &ref, &bound);
          ASSERT_NEAR(ys[tt * ldy + r], ref, bound + 1e-4 * std::fabs(ref) + 1e-5)
              << quant::name(t) << " cols " << cols << " n " << n << " token " << tt << " row " << r;
        }
      for (std::string_view isa : cpu::supported_isas()) {
        const cpu::QuantKernels* qk = cpu::quant_kernels_for(isa);
        if (!qk || isa == "scalar") continue;
        std::vector<float> yv(n * ldy, -1.f);
        // rows [3, rows - 1) only (an odd count: the GEMV's paired rows and its last single
        // one); the rest of y stays untouched
        qk->for_dtype(quant::to_dtype(t))(a.view(1), n, cols, m.data.data(), rb, 3, rows - 1,
                                          m.global, yv.data(), ldy);
        for (int64_t tt = 0; tt < n; ++tt)
          for (int64_t r = 0; r < ldy; ++r) {
            const bool inside = r >= 3 && r < rows - 1;
            const float want = inside ? ys[tt * ldy + r] : -1.f;
            const double tol = inside ? 2e-6 * decode_magnitude(m, x.data(), tt, r) + 1e-6 : 0.0;
            ASSERT_NEAR(yv[tt * ldy + r], want, tol)
                << isa << " " << quant::name(t) << " cols " << cols << " n " << n << " token " << tt
                << " row " << r;
          }
      }
    }
  }
}

TEST(QuantKernels, Fp8Block128EveryIsa) {
  for (const int64_t cols : {int64_t{200}, int64_t{1344 + 5}}) {
  const int64_t rows = 300;
  auto w = randn(rows * cols, 4, 0.1f);
  std::vector<uint8_t> q(rows * cols);
  std::vector<float> s(quant::fp8_b128_scale_count(rows, cols)), deq(rows * cols);
  quant::quantize_fp8_b128(w.data(), rows, cols, q.data(), s.data());
  quant::dequantize_fp8_b128(q.data(), s.data(), rows, cols, deq.data());
  // n = 1 takes the fused GEMV path, n = 3 decodes each row once for all tokens.
  for (const int64_t n : {int64_t{1}, int64_t{3}})
  for (std::string_view isa : cpu::supported_isas()) {
    auto x = randn(n * cols, 9);
    const cpu::QuantKernels* qk = cpu::quant_kernels_for(isa);
    ASSERT_TRUE(qk);
    std::vector<float> y(n * rows);
    qk->gemm_fp8(x.data(), n, cols, q.data(), s.data(), 0, rows, y.data(), rows);
    // an odd range across a 128-row band of scales, in two calls
    std::vector<float> y2(n * rows);
    qk->gemm_fp8(x.data(), n, cols, q.data(), s.data(), 0, 101, y2.data(), rows);
    qk->gemm_fp8(x.data(), n, cols, q.data(), s.data(), 101, rows, y2.data(), rows);
    for (int64_t i = 0; i < n * rows; ++i) ASSERT_EQ(y2[i], y[i]) << isa << " " << i;
    for (int64_t t = 0; t < n; ++t)
      for (int64_t r = 0; r < rows; ++r) {
        double ref = 0, mag = 0;
        for (int64_t c = 0; c < cols; ++c) {
          ref += double(deq[r * cols + c]) * x[t * cols + c];
          mag += std::fabs(double(deq[r * cols + c]) * x[t * cols + c]);
        }
        ASSERT_NEAR(y[t * rows + r], ref, 1e-5 * mag) << isa << " " << t << " " << r;
      }
  }
  }
}

// Random bytes (every code and scale bit pattern, the scale fields kept finite) through every
// table against the scalar one: the 512-bit unpacks of quant_gemv512.h and the AVX2 regrouped
// codes of quant_kq_avx2.h at one token, super-blocks plus an NVFP4 block tail, odd row ranges.
// Then every byte 0x00, and 0xff, against activations of magnitude 127: the codes at their
// extremes, for the kernels' integer sums that rely on bounds.
TEST(QuantKernels, RandomBytesEveryIsa) {
  std::mt19937 rng(77);
  for (QuantType t : {QuantType::Q2_K, QuantType::Q3_K, QuantType::NVFP4, QuantType::Q4_K,
                      QuantType::Q5_K, QuantType::Q6_K, QuantType::MXFP4, QuantType::IQ4_XS,
                      QuantType::IQ4_NL})
    for (const int fill : {-1, 0x00, 0xff})  // -1: random
    for (const int64_t cols : {int64_t{256}, int64_t{2048}, int64_t{1024 + 256}, int64_t{336}}) {
      if (cols % quant::block_elems(t)) continue;
      const int64_t rows = 29, n = 1;
      QuantMatrix m{t, rows, cols, {}, {}, 1.f};
      const size_t rb = quant::row_bytes(t, cols);
      m.data.resize(rb * rows);
      for (auto& b : m.data) b = static_cast<uint8_t>(fill < 0 ? rng() : fill);
      const size_t bb = quant::block_bytes(t);
      auto half = [&](size_t at) {  // a finite fp16 of magnitude 2^-20 .. 2^-6, either sign
        const uint16_t h = static_cast<uint16_t>(((rng() & 15) + 5) << 10 | (rng() & 0x3ff) |
                                                 (rng() & 1) << 15);
        std::memcpy(m.data.data() + at, &h, 2);
      };
      for (size_t b = 0; b < m.data.size() / bb; ++b) {
        const size_t o = b * bb;
        if (t == QuantType::Q2_K) half(o + 80), half(o + 82);
        if (t == QuantType::Q3_K) half(o + 108);
        if (t == QuantType::Q4_K || t == QuantType::Q5_K) half(o), half(o + 2);
        if (t == QuantType::Q6_K) half(o + 208);
        if (t == QuantType::IQ4_XS || t == QuantType::IQ4_NL) half(o);
        if (t == QuantType::NVFP4 && (m.data[o] & 0x7f) == 0x7f) m.data[o] = 0x7e;  // not NaN
        if (t == QuantType::MXFP4) m.data[o] = static_cast<uint8_t>(100 + m.data[o] % 50);
      }
      if (t == QuantType::NVFP4) m.global = 0.37f;
      auto x = randn(n * cols, 12);
      if (fill >= 0)  // |q| = 127 with one sign per group (all of a group's products alike)
        for (int64_t g = 0; g < n * cols / 16; ++g)
          std::fill_n(x.begin() + 16 * g, 16, rng() & 1 ? 1.f : -1.f);
      const Acts a = quantize(x, n, cols, 3);
      std::vector<float> ys(rows, -1.f);
      cpu::k_scalar_quant_kernels.for_dtype(quant::to_dtype(t))(a.view(3), n, cols, m.data.data(),
                                                                rb, 0, rows, m.global, ys.data(), rows);
      for (std::string_view isa : cpu::supported_isas()) {
        const cpu::QuantKernels* qk = cpu::quant_kernels_for(isa);
        if (!qk || isa == "scalar") continue;
        for (const auto& [r0, r1] : {std::pair<int64_t, int64_t>{0, rows}, {2, 27}, {5, 6}}) {
          std::vector<float> yv(rows, -1.f);
          qk->for_dtype(quant::to_dtype(t))(a.view(3), n, cols, m.data.data(), rb, r0, r1,
                                            m.global, yv.data(), rows);
          for (int64_t r = 0; r < rows; ++r) {
            const bool inside = r >= r0 && r < r1;
            const double tol = inside ? 2e-6 * decode_magnitude(m, x.data(), 0, r) + 1e-6 : 0.0;
            ASSERT_NEAR(yv[r], inside ? ys[r] : -1.f, tol)
                << isa << " " << quant::name(t) << " cols " << cols << " rows " << r0 << ".." << r1
                << " row " << r;
          }
        }
      }
    }
}

// Every e4m3 code (subnormals, both zeros, the largest) in FP8 rows, against the e4m3 table;
// the NaN code makes its row NaN.
TEST(QuantKernels, Fp8EveryCodeEveryIsa) {
  const int64_t rows = 3, cols = 256 + 64 + 7;
  std::vector<uint8_t> q(rows * cols);
  auto finite = [](int64_t v) { return static_cast<uint8_t>((v & 0x7f) == 0x7f ? 0x7e : v); };
  for (int64_t c = 0; c < cols; ++c) {
    q[c] = finite(c % 256);
    q[cols + c] = finite(255 - c % 256);
    q[2 * cols + c] = c == 100 ? 0xff : 0x38;  // NaN once, else 1.0
  }
  const std::vector<float> s = {0.75f, 3.f, 1e-3f};  // [1, 3] scales: columns / 128
  auto x = randn(cols, 5);
  for (std::string_view isa : cpu::supported_isas()) {
    const cpu::QuantKernels* qk = cpu::quant_kernels_for(isa);
    std::vector<float> y(rows);
    qk->gemm_fp8(x.data(), 1, cols, q.data(), s.data(), 0, rows, y.data(), rows);
    for (int64_t r = 0; r < 2; ++r) {
      double ref = 0, mag = 0;
      for (int64_t c = 0; c < cols; ++c) {
        const double v = double(quant::e4m3_f32(q[r * cols + c])) * s[c / 128] * x[c];
        ref += v;
        mag += std::fabs(v);
      }
      EXPECT_NEAR(y[r], ref, 1e-5 * mag) << isa << " row " << r;
    }
    EXPECT_TRUE(std::isnan(y[2])) << isa;
  }
}

// A NaN code (either sign) in each part of an FP8 row: a whole 128-column tile, the 16-column
// steps of the short last tile, its last k % 16 codes; rows side by side and a leftover row.
TEST(QuantKernels, Fp8NanEachPartEveryIsa) {
  const int64_t rows = 9, cols = 128 + 64 + 5;
  std::vector<uint8_t> q(rows * cols, 0x38);  // 1.0
  q[1 * cols + 40] = 0x7f;
  q[6 * cols + 150] = 0xff;
  q[8 * cols + 195] = 0x7f;
  const std::vector<float> s = {0.5f, 2.f};  // [1, 2] scales
  auto x = randn(cols, 6);
  double ref = 0;
  for (int64_t c = 0; c < cols; ++c) ref += double(s[c / 128]) * x[c];
  for (std::string_view isa : cpu::supported_isas()) {
    const cpu::QuantKernels* qk = cpu::quant_kernels_for(isa);
    std::vector<float> y(rows);
    qk->gemm_fp8(x.data(), 1, cols, q.data(), s.data(), 0, rows, y.data(), rows);
    for (int64_t r = 0; r < rows; ++r) {
      if (r == 1 || r == 6 || r == 8)
        EXPECT_TRUE(std::isnan(y[r])) << isa << " row " << r;
      else
        EXPECT_NEAR(y[r], ref, 1e-5 * cols) << isa << " row " << r;
    }
  }
}

// ops::matmul on quantized views matches the f32 matmul of the dequantized weights.
TEST(QuantMatmul, OpsDispatch) {
  ThreadPool pool(2);
  const int64_t n = 3, rows = 70, cols = 512;
  auto x = randn(n * cols, 21);
  for (QuantType t : {QuantType::Q4_K, QuantType::Q8_0, QuantType::NVFP4, QuantType::IQ4_XS}) {
    QuantMatrix m = make_matrix(t, rows, cols, 5);
    std::vector<float> y(n * rows), bias(rows);
    for (int64_t r = 0; r < rows; ++r) bias[r] = 0.01f * r;
    ops::matmul(pool, x.data(), n, m.view(), y.data(), bias.data());
    for (int64_t tt = 0; tt < n; ++tt)
      for (int64_t r = 0; r < rows; ++r) {
        double ref, bound;
        reference(m, x.data(), tt, r, &ref, &bound);
        ASSERT_NEAR(y[tt * rows + r], ref + bias[r], bound + 1e-4 * std::fabs(ref) + 1e-4)
            << quant::name(t) << " " << tt << " " << r;
      }
  }
  // FP8 with 128x128 scales through the view's scale_inv
  const Fp8Matrix f8 = make_fp8(rows, cols, 8);
  std::vector<float> y(n * rows);
  ops::matmul(pool, x.data(), n, f8.view(), y.data());
  for (int64_t tt = 0; tt < n; ++tt)
    for (int64_t r = 0; r < rows; ++r) {
      double ref = 0;
      for (int64_t c = 0; c < cols; ++c) ref += double(f8.deq[r * cols + c]) * x[tt * cols + c];
      ASSERT_NEAR(y[tt * rows + r], ref, 1e-4);
    }
}

// Grouped problems mixing formats (and a bf16 one) keep their own activations.
TEST(QuantMatmul, GroupedMixedFormats) {
  ThreadPool pool(2);
  const int64_t rows = 40, cols = 256;
  QuantMatrix a = make_matrix(QuantType::Q6_K, rows, cols, 1);
  QuantMatrix b = make_matrix(QuantType::MXFP4, rows, cols, 2);
  auto wb = randn(rows * cols, 3, 0.05f);
  std::vector<uint16_t> bf(rows * cols);
  for (size_t i = 0; i < bf.size(); ++i) bf[i] = f32_to_bf16(wb[i]);
  TensorView vb;
  vb.dtype = DType::BF16;
  vb.ndim = 2;
  vb.shape = {rows, cols, 1, 1};
  vb.data = bf.data();
  auto xa = randn(2 * cols, 31), xb = randn(4 * cols, 32), xc = randn(1 * cols, 33);
  std::vector<float> ya(2 * rows), yb(4 * rows), yc(rows);
  const TensorView va = a.view(), vmx = b.view();
  const ops::GemmProblem ps[] = {{xa.data(), 2, &va, ya.data()},
                                 {xc.data(), 1, &vb, yc.data()},
                                 {xb.data(), 4, &vmx, yb.data()}};
  ops::matmul_grouped(pool, ps);
  auto check = [&](const QuantMatrix& m, const std::vector<float>& x, const std::vector<float>& y,
                   int64_t n) {
    for (int64_t tt = 0; tt < n; ++tt)
      for (int64_t r = 0; r < rows; ++r) {
        double ref, bound;
        reference(m, x.data(), tt, r, &ref, &bound);
        ASSERT_NEAR(y[tt * rows + r], ref, bound + 1e-4 * std::fabs(ref) + 1e-5);
      }
  };
  check(a, xa, ya, 2);
  check(b, xb, yb, 4);
  for (int64_t r = 0; r < rows; ++r) {
    double ref = 0;
    for (int64_t c = 0; c < cols; ++c) ref += double(bf16_to_f32(bf[r * cols + c])) * xc[c];
    ASSERT_NEAR(yc[r], ref, 1e-4);
  }
}

// An MoE decode step: problems sharing one input (quantized once) next to ones with their own,
// of one and of two tokens, and an FP8 one (f32 activations) in between.
TEST(QuantMatmul, GroupedSharedInputs) {
  ThreadPool pool(2);
  const int64_t rows = 48, cols = 512;
  QuantMatrix a = make_matrix(QuantType::Q4_K, rows, cols, 11);
  QuantMatrix b = make_matrix(QuantType::Q8_0, rows, cols, 12);
  QuantMatrix c = make_matrix(QuantType::MXFP4, rows, cols, 13);
  const Fp8Matrix f8 = make_fp8(rows, cols, 14);
  const TensorView v8 = f8.view();
  auto x = randn(2 * cols, 41), x2 = randn(cols, 42);
  const TensorView va = a.view(), vb = b.view(), vc = c.view();
  std::vector<float> y[6];
  for (auto& v : y) v.assign(2 * rows, 0.f);
  const ops::GemmProblem ps[] = {{x.data(), 1, &va, y[0].data()}, {x.data(), 1, &v8, y[1].data()},
                                 {x.data(), 1, &vb, y[2].data()}, {x2.data(), 1, &vc, y[3].data()},
                                 {x.data(), 2, &vc, y[4].data()}, {x.data(), 1, &vc, y[5].data()}};
  ops::matmul_grouped(pool, ps);
  auto check = [&](const QuantMatrix& m, const float* xs, const std::vector<float>& yv, int64_t n) {
    for (int64_t t = 0; t < n; ++t)
      for (int64_t r = 0; r < rows; ++r) {
        double ref, bound;
        reference(m, xs, t, r, &ref, &bound);
        ASSERT_NEAR(yv[t * rows + r], ref, bound + 1e-4 * std::fabs(ref) + 1e-5) << quant::name(m.t);
      }
  };
  check(a, x.data(), y[0], 1);
  check(b, x.data(), y[2], 1);
  check(c, x2.data(), y[3], 1);
  check(c, x.data(), y[4], 2);
  check(c, x.data(), y[5], 1);
  for (int64_t r = 0; r < rows; ++r) {
    double ref = 0;
    for (int64_t i = 0; i < cols; ++i) ref += double(f8.deq[r * cols + i]) * x[i];
    ASSERT_NEAR(y[1][r], ref, 1e-4);
  }
}

}  // namespace
}  // namespace ft
