// Quantized GEMV/GEMM written once over a format traits type F (quant/formats.h) and an ISA
// traits type Q (kernels_quant_{scalar,avx2,avx512}.cpp). Q provides:
//   template <int MaxU> float dot_groups(const uint8_t* u, const int8_t* q, const float* d,
//                                        const float* dx, int64_t ng)
//       = sum over groups g < ng of d[g] * dx[g] * sum_{i<16} u[16g + i] * q[16g + i]
//     (MaxU bounds u, so an ISA may use 8-bit multiplies when the products cannot saturate);
//   float dot_f32(const float* a, const float* b, int64_t n);
//   void e4m3_scaled(const uint8_t* q, int64_t n, float scale, float* out): out = e4m3(q) * scale;
//   float dot_e4m3(const uint8_t* q, const float* x, int64_t n) = sum e4m3(q[i]) * x[i];
//   void lut16(uint8_t* u, int64_t n, const uint8_t* book): u[i] = book[u[i]] (u[i] < 16,
//     n a multiple of 16) -- the codebook step of formats with kHasBook;
// and optionally
//   template <class F> bool gemm_small(same arguments as gemm): a faster path for some calls
//     (the SIMD tables' fused GEMV of quant_fused.h for a few tokens); false when it declines;
//   bool gemv_fp8(x, k, w, scale_inv, r0, r1, y): the same for one-token FP8 calls.
// Include only from a translation unit compiled for Q's instruction set.
#pragma once
#include <cstdint>

#include "backend/cpu/quant_kernels.h"
#include "quant/formats.h"

namespace ft::cpu {

// Per-thread row scratch for decoded weights: k bytes of codes then 2 * k/16 floats. Grows
// on first use at a new size; never shrinks.
uint8_t* quant_row_scratch(int64_t k);
// e4m3 code -> f32, the 256-entry table the FP8 kernels decode through.
const float* e4m3_table();

namespace qsimd {

// One weight row decoded to codes u [k] and per-group d, m [k/16], then dotted with each
// token: the decode is paid once per row and reused by every token of the batch.
template <class Q, class F>
void gemm(const QActs& x, int64_t n, int64_t k, const uint8_t* w, size_t row_bytes, int64_t r0,
          int64_t r1, float post, float* y, int64_t ldy) {
  if constexpr (requires { Q::template gemm_small<F>(x, n, k, w, row_bytes, r0, r1, post, y, ldy); })
    if (Q::template gemm_small<F>(x, n, k, w, row_bytes, r0, r1, post, y, ldy)) return;
  const int64_t ng = k / 16, nb = k / F::kElems;
  uint8_t* u = quant_row_scratch(k);
  float* d = reinterpret_cast<float*>(u + k);
  float* m = d + ng;
  for (int64_t r = r0; r < r1; ++r) {
    const auto* blk = reinterpret_cast<const typename F::Block*>(w + r * row_bytes);
    for (int64_t b = 0; b < nb; ++b)
      F::decode(blk[b], u + b * F::kElems, d + b * (F::kElems / 16), m + b * (F::kElems / 16));
    if constexpr (F::kHasBook) Q::lut16(u, k, F::kBook.v);
    for (int64_t t = 0; t < n; ++t) {
      const float dot = Q::template dot_groups<F::kMaxU>(u, x.q + t * k, d, x.d + t * ng, ng);
      y[t * ldy + r] = post * (dot + Q::dot_f32(m, x.s + t * ng, ng));
    }
  }
}

template <class Q>
void gemm_fp8(const float* x, int64_t n, int64_t k, const uint8_t* w, const float* scale_inv,
              int64_t r0, int64_t r1, float* y, int64_t ldy) {
  const int64_t sc = (k + 127) / 128;
  if constexpr (requires { Q::gemv_fp8(x, k, w, scale_inv, r0, r1, y); })
    if (n == 1 && Q::gemv_fp8(x, k, w, scale_inv, r0, r1, y)) return;
  if (n == 1) {  // GEMV: decode and multiply in registers, one 128-column scale at a time
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t* q = w + r * k;
      const float* s = scale_inv + (r / 128) * sc;
      float acc = 0.f;
      for (int64_t c0 = 0; c0 < k; c0 += 128)
        acc += s[c0 / 128] * Q::dot_e4m3(q + c0, x + c0, c0 + 128 < k ? 128 : k - c0);
      y[r] = acc;
    }
    return;
  }
  // Several tokens: each row decoded once to f32, then dotted with every token.
  float* f = reinterpret_cast<float*>(quant_row_scratch(4 * k));
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* q = w + r * k;
    const float* s = scale_inv + (r / 128) * sc;
    for (int64_t c0 = 0; c0 < k; c0 += 128) {
      const int64_t c1 = c0 + 128 < k ? c0 + 128 : k;
      Q::e4m3_scaled(q + c0, c1 - c0, s[c0 / 128], f + c0);
    }
    for (int64_t t = 0; t < n; ++t) y[t * ldy + r] = Q::dot_f32(f, x + t * k, k);
  }
}

// constexpr: the per-ISA files' tables are constant-initialized, so no code compiled for
// their instruction set runs at startup (tests/unit/isa_static_init.sh).
template <class Q>
constexpr QuantKernels make_quant_kernels(const char* isa) {
  using namespace ft::quant;
  return QuantKernels{
      .isa = isa,
      .gemm = {gemm<Q, Q4_0>, gemm<Q, Q4_1>, gemm<Q, Q8_0>, gemm<Q, Q2_K>, gemm<Q, Q3_K>,
               gemm<Q, Q4_K>, gemm<Q, Q5_K>, gemm<Q, Q6_K>, gemm<Q, IQ4_NL>, gemm<Q, IQ4_XS>,
               gemm<Q, MXFP4>, gemm<Q, NVFP4>},
      .gemm_fp8 = gemm_fp8<Q>,
  };
}

}  // namespace qsimd
}  // namespace ft::cpu
