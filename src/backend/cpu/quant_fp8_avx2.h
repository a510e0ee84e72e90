// FP8 e4m3 (128x128 block scales) on AVX2 + F16C: the decode behind the AVX2 table's
// e4m3_scaled / dot_e4m3, and its one-token GEMV. Include only from kernels_quant_avx2.cpp.
//
// Decode: an e4m3 code's 7 magnitude bits placed at fp16 bits 7..13 are exactly the fp16 of
// value / 256 (exponent bias 7 -> 15 is the 2^-8; e4m3 subnormals land on fp16 subnormals),
// then vcvtph2ps; sums are multiplied back by 256.
//
// GEMV: on Zen 3 vcvtph2ps from memory issues twice per cycle, from a register once (sharing
// that port with vextracti128), so each tile's codes are first turned into fp16 words in an L1
// buffer and converted from there. The words come from vpmaddubsw (128 times the signed code,
// for the even codes and for the odd ones) and an and; x is permuted once per call to match
// (fp8_perm_x). Single-thread, this measured ~1.6x the rate of e4m3_32_over_256 in registers.
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <limits>

#include "backend/cpu/quant_fused.h"
#include "backend/cpu/quant_gemv512.h"
#include "backend/cpu/quant_simd.h"

namespace ft::cpu::fp8avx2 {

constexpr int k_rows = 4;  // rows side by side (2 measured ~15% slower)
// Prefetch distance per row: 4 KiB (the AVX-512 kernels' k_ahead_512) measured ~20% slower
// from DRAM here (four rows of it in flight, into a 32 KiB L1); 0.5 .. 2 KiB all did well.
constexpr int k_ahead = 1024;

// e4m3(q[0 .. 32)) / 256 in element order, NaN codes as NaN: words of bytes unpacked with
// their sign (lo: the magnitude, or 0xff for NaN, whose bit 7 then fills the fp16 exponent;
// hi: the sign in bit 0) shifted left by 7.
inline void e4m3_32_over_256(const uint8_t* q, __m256 v[4]) {
  const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
  const __m256i mag = _mm256_and_si256(b, _mm256_set1_epi8(0x7f));
  const __m256i lo = _mm256_or_si256(mag, _mm256_cmpeq_epi8(mag, _mm256_set1_epi8(0x7f)));
  const __m256i hi = _mm256_cmpgt_epi8(_mm256_setzero_si256(), b);
  const __m256i w0 = _mm256_slli_epi16(_mm256_unpacklo_epi8(lo, hi), 7);  // codes 0-7, 16-23
  const __m256i w1 = _mm256_slli_epi16(_mm256_unpackhi_epi8(lo, hi), 7);  // codes 8-15, 24-31
  v[0] = _mm256_cvtph_ps(_mm256_castsi256_si128(w0));
  v[1] = _mm256_cvtph_ps(_mm256_castsi256_si128(w1));
  v[2] = _mm256_cvtph_ps(_mm256_extracti128_si256(w0, 1));
  v[3] = _mm256_cvtph_ps(_mm256_extracti128_si256(w1, 1));
}

// out = e4m3(q) * scale.
inline void e4m3_scaled(const uint8_t* q, int64_t n, float scale, float* out) {
  const __m256 s = _mm256_set1_ps(256.f * scale);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256 v[4];
    e4m3_32_over_256(q + i, v);
    for (int j = 0; j < 4; ++j) _mm256_storeu_ps(out + i + 8 * j, _mm256_mul_ps(v[j], s));
  }
  const float* lut = e4m3_table();
  for (; i < n; ++i) out[i] = lut[q[i]] * scale;
}

// sum e4m3(q[i]) * x[i].
inline float dot_e4m3(const uint8_t* q, const float* x, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256 v[4];
    e4m3_32_over_256(q + i, v);
    acc0 = _mm256_fmadd_ps(v[0], _mm256_loadu_ps(x + i), acc0);
    acc1 = _mm256_fmadd_ps(v[1], _mm256_loadu_ps(x + i + 8), acc1);
    acc0 = _mm256_fmadd_ps(v[2], _mm256_loadu_ps(x + i + 16), acc0);
    acc1 = _mm256_fmadd_ps(v[3], _mm256_loadu_ps(x + i + 24), acc1);
  }
  float r = 256.f * qsimd::hsum(_mm256_add_ps(acc0, acc1));
  const float* lut = e4m3_table();
  for (; i < n; ++i) r += lut[q[i]] * x[i];
  return r;
}

// ---- GEMV

// fp16 words of e4m3 / 256 for the even (kOdd false) or odd codes of b, lane-wise: vpmaddubsw
// against 128 in every other byte gives the signed code times 128 (magnitude at bits 7..13,
// the sign in bits 15 and 14); the and clears bit 14. NaN codes come out as 480 / 256: callers
// check for them separately.
constexpr int16_t k_bit14_clear = static_cast<int16_t>(0xbfff);
template <bool kOdd>
inline __m256i words(__m256i b) {
  const __m256i k128 = _mm256_set1_epi16(static_cast<int16_t>(kOdd ? 0x8000 : 0x0080));
  return _mm256_and_si256(_mm256_maddubs_epi16(k128, b), _mm256_set1_epi16(k_bit14_clear));
}
template <bool kOdd>
inline __m128i words(__m128i b) {
  const __m128i k128 = _mm_set1_epi16(static_cast<int16_t>(kOdd ? 0x8000 : 0x0080));
  return _mm_and_si128(_mm_maddubs_epi16(k128, b), _mm_set1_epi16(k_bit14_clear));
}

// vcvtph2ps from memory. The asm keeps the memory form: GCC would load the words into a
// register (or never store them) and use the slower register form.
inline __m256 cvtph_mem(const __m128i* p) {
  __m256 r;
  asm("vcvtph2ps %1, %0" : "=x"(r) : "m"(*p));
  return r;
}

// NaN codes (0x7f, 0xff) among the bytes seen: the largest unsigned byte reaches 0xff only
// through 0xff, the largest signed one 0x7f only through 0x7f.
struct NanSeen {
  __m256i umax = _mm256_setzero_si256(), smax = _mm256_set1_epi8(-128);
  void add(__m256i b) {
    umax = _mm256_max_epu8(umax, b);
    smax = _mm256_max_epi8(smax, b);
  }
  bool any() const {
    const __m256i hit = _mm256_or_si256(_mm256_cmpeq_epi8(umax, _mm256_set1_epi8(-1)),
                                        _mm256_cmpeq_epi8(smax, _mm256_set1_epi8(0x7f)));
    return !_mm256_testz_si256(hit, hit);
  }
};

// x with each whole 16 columns as its 8 even then 8 odd ones (the order of words<false>,
// words<true>), the k % 16 tail in order.
inline void fp8_perm_x(const float* x, int64_t k, float* xp) {
  int64_t c = 0;
  for (; c + 16 <= k; c += 16) {
    const __m256 a = _mm256_loadu_ps(x + c), b = _mm256_loadu_ps(x + c + 8);
    // shuffle_ps gives [a0 a2 b0 b2 | a4 a6 b4 b6]; qwords 0 2 1 3 put them in order
    _mm256_storeu_ps(xp + c, _mm256_castpd_ps(_mm256_permute4x64_pd(
                                 _mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xd8)));
    _mm256_storeu_ps(xp + c + 8, _mm256_castpd_ps(_mm256_permute4x64_pd(
                                     _mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xdd)), 0xd8)));
  }
  for (; c < k; ++c) xp[c] = x[c];
}

// out[j] = dot(x, rows[j]) with rows[j]'s column-tile scales s[j] (xp: x permuted): each
// 128-column tile summed in registers (values / 256), scaled, accumulated; whole tiles go
// through the L1 word buffer, a short last one 16 columns at a time in registers, then its
// k % 16 codes by the table. Row j's arithmetic does not depend on NR, so results do not
// depend on the row range.
template <int NR>
inline void fp8_rows(const uint8_t* const* rows, const float* const* s, const float* xp,
                     int64_t k, const uint8_t* pf_end, float* out) {
  __m256 acc[NR];
  NanSeen nan[NR];
  for (int j = 0; j < NR; ++j) acc[j] = _mm256_setzero_ps();
  for (int64_t c0 = 0; c0 < k; c0 += 128) {
    __m256 t[NR][2];
    for (int j = 0; j < NR; ++j) t[j][0] = t[j][1] = _mm256_setzero_ps();
    if (c0 + 128 <= k) {
      alignas(32) __m256i w[NR][8];  // per 32 codes: even words, odd words
      for (int j = 0; j < NR; ++j) {
        const uint8_t* p = rows[j] + c0;
        if (p + k_ahead < pf_end) {
          _mm_prefetch(reinterpret_cast<const char*>(p) + k_ahead, _MM_HINT_T0);
          _mm_prefetch(reinterpret_cast<const char*>(p) + k_ahead + 64, _MM_HINT_T0);
        }
        for (int i = 0; i < 4; ++i) {
          const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * i));
          nan[j].add(b);
          w[j][2 * i] = words<false>(b);
          w[j][2 * i + 1] = words<true>(b);
        }
      }
      for (int i = 0; i < 4; ++i) {
        const float* xc = xp + c0 + 32 * i;
        const __m256 x0 = _mm256_loadu_ps(xc), x1 = _mm256_loadu_ps(xc + 8);
        const __m256 x2 = _mm256_loadu_ps(xc + 16), x3 = _mm256_loadu_ps(xc + 24);
        for (int j = 0; j < NR; ++j) {
          // lanes: even words of codes 0-15 | 16-31, then the odd ones
          const auto* h = reinterpret_cast<const __m128i*>(&w[j][2 * i]);
          t[j][0] = _mm256_fmadd_ps(cvtph_mem(h), x0, t[j][0]);
          t[j][1] = _mm256_fmadd_ps(cvtph_mem(h + 2), x1, t[j][1]);
          t[j][0] = _mm256_fmadd_ps(cvtph_mem(h + 1), x2, t[j][0]);
          t[j][1] = _mm256_fmadd_ps(cvtph_mem(h + 3), x3, t[j][1]);
        }
      }
    } else {
      for (int64_t c = c0; c + 16 <= k; c += 16) {
        const __m256 x0 = _mm256_loadu_ps(xp + c), x1 = _mm256_loadu_ps(xp + c + 8);
        for (int j = 0; j < NR; ++j) {
          const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[j] + c));
          nan[j].add(_mm256_zextsi128_si256(b));
          t[j][0] = _mm256_fmadd_ps(_mm256_cvtph_ps(words<false>(b)), x0, t[j][0]);
          t[j][1] = _mm256_fmadd_ps(_mm256_cvtph_ps(words<true>(b)), x1, t[j][1]);
        }
      }
    }
    for (int j = 0; j < NR; ++j)
      acc[j] = _mm256_fmadd_ps(_mm256_add_ps(t[j][0], t[j][1]), _mm256_set1_ps(s[j][c0 / 128]),
                               acc[j]);
  }
  const float* lut = e4m3_table();
  for (int j = 0; j < NR; ++j) {
    float tail = 0.f;  // in the last tile: scaled by its s like the generic kernel
    for (int64_t c = k & ~int64_t{15}; c < k; ++c) tail += lut[rows[j][c]] * xp[c];
    const float dot = 256.f * qsimd::hsum(acc[j]) + (k % 16 ? s[j][(k - 1) / 128] * tail : 0.f);
    out[j] = nan[j].any() ? std::numeric_limits<float>::quiet_NaN() : dot;
  }
}

// y[r] = dot(x, e4m3 row r) for r in [r0, r1), scale_inv [ceil(rows/128), ceil(k/128)]:
// k_rows rows side by side, one from each k_rows-th of the range (row_streams), so that each
// stream's prefetch runs on into its next row.
inline void gemv(const float* x, int64_t k, const uint8_t* w, const float* scale_inv, int64_t r0,
                 int64_t r1, float* y) {
  float* xp = reinterpret_cast<float*>(quant_row_scratch(4 * k));
  fp8_perm_x(x, k, xp);
  const int64_t sc = (k + 127) / 128;
  row_streams<k_rows>(
      w, static_cast<size_t>(k), r0, r1,
      [&](auto nr, const uint8_t* const* rows, const uint8_t* pf_end, float* out) {
        constexpr int n = decltype(nr)::value;
        const float* s[n];
        for (int j = 0; j < n; ++j) s[j] = scale_inv + (rows[j] - w) / k / 128 * sc;
        fp8_rows<n>(rows, s, xp, k, pf_end, out);
      },
      [&](int64_t r, const uint8_t*, float dot) { y[r] = dot; });
}

}  // namespace ft::cpu::fp8avx2
