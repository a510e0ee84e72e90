// Fused quantized GEMV for a few tokens: each 256-element super-block of a weight row is
// unpacked in registers (quant_unpack.h) and multiplied with up to 4 tokens' int8 activations
// at once, so the row is read from memory once and never written back to a scratch buffer.
// Written once over the format F and an ISA traits type Q, which provides the accumulation
// of two chunks (64 codes, groups 4I .. 4I + 3 of the super-block):
//   using Acc; using Ps; static Acc zero(); static float total(Acc a, Acc b, __m256 c);
//   static Ps scales16(__m256 lo, __m256 hi): the 16 group scales (weight x activation);
//   template <int MaxU, int I> static Acc accumulate(Acc acc, __m256i u0, __m256i u1,
//       const int8_t* q, const Ps& ps): acc + lane-wise sum(u * q) * group scale, where
//     u0, u1 are the chunks' unsigned codes (<= MaxU) and q their 64 int8 activations.
// A vpdpbusd lane sums 4 bytes of one group of 16, so each group's scale is spread over its
// four lanes by one permute.
// A row tail shorter than a super-block goes through F::decode() like the scalar table.
#pragma once
#include <immintrin.h>

#include <type_traits>
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

// The accumulate step over 256-bit vectors (two chunks, each with its own accumulator), for tables
// whose dot is 8 lanes wide: Q derives from Ymm<Q> and provides dot<MaxU>(u, q) -> 8 int32
// lanes, lane j = sum of u[4j + i] * q[4j + i] (the vpdpbusd shape).
template <class Q>
struct Ymm {
  struct Acc {
    __m256 a, b;
  };
  struct Ps {
    __m256 lo, hi;
  };
  static Acc zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
  static Ps scales16(__m256 lo, __m256 hi) { return {lo, hi}; }
  static float total(Acc x, Acc y, __m256 c) {
    return hsum(_mm256_add_ps(_mm256_add_ps(_mm256_add_ps(x.a, x.b), _mm256_add_ps(y.a, y.b)), c));
  }
  // SIGNED: the codes are offset-128 (k_offset128) and Q::dot_signed dots them as u - 128.
  template <int MaxU, int I, bool SIGNED = false>
  static Acc accumulate(Acc acc, __m256i u0, __m256i u1, const int8_t* q, const Ps& ps) {
    const __m256 s = I < 2 ? ps.lo : ps.hi;
    auto dot = [](__m256i u, const int8_t* qp) {
      const __m256i qv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qp));
      if constexpr (SIGNED)
        return Q::dot_signed(u, qv);
      else
        return Q::template dot<MaxU>(u, qv);
    };
    const __m256 d0 = _mm256_cvtepi32_ps(dot(u0, q));
    const __m256 d1 = _mm256_cvtepi32_ps(dot(u1, q + 32));
    return {_mm256_fmadd_ps(d0, spread<(2 * I) % 4>(s), acc.a),
            _mm256_fmadd_ps(d1, spread<(2 * I + 1) % 4>(s), acc.b)};
  }
};

// Distance in bytes ahead of the current super-block that each row prefetches (every line of
// it): single-thread GEMV over 1 GiB here went from ~6 to ~8.5 GB/s going from 768 to 4096.
#ifndef FT_QUANT_PREFETCH
#define FT_QUANT_PREFETCH 4096
#endif
constexpr int k_prefetch_bytes = FT_QUANT_PREFETCH;

// Formats whose codes are u = v + 128 with m = -128 d (w = d v): Q8_0's int8, and IQ4_NL /
// IQ4_XS's codebook. Where the ISA has Q::dot_signed(u, q) (sum of (u - 128) * q, e.g. AVX2's
// sign trick on vpmaddubsw, which cannot saturate for |v| <= 128, |q| <= 127), the fused GEMV
// dots v directly and drops the m term, instead of widening u to 16 bits.
template <class F>
constexpr bool k_offset128 = std::is_same_v<F, quant::Q8_0> || std::is_same_v<F, quant::IQ4_NL> ||
                             std::is_same_v<F, quant::IQ4_XS>;

// Dot products of NR rows with NT tokens (t0 .. t0 + NT - 1), summed over whole super-blocks
// [0, nsb) and the block tail; out[r * NT + t]. Several rows side by side are several memory
// streams in flight (one stream per core is latency-bound on many-core Xeons).
// Prefetches stop at pf_end (the end of the caller's row range: what lies past it is another
// task's, and fetching it early would only add DRAM traffic when tasks are small).
template <class Q, class F, int NR, int NT>
inline void fused_rows(const uint8_t* const* rows, int64_t k, const QActs& x, int64_t t0,
                       float* out, const uint8_t* pf_end) {
  using U = Unpack<F>;
  constexpr bool kSigned =
      k_offset128<F> && requires(__m256i v) { Q::dot_signed(v, v); };
  const int64_t ng = k / 16, nsb = k / 256;
  typename Q::Acc acc[NR][NT][2];
  __m256 accm[NR][NT];
  for (int r = 0; r < NR; ++r)
    for (int t = 0; t < NT; ++t) {
      acc[r][t][0] = acc[r][t][1] = Q::zero();
      accm[r][t] = _mm256_setzero_ps();
    }
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const int8_t* q = x.q + 256 * sb;
    for (int r = 0; r < NR; ++r) {
      const uint8_t* p = rows[r] + sb * U::kBytes;
      if (p + k_prefetch_bytes < pf_end)
        for (int o = 0; o < U::kBytes; o += 64)  // every line of the super-block k_prefetch ahead
          _mm_prefetch(reinterpret_cast<const char*>(p) + k_prefetch_bytes + o, _MM_HINT_T0);
      __m256 ws[2], ms[2];
      typename Q::Ps ps[NT];
      U::scales(p, ws, ms);
      for (int t = 0; t < NT; ++t) {
        const float* dx = x.d + (t0 + t) * ng + 16 * sb;
        const float* sx = x.s + (t0 + t) * ng + 16 * sb;
        ps[t] = Q::scales16(_mm256_mul_ps(ws[0], _mm256_loadu_ps(dx)),
                            _mm256_mul_ps(ws[1], _mm256_loadu_ps(dx + 8)));
        if constexpr (!kSigned) {  // signed dots need no m term
          accm[r][t] = _mm256_fmadd_ps(ms[0], _mm256_loadu_ps(sx), accm[r][t]);
          accm[r][t] = _mm256_fmadd_ps(ms[1], _mm256_loadu_ps(sx + 8), accm[r][t]);
        }
      }
      [&]<int... I>(std::integer_sequence<int, I...>) {
        (
            [&] {
              const __m256i u0 = U::template codes<2 * I>(p), u1 = U::template codes<2 * I + 1>(p);
              for (int t = 0; t < NT; ++t)
                acc[r][t][I % 2] = Q::template accumulate<F::kMaxU, I, kSigned>(
                    acc[r][t][I % 2], u0, u1, q + (t0 + t) * k + 64 * I, ps[t]);
            }(),
            ...);
      }(std::make_integer_sequence<int, 4>{});
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int t = 0; t < NT; ++t) out[r * NT + t] = Q::total(acc[r][t][0], acc[r][t][1], accm[r][t]);
  // tail: the blocks past the last whole super-block (32- and 16-element formats only)
  const int64_t e0 = 256 * nsb;
  if (e0 == k) return;
  constexpr int be = F::kElems;
  for (int r = 0; r < NR; ++r) {
    const auto* blk = reinterpret_cast<const typename F::Block*>(rows[r] + nsb * U::kBytes);
    for (int64_t b = 0; b < (k - e0) / be; ++b) {
      alignas(32) uint8_t u[be];
      float d[be / 16], m[be / 16];
      F::decode(blk[b], u, d, m);
      for (int t = 0; t < NT; ++t) {
        const int64_t e = e0 + b * be, g = (t0 + t) * ng + e / 16;
        const int8_t* qt = x.q + (t0 + t) * k + e;
        for (int j = 0; j < be / 16; ++j) {
          int32_t s = 0;
          for (int i = 0; i < 16; ++i)
            s += static_cast<int32_t>(quant::code<F>(u[16 * j + i])) * qt[16 * j + i];
          out[r * NT + t] += d[j] * x.d[g + j] * static_cast<float>(s) + m[j] * x.s[g + j];
        }
      }
    }
  }
}

// y[t * ldy + r] = post * dot(x_t, w_r) for t < n, r in [r0, r1), tokens in tiles of 4. One
// token (GEMV) walks the two halves of the row range side by side: two memory streams.
template <class Q, class F>
void gemm_fused(const QActs& x, int64_t n, int64_t k, const uint8_t* w, size_t row_bytes,
                int64_t r0, int64_t r1, float post, float* y, int64_t ldy) {
  const uint8_t* end = w + r1 * row_bytes;
  if (n == 1) {
    const int64_t half = (r1 - r0) / 2;
    for (int64_t i = 0; i < half; ++i) {
      const uint8_t* rows[2] = {w + (r0 + i) * row_bytes, w + (r0 + half + i) * row_bytes};
      float out[2];
      fused_rows<Q, F, 2, 1>(rows, k, x, 0, out, end);
      y[r0 + i] = post * out[0];
      y[r0 + half + i] = post * out[1];
    }
    if ((r1 - r0) % 2) {
      const uint8_t* row = w + (r1 - 1) * row_bytes;
      float out;
      fused_rows<Q, F, 1, 1>(&row, k, x, 0, &out, end);
      y[r1 - 1] = post * out;
    }
    return;
  }
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = w + r * row_bytes;
    float out[4];
    for (int64_t t0 = 0; t0 < n; t0 += 4) {
      const int64_t nt = n - t0 < 4 ? n - t0 : 4;
      switch (nt) {
        case 1: fused_rows<Q, F, 1, 1>(&row, k, x, t0, out, end); break;
        case 2: fused_rows<Q, F, 1, 2>(&row, k, x, t0, out, end); break;
        case 3: fused_rows<Q, F, 1, 3>(&row, k, x, t0, out, end); break;
        default: fused_rows<Q, F, 1, 4>(&row, k, x, t0, out, end); break;
      }
      for (int64_t t = 0; t < nt; ++t) y[(t0 + t) * ldy + r] = post * out[t];
    }
  }
}

}  // namespace ft::cpu::qsimd
