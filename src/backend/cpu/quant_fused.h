// Fused quantized GEMV for a few tokens: each 256-element super-block of a weight row is
// unpacked in registers (quant_unpack.h) and multiplied with up to 4 tokens' int8 activations
// at once, so the row is read from memory once and never written back to a scratch buffer.
// Written once over the format F and an ISA traits type Q, which provides
//   template <int MaxU> __m256i dot(__m256i u, __m256i q): 8 int32 lanes, lane j the sum of
//     u[4j + i] * q[4j + i] (i < 4) for unsigned codes u <= MaxU and int8 q (vpdpbusd shape).
// Lanes 0-3 of a chunk's dot are its first group of 16, lanes 4-7 its second; each group's
// weight scale times activation scale is spread over its four lanes by one permute.
// A row tail shorter than a super-block goes through F::decode() like the scalar table.
#pragma once
#include <immintrin.h>

#include <utility>

#include "backend/cpu/quant_kernels.h"
#include "backend/cpu/quant_unpack.h"

namespace ft::cpu::qsimd {

inline float hsum(__m256 a) {
  __m128 r = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  return _mm_cvtss_f32(_mm_add_ss(r, _mm_movehdup_ps(r)));
}

// Lanes [2i x4, 2i+1 x4] of an 8-group scale vector: chunk i's two groups over its lanes.
template <int I>
inline __m256 spread(__m256 s) {
  return _mm256_permutevar8x32_ps(
      s, _mm256_setr_epi32(2 * I, 2 * I, 2 * I, 2 * I, 2 * I + 1, 2 * I + 1, 2 * I + 1, 2 * I + 1));
}

// Distance in bytes ahead of the current super-block that each row prefetches.
constexpr int k_prefetch_bytes = 768;

// Dot products of one row with NT tokens (t0 .. t0 + NT - 1), summed over whole super-blocks
// [0, nsb) and the block tail; out[t] = dot.
template <class Q, class F, int NT>
inline void fused_row(const uint8_t* row, int64_t k, const QActs& x, int64_t t0, float* out) {
  using U = Unpack<F>;
  const int64_t ng = k / 16, nsb = k / 256;
  __m256 acc[NT][2], accm[NT];
  for (int t = 0; t < NT; ++t) acc[t][0] = acc[t][1] = accm[t] = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const uint8_t* p = row + sb * U::kBytes;
    _mm_prefetch(reinterpret_cast<const char*>(p) + k_prefetch_bytes, _MM_HINT_T0);
    __m256 ws[2], ms[2], ps[NT][2];
    U::scales(p, ws, ms);
    for (int t = 0; t < NT; ++t) {
      const float* dx = x.d + (t0 + t) * ng + 16 * sb;
      const float* sx = x.s + (t0 + t) * ng + 16 * sb;
      ps[t][0] = _mm256_mul_ps(ws[0], _mm256_loadu_ps(dx));
      ps[t][1] = _mm256_mul_ps(ws[1], _mm256_loadu_ps(dx + 8));
      accm[t] = _mm256_fmadd_ps(ms[0], _mm256_loadu_ps(sx), accm[t]);
      accm[t] = _mm256_fmadd_ps(ms[1], _mm256_loadu_ps(sx + 8), accm[t]);
    }
    const int8_t* q = x.q + 256 * sb;
    [&]<int... C>(std::integer_sequence<int, C...>) {
      (
          [&] {
            const __m256i u = U::template codes<C>(p);
            for (int t = 0; t < NT; ++t) {
              const __m256i qv = _mm256_loadu_si256(
                  reinterpret_cast<const __m256i*>(q + (t0 + t) * k + 32 * C));
              const __m256 dot = _mm256_cvtepi32_ps(Q::template dot<F::kMaxU>(u, qv));
              acc[t][C % 2] = _mm256_fmadd_ps(dot, spread<C % 4>(ps[t][C / 4]), acc[t][C % 2]);
            }
          }(),
          ...);
    }(std::make_integer_sequence<int, 8>{});
  }
  for (int t = 0; t < NT; ++t)
    out[t] = hsum(_mm256_add_ps(_mm256_add_ps(acc[t][0], acc[t][1]), accm[t]));
  // tail: the blocks past the last whole super-block (32- and 16-element formats only)
  const int64_t e0 = 256 * nsb;
  if (e0 == k) return;
  constexpr int be = F::kElems;
  const auto* blk = reinterpret_cast<const typename F::Block*>(row + nsb * U::kBytes);
  for (int64_t b = 0; b < (k - e0) / be; ++b) {
    alignas(32) uint8_t u[be];
    float d[be / 16], m[be / 16];
    F::decode(blk[b], u, d, m);
    for (int t = 0; t < NT; ++t) {
      const int64_t e = e0 + b * be, g = (t0 + t) * ng + e / 16;
      const int8_t* qt = x.q + (t0 + t) * k + e;
      for (int j = 0; j < be / 16; ++j) {
        int32_t s = 0;
        for (int i = 0; i < 16; ++i) s += static_cast<int32_t>(quant::code<F>(u[16 * j + i])) * qt[16 * j + i];
        out[t] += d[j] * x.d[g + j] * static_cast<float>(s) + m[j] * x.s[g + j];
      }
    }
  }
}

// y[t * ldy + r] = post * dot(x_t, w_r) for t < n, r in [r0, r1), tokens in tiles of 4.
template <class Q, class F>
void gemm_fused(const QActs& x, int64_t n, int64_t k, const uint8_t* w, size_t row_bytes,
                int64_t r0, int64_t r1, float post, float* y, int64_t ldy) {
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = w + r * row_bytes;
    float out[4];
    for (int64_t t0 = 0; t0 < n; t0 += 4) {
      const int64_t nt = n - t0 < 4 ? n - t0 : 4;
      switch (nt) {
        case 1: fused_row<Q, F, 1>(row, k, x, t0, out); break;
        case 2: fused_row<Q, F, 2>(row, k, x, t0, out); break;
        case 3: fused_row<Q, F, 3>(row, k, x, t0, out); break;
        default: fused_row<Q, F, 4>(row, k, x, t0, out); break;
      }
      for (int64_t t = 0; t < nt; ++t) y[(t0 + t) * ldy + r] = post * out[t];
    }
  }
}

}  // namespace ft::cpu::qsimd
