// Q2_K and Q3_K one-token GEMVs with 512-bit unpack (see quant_gemv512.h): the 64 bytes of 2-bit
// codes of a super-block are one zmm, and shift j (0..3) of it holds elements 32j + l and
// 128 + 32j + l (l < 32), i.e. groups 2j, 2j + 1, 8 + 2j, 9 + 2j: one vpdpbusd per 64 codes
// against the two matching 32-byte pieces of the activations.
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c")
#include <immintrin.h>

#include <cstring>

#include "backend/cpu/quant_gemv512.h"
#include "quant/formats.h"

namespace ft::cpu {

namespace {

constexpr int k_ahead = 4096;  // prefetch distance per row stream (as quant_fused.h)

inline float f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// Lane l of shift j's dot belongs to group 2j + l / 4 (l < 8) or 8 + 2j + (l - 8) / 4.
inline __m512i group_lanes(int j) {
  const int a = 2 * j, b = 8 + 2 * j;
  return _mm512_set_epi32(b + 1, b + 1, b + 1, b + 1, b, b, b, b, a + 1, a + 1, a + 1, a + 1, a, a,
                          a, a);
}

// Activations of elements 32j .. 32j + 31 and 128 + 32j .. 128 + 32j + 31.
inline __m512i acts(const int8_t* q, int j) {
  return _mm512_inserti64x4(
      _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * j))),
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 128 + 32 * j)), 1);
}

inline void prefetch(const uint8_t* p, int bytes, const uint8_t* pf_end) {
  if (p + k_ahead >= pf_end) return;
  for (int o = 0; o < bytes; o += 64)
    _mm_prefetch(reinterpret_cast<const char*>(p) + k_ahead + o, _MM_HINT_T0);
}

// Per super-block: F::scales(p, dx, sx, &accm) returns the 16 group scales times the activation
// scales and adds the offset term; F::codes<j>(p) the 64 codes of shift j.
struct Q2K {
  static constexpr int kBytes = sizeof(quant::BlockQ2_K);  // scales[16], qs[64], d, dmin
  static __m512 scales(const uint8_t* p, __m512 dx, __m512 sx, __m512* accm) {
    const __m128i s = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m128i m4 = _mm_set1_epi8(0x0f);
    const __m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(s, m4)));
    const __m512 mn =
        _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(s, 4), m4)));
    // m_g = -dmin * mn_g
    *accm = _mm512_fnmadd_ps(_mm512_mul_ps(mn, _mm512_set1_ps(f16(p + 82))), sx, *accm);
    return _mm512_mul_ps(_mm512_mul_ps(sc, _mm512_set1_ps(f16(p + 80))), dx);
  }
  struct Codes {
    __m512i qs;
    explicit Codes(const uint8_t* p) : qs(_mm512_loadu_si512(p + 16)) {}
    template <int J>
    __m512i get() const {
      return _mm512_and_si512(_mm512_srli_epi16(qs, 2 * J), _mm512_set1_epi8(3));
    }
  };
};

struct Q3K {
  static constexpr int kBytes = sizeof(quant::BlockQ3_K);  // hmask[32], qs[64], scales[12], d
  static __m512 scales(const uint8_t* p, __m512 dx, __m512 sx, __m512* accm) {
    // k3_scale (as Unpack<Q3_K>::scales): 16 signed 6-bit scales, minus 32
    uint64_t a;
    uint32_t h;
    std::memcpy(&a, p + 96, 8);
    std::memcpy(&h, p + 104, 4);
    constexpr uint64_t m4 = 0x0f0f0f0f0f0f0f0full;
    constexpr uint32_t m2 = 0x03030303u;
    const uint64_t h01 = (h & m2) | (static_cast<uint64_t>((h >> 2) & m2) << 32);
    const uint64_t h23 = ((h >> 4) & m2) | (static_cast<uint64_t>((h >> 6) & m2) << 32);
    const uint64_t lo = (a & m4) | (h01 << 4), hi = ((a >> 4) & m4) | (h23 << 4);
    const __m128i s8 = _mm_sub_epi8(
        _mm_set_epi64x(static_cast<int64_t>(hi), static_cast<int64_t>(lo)), _mm_set1_epi8(32));
    const __m512 ws = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(s8)),
                                    _mm512_set1_ps(f16(p + 108)));
    *accm = _mm512_fnmadd_ps(_mm512_mul_ps(ws, _mm512_set1_ps(4.f)), sx, *accm);  // m = -4 d
    return _mm512_mul_ps(ws, dx);
  }
  // element 128n + 32j + l: bits 2j of qs[32n + l] | bit 4n + j of hmask[l] << 2
  struct Codes {
    __m512i qs, hm;  // hm: hmask twice, the upper copy >> 4 (bit 4 + j of n = 1 as bit j)
    explicit Codes(const uint8_t* p) : qs(_mm512_loadu_si512(p + 32)) {
      const __m512i h = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
      hm = _mm512_mask_srli_epi16(h, 0xffff0000u, h, 4);
    }
    template <int J>
    __m512i get() const {
      const __m512i lo = _mm512_and_si512(_mm512_srli_epi16(qs, 2 * J), _mm512_set1_epi8(3));
      __m512i hb;  // bit J of each byte moved to bit 2 (16-bit shifts; other bits dropped below)
      if constexpr (J < 2) hb = _mm512_slli_epi16(hm, 2 - J);
      else if constexpr (J == 2) hb = hm;
      else hb = _mm512_srli_epi16(hm, 1);
      return _mm512_ternarylogic_epi32(lo, hb, _mm512_set1_epi8(4), 0xd8);  // bit 2 from hb
    }
  };
};

// acc + sum(codes * acts) per lane, times the lane's group scale.
inline __m512 step(__m512i codes, __m512i acts, __m512 s, __m512i lanes, __m512 acc) {
  const __m512i d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), codes, acts);
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_permutexvar_ps(lanes, s), acc);
}

template <class F, int NR>
inline void rows_512(const uint8_t* const* w, int64_t nsb, const QActs& x, float* out,
                     const uint8_t* pf_end) {
  __m512 acc[NR][2], accm[NR];
  for (int r = 0; r < NR; ++r) acc[r][0] = acc[r][1] = accm[r] = _mm512_setzero_ps();
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const int8_t* q = x.q + 256 * sb;
    const __m512 dx = _mm512_loadu_ps(x.d + 16 * sb), sx = _mm512_loadu_ps(x.s + 16 * sb);
    const __m512i a[4] = {acts(q, 0), acts(q, 1), acts(q, 2), acts(q, 3)};
    for (int r = 0; r < NR; ++r) {
      const uint8_t* p = w[r] + F::kBytes * sb;
      prefetch(p, F::kBytes, pf_end);
      const __m512 s = F::scales(p, dx, sx, &accm[r]);
      const typename F::Codes c(p);
      acc[r][0] = step(c.template get<0>(), a[0], s, group_lanes(0), acc[r][0]);
      acc[r][1] = step(c.template get<1>(), a[1], s, group_lanes(1), acc[r][1]);
      acc[r][0] = step(c.template get<2>(), a[2], s, group_lanes(2), acc[r][0]);
      acc[r][1] = step(c.template get<3>(), a[3], s, group_lanes(3), acc[r][1]);
    }
  }
  for (int r = 0; r < NR; ++r)
    out[r] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[r][0], acc[r][1]), accm[r]));
}

// Two rows side by side (the two halves of the range: two memory streams), then an odd last one.
template <class F>
void gemv_512(const QActs& x, int64_t k, const uint8_t* w, size_t row_bytes, int64_t r0,
              int64_t r1, float* y) {
  const int64_t nsb = k / 256, half = (r1 - r0) / 2;
  const uint8_t* end = w + r1 * row_bytes;
  for (int64_t i = 0; i < half; ++i) {
    const uint8_t* rows[2] = {w + (r0 + i) * row_bytes, w + (r0 + half + i) * row_bytes};
    float out[2];
    rows_512<F, 2>(rows, nsb, x, out, end);
    y[r0 + i] = out[0];
    y[r0 + half + i] = out[1];
  }
  if ((r1 - r0) % 2) {
    const uint8_t* row = w + (r1 - 1) * row_bytes;
    rows_512<F, 1>(&row, nsb, x, &y[r1 - 1], end);
  }
}

}  // namespace

void gemv_q2k_512(const QActs& x, int64_t k, const uint8_t* w, size_t row_bytes, int64_t r0,
                  int64_t r1, float* y) {
  gemv_512<Q2K>(x, k, w, row_bytes, r0, r1, y);
}
void gemv_q3k_512(const QActs& x, int64_t k, const uint8_t* w, size_t row_bytes, int64_t r0,
                  int64_t r1, float* y) {
  gemv_512<Q3K>(x, k, w, row_bytes, r0, r1, y);
}

}  // namespace ft::cpu
