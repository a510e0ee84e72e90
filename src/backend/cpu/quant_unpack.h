// Register-level unpack of every block format, 256 elements (a "super-block") at a time, for the
// fused quantized GEMV (quant_fused.h): the group scales of the super-block and its 8 chunks of
// 32 codes, in element order, as 256-bit vectors. The same codes and affine maps as the
// formats' decode() (quant/formats.h), so results match the scalar table up to float order.
// Plain AVX2 integer ops; included only from translation units built for AVX2 or above.
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "quant/formats.h"

namespace ft::cpu::qsimd {

// Unpack<F> provides, for a super-block p (kBlocks consecutive blocks of F, kBytes bytes):
//   scales(p, ws, ms): ws[0..1] the 16 group scales d_g, ms[0..1] the 16 group offsets m_g
//     (w = d_g * u + m_g, as decode() writes them);
//   codes<C>(p): the 32 codes of elements 32C .. 32C + 31 (C < 8), codebook already applied.
template <class F>
struct Unpack;

namespace unpack_detail {
inline __m256i nib_mask() { return _mm256_set1_epi8(0x0f); }
// 16 bytes of nibbles -> 32 codes: low nibbles then high nibbles (the 32-element formats).
// (A broadcast load and a per-lane shift: no cross-lane insert on port 5.)
inline __m256i split16(const uint8_t* p) {
  const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_and_si256(_mm256_srlv_epi32(v, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)),
                          nib_mask());
}
inline __m256i load32(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
inline __m256i book(const quant::Book& b, __m256i idx) {
  const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.v));
  return _mm256_shuffle_epi8(_mm256_set_m128i(t, t), idx);
}
// Bits <<(to - from) within each byte (from, to < 8), the other bits of the byte left as
// they are; callers mask the result. 16-bit shifts only bring in bits from the neighbour
// byte below `to` (left shifts) or above it (right shifts), which the masks drop.
template <int From, int To>
inline __m256i move_bit(__m256i v) {
  if constexpr (From < To) return _mm256_slli_epi16(v, To - From);
  else if constexpr (From > To) return _mm256_srli_epi16(v, From - To);
  else return v;
}
// 8 per-block scales -> 16 group scales (each block covers two groups of 16).
inline void pairs(__m256 b, __m256* g) {
  g[0] = _mm256_permutevar8x32_ps(b, _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3));
  g[1] = _mm256_permutevar8x32_ps(b, _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7));
}
// fp16 values at a byte stride -> 8 floats.
inline uint16_t u16_at(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
// The fp16 at p as f32 (F16C; exact). static: each kernel file keeps its own copy.
static inline float f16_at(const uint8_t* p) { return _cvtsh_ss(u16_at(p)); }
template <int Stride>
inline __m256 halves8(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_setr_epi16(
      static_cast<short>(u16_at(p)), static_cast<short>(u16_at(p + Stride)),
      static_cast<short>(u16_at(p + 2 * Stride)), static_cast<short>(u16_at(p + 3 * Stride)),
      static_cast<short>(u16_at(p + 4 * Stride)), static_cast<short>(u16_at(p + 5 * Stride)),
      static_cast<short>(u16_at(p + 6 * Stride)), static_cast<short>(u16_at(p + 7 * Stride))));
}
// Bytes p[0], p[Stride], ... (N of them) as int32 lanes.
template <int Stride>
inline __m256i bytes8_epi32(const uint8_t* p) {
  return _mm256_setr_epi32(p[0], p[Stride], p[2 * Stride], p[3 * Stride], p[4 * Stride],
                           p[5 * Stride], p[6 * Stride], p[7 * Stride]);
}
inline void scaled(__m256* v, float c, __m256* out) {
  out[0] = _mm256_mul_ps(v[0], _mm256_set1_ps(c));
  out[1] = _mm256_mul_ps(v[1], _mm256_set1_ps(c));
}
// 16 bytes of small ints (unsigned or signed) -> 16 floats, the first 8 times f0, the rest f1.
inline void bytes16_ps(__m128i b, bool is_signed, float f0, float f1, __m256* out) {
  const __m128i b1 = _mm_srli_si128(b, 8);
  const __m256i lo = is_signed ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b);
  const __m256i hi = is_signed ? _mm256_cvtepi8_epi32(b1) : _mm256_cvtepu8_epi32(b1);
  out[0] = _mm256_mul_ps(_mm256_cvtepi32_ps(lo), _mm256_set1_ps(f0));
  out[1] = _mm256_mul_ps(_mm256_cvtepi32_ps(hi), _mm256_set1_ps(f1));
}
// The scale bytes of an NVFP4 super-block (16 blocks of 9 bytes, the scale first), in order:
// byte i of the qword at p + 8i is the byte at p + 9i, so four loads, an and with a per-qword
// byte mask and an or-reduction (no per-byte inserts). Reads p .. p + 135.
inline __m128i nvfp4_scale_bytes(const uint8_t* p) {
  static_assert(sizeof(quant::BlockNVFP4) == 9, "9-byte NVFP4 blocks");
  const __m256i m_lo = _mm256_setr_epi64x(0xff, 0xff00, 0xff0000, 0xff000000);
  const __m256i m_hi = _mm256_slli_epi64(m_lo, 32);
  // qword i: block i at byte i, block 4 + i at byte 4 + i (blocks 0-7); the same for 8-15
  const __m256i a = _mm256_or_si256(_mm256_and_si256(load32(p), m_lo),
                                    _mm256_and_si256(load32(p + 32), m_hi));
  const __m256i b = _mm256_or_si256(_mm256_and_si256(load32(p + 72), m_lo),
                                    _mm256_and_si256(load32(p + 104), m_hi));
  const __m256i z = _mm256_or_si256(_mm256_unpacklo_epi64(a, b), _mm256_unpackhi_epi64(a, b));
  return _mm_or_si128(_mm256_castsi256_si128(z), _mm256_extracti128_si256(z, 1));
}
// 16 e4m3 bytes / 256 as f32 (*lo: bytes 0-7, *hi: 8-15), exactly: the sign-extended byte << 7
// puts the magnitude in fp16's exponent and mantissa fields (bias 7 -> 15 is the 2^-8; e4m3
// subnormals land on fp16 subnormals) and the sign in bits 15 and 14; clearing bit 14 leaves
// the fp16. Magnitude 0x7f (NaN) is the only one that carries into bit 14 when 0x80 is added:
// or-ing that bit in makes the exponent all ones, a NaN.
inline void e4m3x16_over_256(__m128i b, __m256* lo, __m256* hi) {
  const __m256i t = _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(b), 7),
                                     _mm256_set1_epi16(static_cast<int16_t>(0xbfff)));
  const __m256i h = _mm256_or_si256(
      t, _mm256_and_si256(_mm256_add_epi16(t, _mm256_set1_epi16(0x80)), _mm256_set1_epi16(0x4000)));
  *lo = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
  *hi = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
}
// Q4_K / Q5_K packed 6-bit scales and mins (k4_scale_min) -> 8 scale bytes and 8 min bytes.
inline void k4_scales_mins(const uint8_t* s, uint64_t* sc, uint64_t* mn) {
  uint32_t w[3];
  std::memcpy(w, s, 12);
  constexpr uint32_t m6 = 0x3f3f3f3f, m4 = 0x0f0f0f0f, m2 = 0x03030303;
  const uint32_t sc_hi = (w[2] & m4) | (((w[0] >> 6) & m2) << 4);
  const uint32_t mn_hi = ((w[2] >> 4) & m4) | (((w[1] >> 6) & m2) << 4);
  *sc = (w[0] & m6) | (static_cast<uint64_t>(sc_hi) << 32);
  *mn = (w[1] & m6) | (static_cast<uint64_t>(mn_hi) << 32);
}
// Q3_K's 16 packed 6-bit scales (k3_scale, before its -32) as bytes in group order: groups 0..7
// in *lo, 8..15 in *hi. The low 4 bits of group j come from byte j (j < 8, low nibble) or j - 8
// (high nibble), the high 2 bits from byte 8 + (j & 3) at bit 2 (j >> 2). static: each kernel
// file keeps a copy compiled for its instruction set.
static inline void k3_scale_bytes(const uint8_t* s, uint64_t* lo, uint64_t* hi) {
  uint64_t a;
  uint32_t h;
  std::memcpy(&a, s, 8);
  std::memcpy(&h, s + 8, 4);
  constexpr uint64_t m4 = 0x0f0f0f0f0f0f0f0full;
  constexpr uint32_t m2 = 0x03030303u;
  const uint64_t h01 = (h & m2) | (static_cast<uint64_t>((h >> 2) & m2) << 32);
  const uint64_t h23 = ((h >> 4) & m2) | (static_cast<uint64_t>((h >> 6) & m2) << 32);
  *lo = (a & m4) | (h01 << 4);
  *hi = ((a >> 4) & m4) | (h23 << 4);
}
}  // namespace unpack_detail

// ---- 32-element formats: 8 blocks per super-block, chunk C is block C ------------------------
template <>
struct Unpack<quant::Q4_0> {
  static constexpr int kBlocks = 8, kBytes = 8 * sizeof(quant::BlockQ4_0);
  static void scales(const uint8_t* p, __m256* ws, __m256* ms) {
    unpack_detail::pairs(unpack_detail::halves8<sizeof(quant::BlockQ4_0)>(p), ws);
    unpack_detail::scaled(ws, -8.f, ms);
  }
  template <int C>
  static __m256i codes(const uint8_t* p) {
    return unpack_detail::split16(p + C * sizeof(quant::BlockQ4_0) + 2);
  }
};

template <>
struct Unpack<quant::Q4_1> {
  static constexpr int kBlocks = 8, kBytes = 8 * sizeof(quant::BlockQ4_1);
  static void scales(const uint8_t* p, __m256* ws, __m256* ms) {
    unpack_detail::pairs(unpack_detail::halves8<sizeof(quant::BlockQ4_1)>(p), ws);
    unpack_detail::pairs(unpack_detail::halves8<sizeof(quant::BlockQ4_1)>(p + 2), ms);
  }
  template <int C>
  static __m256i codes(const uint8_t* p) {
    return unpack_detail::split16(p + C * sizeof(quant::BlockQ4_1) + 4);
  }
};

template <>
struct Unpack<quant::Q8_0> {
  static constexpr int kBlocks = 8, kBytes = 8 * sizeof(quant::BlockQ8_0);
  static void scales(const uint8_t* p, __m256* ws, __m256* ms) {
    unpack_detail::pairs(unpack_detail::halves8<sizeof(quant::BlockQ8_0)>(p), ws);
    unpack_detail::scaled(ws, -128.f, ms);
  }
  template <int C>
  static __m256i codes(const uint8_t* p) {
    return _mm256_xor_si256(unpack_detail::load32(p + C * sizeof(quant::BlockQ8_0) + 2),
                            _mm256_set1_epi8(static_cast<char>(0x80)));
  }
};

template <>
struct Unpack<quant::IQ4_NL> {
  static constexpr int kBlocks = 8, kBytes = 8 * sizeof(quant::BlockIQ4_NL);
  static void scales(const uint8_t* p, __m256* ws, __m256* ms) {
    unpack_detail::pairs(unpack_detail::halves8<sizeof(quant::BlockIQ4_NL)>(p), ws);
    unpack_detail::scaled(ws, -128.f, ms);
  }
  template <int C>
  static __m256i codes(const uint8_t* p) {
    return unpack_detail::book(quant::k_iq4nl_book,
                               unpack_detail::split16(p + C * sizeof(quant::BlockIQ4_NL) + 2));
  }
};

template <>
struct Unpack<quant::MXFP4> {
  static constexpr int kBlocks = 8, kBytes = 8 * sizeof(quant::BlockMXFP4);
  static void scales(const uint8_t* p, __m256* ws, __m256* ms) {
    // e8m0: 2^(e - 127) = e << 23 as float bits; e = 0 is 2^-127 (0x00400000), 255 NaN
    const __m256i e = unpack_detail::bytes8_epi32<sizeof(quant::BlockMXFP4)>(p);
    const __m256i odd = _mm256_or_si256(_mm256_cmpeq_epi32(e, _mm256_setzero_si256()),
                                        _mm256_cmpeq_epi32(e, _mm256_set1_epi32(255)));
    const __m256i bits = _mm256_or_si256(_mm256_slli_epi32(e, 23),
                                         _mm256_and_si256(odd, _mm256_set1_epi32(0x00400000)));
    unpack_detail::pairs(_mm256_mul_ps(_mm256_castsi256_ps(bits), _mm256_set1_ps(0.5f)), ws);
    unpack_detail::scaled(ws, -12.f, ms);
  }
  template <int C>
  static __m256i codes(const uint8_t* p) {
    return unpack_detail::book(quant::k_e2m1_book,
                               unpack_detail::split16(p + C * sizeof(quant::BlockMXFP4) + 1));
  }
};

// NVFP4: 16-element blocks, chunk C is blocks 2C and 2C + 1 (element 2j low nibble of qs[j]).
template <>
struct Unpack<quant::NVFP4> {
  static constexpr int kBlocks = 16, kBytes = 16 * sizeof(quant::BlockNVFP4);
  static void scales(const uint8_t* p, __m256* ws, __m256* ms) {
    // e4m3 / 256, then * 256 * 0.5
    unpack_detail::e4m3x16_over_256(unpack_detail::nvfp4_scale_bytes(p), &ws[0], &ws[1]);
    ws[0] = _mm256_mul_ps(ws[0], _mm256_set1_ps(128.f));
    ws[1] = _mm256_mul_ps(ws[1], _mm256_set1_ps(128.f));
    unpack_detail::scaled(ws, -12.f, ms);
  }
  template <int C>
  static __m256i codes(const uint8_t* p) {
    constexpr int a = 2 * C * sizeof(quant::BlockNVFP4) + 1, b = a + sizeof(quant::BlockNVFP4);
    const __m128i v = _mm_unpacklo_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + a)),
                                         _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + b)));
    const __m128i m = _mm_set1_epi8(0x0f);
    const __m128i lo = _mm_and_si128(v, m), hi = _mm_and_si128(_mm_srli_epi16(v, 4), m);
    return unpack_detail::book(quant::k_e2m1_book, _mm256_set_m128i(_mm_unpackhi_epi8(lo, hi),
                                                                     _mm_unpacklo_epi8(lo, hi)));
  }
};

// ---- 256-element K-quants and IQ4_XS: one block per super-block --------------------------------
template <>
struct Unpack<quant::IQ4_XS> {
  static constexpr int kBlocks = 1, kBytes = sizeof(quant::BlockIQ4_XS);
  static void scales(const uint8_t* p, __m256* ws, __m256* ms) {
    const auto& b = *reinterpret_cast<const quant::BlockIQ4_XS*>(p);
    // sub-block s: nibble s of scales_l (bits 4s..4s+3) | bits 2s..2s+1 of scales_h << 4, - 32
    uint32_t l;
    std::memcpy(&l, b.scales_l, 4);
    const __m256i lo = _mm256_and_si256(
        _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(l)), _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)),
        _mm256_set1_epi32(0xf));
    const __m256i hi = _mm256_and_si256(
        _mm256_srlv_epi32(_mm256_set1_epi32(b.scales_h), _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)),
        _mm256_set1_epi32(3));
    const __m256i sc = _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), _mm256_set1_epi32(32));
    unpack_detail::pairs(_mm256_mul_ps(_mm256_cvtepi32_ps(sc), _mm256_set1_ps(quant::half_f32(b.d))), ws);
    unpack_detail::scaled(ws, -128.f, ms);
  }
  template <int C>
  static __m256i codes(const uint8_t* p) {
    return unpack_detail::book(quant::k_iq4nl_book,
                               unpack_detail::split16(p + 8 + 16 * C));
  }
};

template <>
struct Unpack<quant::Q2_K> {
  static constexpr int kBlocks = 1, kBytes = sizeof(quant::BlockQ2_K);
  static void scales(const uint8_t* p, __m256* ws, __m256* ms) {
    const auto& b = *reinterpret_cast<const quant::BlockQ2_K*>(p);
    const __m128i s = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales));
    const __m128i m = _mm_set1_epi8(0x0f);
    const float d = quant::half_f32(b.d), dmin = -quant::half_f32(b.dmin);
    unpack_detail::bytes16_ps(_mm_and_si128(s, m), false, d, d, ws);
    unpack_detail::bytes16_ps(_mm_and_si128(_mm_srli_epi16(s, 4), m), false, dmin, dmin, ms);
  }
  // element 128n + 32j + l: bits 2j of qs[32n + l]
  template <int C>
  static __m256i codes(const uint8_t* p) {
    const __m256i v = unpack_detail::load32(p + 16 + 32 * (C / 4));
    return _mm256_and_si256(_mm256_srli_epi16(v, 2 * (C % 4)), _mm256_set1_epi8(3));
  }
};

template <>
struct Unpack<quant::Q3_K> {
  static constexpr int kBlocks = 1, kBytes = sizeof(quant::BlockQ3_K);
  static void scales(const uint8_t* p, __m256* ws, __m256* ms) {
    const auto& b = *reinterpret_cast<const quant::BlockQ3_K*>(p);
    uint64_t lo, hi;  // k3_scale minus 32
    unpack_detail::k3_scale_bytes(b.scales, &lo, &hi);
    const __m128i s = _mm_sub_epi8(_mm_set_epi64x(static_cast<int64_t>(hi), static_cast<int64_t>(lo)),
                                   _mm_set1_epi8(32));
    const float d = quant::half_f32(b.d);
    unpack_detail::bytes16_ps(s, true, d, d, ws);
    unpack_detail::scaled(ws, -4.f, ms);
  }
  // element 128n + 32j + l: bits 2j of qs[32n + l] | bit 4n + j of hmask[l] << 2
  template <int C>
  static __m256i codes(const uint8_t* p) {
    const __m256i v = unpack_detail::load32(p + 32 + 32 * (C / 4));
    const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(v, 2 * (C % 4)), _mm256_set1_epi8(3));
    const __m256i hm = unpack_detail::load32(p);
    return _mm256_or_si256(lo, _mm256_and_si256(unpack_detail::move_bit<C, 2>(hm), _mm256_set1_epi8(4)));
  }
};

// Q4_K / Q5_K: 8 sub-blocks of 32 with 6-bit scales and mins; chunk C is sub-block C.
inline void k4_scales(const uint8_t* scales, uint16_t d_half, uint16_t dmin_half, __m256* ws,
                      __m256* ms) {
  uint64_t sc, mn;
  unpack_detail::k4_scales_mins(scales, &sc, &mn);
  __m256 s[2];
  unpack_detail::bytes16_ps(_mm_set_epi64x(static_cast<int64_t>(mn), static_cast<int64_t>(sc)),
                            false, quant::half_f32(d_half), -quant::half_f32(dmin_half), s);
  unpack_detail::pairs(s[0], ws);
  unpack_detail::pairs(s[1], ms);
}

template <>
struct Unpack<quant::Q4_K> {
  static constexpr int kBlocks = 1, kBytes = sizeof(quant::BlockQ4_K);
  static void scales(const uint8_t* p, __m256* ws, __m256* ms) {
    const auto& b = *reinterpret_cast<const quant::BlockQ4_K*>(p);
    k4_scales(b.scales, b.d, b.dmin, ws, ms);
  }
  // element 64c + l: low nibble of qs[32c + l]; 64c + 32 + l: its high nibble
  template <int C>
  static __m256i codes(const uint8_t* p) {
    const __m256i v = unpack_detail::load32(p + 16 + 32 * (C / 2));
    return _mm256_and_si256(C % 2 ? _mm256_srli_epi16(v, 4) : v, unpack_detail::nib_mask());
  }
};

template <>
struct Unpack<quant::Q5_K> {
  static constexpr int kBlocks = 1, kBytes = sizeof(quant::BlockQ5_K);
  static void scales(const uint8_t* p, __m256* ws, __m256* ms) {
    const auto& b = *reinterpret_cast<const quant::BlockQ5_K*>(p);
    k4_scales(b.scales, b.d, b.dmin, ws, ms);
  }
  // Q4_K's nibble plus bit C of qh[l] as bit 4
  template <int C>
  static __m256i codes(const uint8_t* p) {
    const __m256i v = unpack_detail::load32(p + 48 + 32 * (C / 2));
    const __m256i lo = _mm256_and_si256(C % 2 ? _mm256_srli_epi16(v, 4) : v, unpack_detail::nib_mask());
    const __m256i qh = unpack_detail::load32(p + 16);
    return _mm256_or_si256(lo, _mm256_and_si256(unpack_detail::move_bit<C, 4>(qh),
                                                 _mm256_set1_epi8(0x10)));
  }
};

// Q6_K: element 128n + 32i + l: low 4 bits from ql[64n + l + 32 (i & 1)] (high nibble when
// i >= 2), bits 4-5 from qh[32n + l] bits 2i..2i+1; chunk C = 4n + i.
template <>
struct Unpack<quant::Q6_K> {
  static constexpr int kBlocks = 1, kBytes = sizeof(quant::BlockQ6_K);
  static void scales(const uint8_t* p, __m256* ws, __m256* ms) {
    const auto& b = *reinterpret_cast<const quant::BlockQ6_K*>(p);
    const float d = quant::half_f32(b.d);
    unpack_detail::bytes16_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)), true, d,
                              d, ws);
    unpack_detail::scaled(ws, -32.f, ms);
  }
  template <int C>
  static __m256i codes(const uint8_t* p) {
    constexpr int n = C / 4, i = C % 4;
    const __m256i v = unpack_detail::load32(p + 64 * n + 32 * (i & 1));
    const __m256i lo = _mm256_and_si256(i >= 2 ? _mm256_srli_epi16(v, 4) : v, unpack_detail::nib_mask());
    const __m256i qh = unpack_detail::load32(p + 128 + 32 * n);
    return _mm256_or_si256(lo, _mm256_and_si256(unpack_detail::move_bit<2 * i, 4>(qh),
                                                 _mm256_set1_epi8(0x30)));
  }
};
}  // namespace ft::cpu::qsimd
