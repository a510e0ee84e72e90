// K-quant (Q2_K .. Q6_K) one-token GEMVs with 512-bit unpack (see quant_gemv512.h): a super-block's
// codes are unpacked 64 at a time into "pieces" of two 32-element halves (for Q2_K, shift j of
// the 64 code bytes holds elements 32j + l and 128 + 32j + l), one vpdpbusd per piece against
// the two matching 32-byte pieces of the activations, its lanes scaled by their group's scale.
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c")
#include <immintrin.h>

#include <cstring>

#include "backend/cpu/quant_gemv512.h"
#include "backend/cpu/quant_unpack.h"
#include "quant/formats.h"

namespace ft::cpu {

namespace {
using qsimd::unpack_detail::f16_at;

constexpr int k_rows = 4;  // rows side by side: memory streams sharing each activation load

// Piece j of a format's super-block: the elements a .. a + 31 and b .. b + 31 as one zmm of codes
// (F::kPieceA[j], F::kPieceB[j]). Lane l of its dot belongs to group a/16 + l/4 (l < 8) or
// b/16 + (l - 8)/4.
inline __m512i group_lanes(int a, int b) {
  a /= 16, b /= 16;
  return _mm512_set_epi32(b + 1, b + 1, b + 1, b + 1, b, b, b, b, a + 1, a + 1, a + 1, a + 1, a, a,
                          a, a);
}

// Activations of elements a .. a + 31 and b .. b + 31.
inline __m512i acts(const int8_t* q, int a, int b) {
  return _mm512_inserti64x4(
      _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + a))),
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + b)), 1);
}

// Per super-block: F::scales(p, dx, sx, &accm) returns the 16 group scales times the activation
// scales and adds the offset term; F::codes<j>(p) the 64 codes of shift j.
// Q2_K / Q3_K: shift j of the 64 code bytes holds elements 32j + l and 128 + 32j + l.
constexpr int k_pieces_23a[4] = {0, 32, 64, 96}, k_pieces_23b[4] = {128, 160, 192, 224};

struct Q2K {
  static constexpr int kBytes = sizeof(quant::BlockQ2_K);  // scales[16], qs[64], d, dmin
  static constexpr const int* kPieceA = k_pieces_23a;
  static constexpr const int* kPieceB = k_pieces_23b;
  static __m512 scales(const uint8_t* p, __m512 dx, __m512 sx, __m512* accm) {
    const __m128i s = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m128i m4 = _mm_set1_epi8(0x0f);
    const __m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(s, m4)));
    const __m512 mn =
        _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(s, 4), m4)));
    // m_g = -dmin * mn_g
    *accm = _mm512_fnmadd_ps(_mm512_mul_ps(mn, _mm512_set1_ps(f16_at(p + 82))), sx, *accm);
    return _mm512_mul_ps(_mm512_mul_ps(sc, _mm512_set1_ps(f16_at(p + 80))), dx);
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
  static constexpr const int* kPieceA = k_pieces_23a;
  static constexpr const int* kPieceB = k_pieces_23b;
  static __m512 scales(const uint8_t* p, __m512 dx, __m512 sx, __m512* accm) {
    uint64_t lo, hi;  // k3_scale: 16 signed 6-bit scales, minus 32
    qsimd::unpack_detail::k3_scale_bytes(p + 96, &lo, &hi);
    const __m128i s8 = _mm_sub_epi8(
        _mm_set_epi64x(static_cast<int64_t>(hi), static_cast<int64_t>(lo)), _mm_set1_epi8(32));
    const __m512 ws = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(s8)),
                                    _mm512_set1_ps(f16_at(p + 108)));
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

// Q4_K / Q5_K: 64 code bytes j / 2 (qs[64 (j/2) ..]) hold sub-blocks 4 (j/2) and 4 (j/2) + 2 in
// their low nibbles, + 1 and + 3 in the high ones. Scales and mins are 6-bit per sub-block of 32.
constexpr int k_pieces_45a[4] = {0, 32, 128, 160}, k_pieces_45b[4] = {64, 96, 192, 224};

inline __m512 k45_scales(const uint8_t* p, __m512 dx, __m512 sx, __m512* accm) {
  uint32_t w[3];
  std::memcpy(w, p + 4, 12);
  constexpr uint32_t m6 = 0x3f3f3f3f, m4 = 0x0f0f0f0f, m2 = 0x03030303;
  const uint32_t sc_hi = (w[2] & m4) | (((w[0] >> 6) & m2) << 4);
  const uint32_t mn_hi = ((w[2] >> 4) & m4) | (((w[1] >> 6) & m2) << 4);
  // lanes 0-7 the sub-block scales, 8-15 the mins
  const __m128i b = _mm_setr_epi32(static_cast<int>(w[0] & m6), static_cast<int>(sc_hi),
                                   static_cast<int>(w[1] & m6), static_cast<int>(mn_hi));
  const __m512 dm = _mm512_cvtph_ps(_mm256_permutexvar_epi16(
      _mm256_setr_epi16(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
      _mm256_castsi128_si256(_mm_cvtsi32_si128(*reinterpret_cast<const int*>(p)))));
  const __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(b)), dm);
  const __m512i pairs = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
  *accm = _mm512_fnmadd_ps(
      _mm512_permutexvar_ps(_mm512_add_epi32(pairs, _mm512_set1_epi32(8)), v), sx, *accm);
  return _mm512_mul_ps(_mm512_permutexvar_ps(pairs, v), dx);
}

struct Q4K {
  static constexpr int kBytes = sizeof(quant::BlockQ4_K);  // d, dmin, scales[12], qs[128]
  static constexpr const int* kPieceA = k_pieces_45a;
  static constexpr const int* kPieceB = k_pieces_45b;
  static __m512 scales(const uint8_t* p, __m512 dx, __m512 sx, __m512* accm) {
    return k45_scales(p, dx, sx, accm);
  }
  struct Codes {
    __m512i qs[2];
    explicit Codes(const uint8_t* p)
        : qs{_mm512_loadu_si512(p + 16), _mm512_loadu_si512(p + 80)} {}
    template <int J>
    __m512i get() const {
      const __m512i v = J % 2 ? _mm512_srli_epi16(qs[J / 2], 4) : qs[J / 2];
      return _mm512_and_si512(v, _mm512_set1_epi8(0x0f));
    }
  };
};

// Q5_K: Q4_K's nibble plus bit (sub-block) of qh[l] as bit 4; piece j covers sub-blocks
// s = 4 (j/2) + j%2 (bytes 0-31) and s + 2 (bytes 32-63).
struct Q5K {
  static constexpr int kBytes = sizeof(quant::BlockQ5_K);  // d, dmin, scales[12], qh[32], qs[128]
  static constexpr const int* kPieceA = k_pieces_45a;
  static constexpr const int* kPieceB = k_pieces_45b;
  static __m512 scales(const uint8_t* p, __m512 dx, __m512 sx, __m512* accm) {
    return k45_scales(p, dx, sx, accm);
  }
  struct Codes {
    __m512i qs[2], qh;  // qh: qh twice, the upper copy >> 2 (sub-block s + 2's bit at s's place)
    explicit Codes(const uint8_t* p)
        : qs{_mm512_loadu_si512(p + 48), _mm512_loadu_si512(p + 112)} {
      const __m512i h = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16)));
      qh = _mm512_mask_srli_epi16(h, 0xffff0000u, h, 2);
    }
    template <int J>
    __m512i get() const {
      const __m512i v = J % 2 ? _mm512_srli_epi16(qs[J / 2], 4) : qs[J / 2];
      constexpr int s = 4 * (J / 2) + J % 2;  // bit s of qh to bit 4 (16-bit shifts, masked)
      __m512i hb;
      if constexpr (s < 4) hb = _mm512_slli_epi16(qh, 4 - s);
      else if constexpr (s == 4) hb = qh;
      else hb = _mm512_srli_epi16(qh, s - 4);
      return _mm512_ternarylogic_epi32(_mm512_and_si512(v, _mm512_set1_epi8(0x0f)), hb,
                                       _mm512_set1_epi8(0x10), 0xd8);
    }
  };
};

// Q6_K: 64 bytes of ql hold elements 128n .. 128n + 63 (low nibbles) and 128n + 64 .. 128n + 127
// (high nibbles) in order, their bits 4-5 from qh[32n + l] bits 2i (i = element / 32 % 4).
constexpr int k_pieces_6a[4] = {0, 64, 128, 192}, k_pieces_6b[4] = {32, 96, 160, 224};

struct Q6K {
  static constexpr int kBytes = sizeof(quant::BlockQ6_K);  // ql[128], qh[64], scales[16], d
  static constexpr const int* kPieceA = k_pieces_6a;
  static constexpr const int* kPieceB = k_pieces_6b;
  static __m512 scales(const uint8_t* p, __m512 dx, __m512 sx, __m512* accm) {
    const __m512 ws = _mm512_mul_ps(
        _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 192)))),
        _mm512_set1_ps(f16_at(p + 208)));
    *accm = _mm512_fnmadd_ps(_mm512_mul_ps(ws, _mm512_set1_ps(32.f)), sx, *accm);  // m = -32 d
    return _mm512_mul_ps(ws, dx);
  }
  struct Codes {
    __m512i ql[2], qh[2];  // qh[n]: qh[32n ..] twice, the upper copy >> 2 (i = 1, 3 at i = 0, 2)
    explicit Codes(const uint8_t* p) : ql{_mm512_loadu_si512(p), _mm512_loadu_si512(p + 64)} {
      for (int n = 0; n < 2; ++n) {
        const __m512i h =
            _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 128 + 32 * n)));
        qh[n] = _mm512_mask_srli_epi16(h, 0xffff0000u, h, 2);
      }
    }
    template <int J>
    __m512i get() const {
      const __m512i v = J % 2 ? _mm512_srli_epi16(ql[J / 2], 4) : ql[J / 2];
      const __m512i hb = J % 2 ? qh[J / 2] : _mm512_slli_epi16(qh[J / 2], 4);  // to bits 4-5
      return _mm512_ternarylogic_epi32(_mm512_and_si512(v, _mm512_set1_epi8(0x0f)), hb,
                                       _mm512_set1_epi8(0x30), 0xd8);
    }
  };
};

template <class F, int NR>
inline void rows_512(const uint8_t* const* w, int64_t nsb, const QActs& x, float* out,
                     const uint8_t* pf_end) {
  __m512 acc[NR][2], accm[NR];
  for (int r = 0; r < NR; ++r) acc[r][0] = acc[r][1] = accm[r] = _mm512_setzero_ps();
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const int8_t* q = x.q + 256 * sb;
    const __m512 dx = _mm512_loadu_ps(x.d + 16 * sb), sx = _mm512_loadu_ps(x.s + 16 * sb);
    const __m512i a[4] = {acts(q, F::kPieceA[0], F::kPieceB[0]), acts(q, F::kPieceA[1], F::kPieceB[1]),
                          acts(q, F::kPieceA[2], F::kPieceB[2]), acts(q, F::kPieceA[3], F::kPieceB[3])};
    for (int r = 0; r < NR; ++r) {
      const uint8_t* p = w[r] + F::kBytes * sb;
      prefetch_ahead(p, F::kBytes, pf_end);
      const __m512 s = F::scales(p, dx, sx, &accm[r]);
      const typename F::Codes c(p);
      acc[r][0] = step(c.template get<0>(), a[0], s, group_lanes(F::kPieceA[0], F::kPieceB[0]), acc[r][0]);
      acc[r][1] = step(c.template get<1>(), a[1], s, group_lanes(F::kPieceA[1], F::kPieceB[1]), acc[r][1]);
      acc[r][0] = step(c.template get<2>(), a[2], s, group_lanes(F::kPieceA[2], F::kPieceB[2]), acc[r][0]);
      acc[r][1] = step(c.template get<3>(), a[3], s, group_lanes(F::kPieceA[3], F::kPieceB[3]), acc[r][1]);
    }
  }
  for (int r = 0; r < NR; ++r)
    out[r] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[r][0], acc[r][1]), accm[r]));
}

// The row streams of quant_gemv512.h over rows_512.
template <class F>
void gemv_512(const QActs& x, int64_t k, const uint8_t* w, size_t row_bytes, int64_t r0,
              int64_t r1, float* y) {
  const int64_t nsb = k / 256;
  row_streams<k_rows>(
      w, row_bytes, r0, r1,
      [&](auto nr, const uint8_t* const* rows, const uint8_t* end, float* out) {
        rows_512<F, decltype(nr)::value>(rows, nsb, x, out, end);
      },
      [&](int64_t r, const uint8_t*, float dot) { y[r] = dot; });
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
void gemv_q4k_512(const QActs& x, int64_t k, const uint8_t* w, size_t row_bytes, int64_t r0,
                  int64_t r1, float* y) {
  gemv_512<Q4K>(x, k, w, row_bytes, r0, r1, y);
}
void gemv_q5k_512(const QActs& x, int64_t k, const uint8_t* w, size_t row_bytes, int64_t r0,
                  int64_t r1, float* y) {
  gemv_512<Q5K>(x, k, w, row_bytes, r0, r1, y);
}
void gemv_q6k_512(const QActs& x, int64_t k, const uint8_t* w, size_t row_bytes, int64_t r0,
                  int64_t r1, float* y) {
  gemv_512<Q6K>(x, k, w, row_bytes, r0, r1, y);
}

}  // namespace ft::cpu
