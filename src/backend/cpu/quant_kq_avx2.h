// One-token GEMV on AVX2 for the nibble / 2-bit formats whose generic fused form (quant_fused.h)
// is compute-bound: the K-quants Q2_K .. Q5_K, IQ4_XS, and the 32-element-block IQ4_NL and MXFP4
// (8 blocks make a super-block here). Include only from kernels_quant_avx2.cpp.
//
// The fused GEMV pays, per 32 codes, a vpmaddwd, an int32 -> f32 convert, a cross-lane permute
// spreading two group scales over their lanes and an FMA: most of its time on Zen 3. The
// activations keep their scale per group of 16 (QActs), so each group still needs one float
// multiply; here that is one convert and one multiply-add per 8 groups:
//  - a super-block's codes are regrouped in registers into two sets of four vectors where dword
//    lane L (= 4h + j: half h, dword j) holds bytes of one group, Layout::group(s, L), in all
//    four vectors of set s, vector i taking that group's dword (j + i) % 4. Fields that lane j
//    takes from one source vector at bit offsets depending on j (Q2_K / Q3_K's 2-bit codes, the
//    high bits) cost one vpshufd rotation per vector and a per-lane vpsrlvd; fields from four
//    source vectors (rows of nibbles) three vpblendd and the rotation (gather);
//  - the activations are permuted once per call to that order, so a set's four vpmaddubsw are
//    added as int16 and one vpmaddwd against the lanes' integer sub-block scales (as int16
//    pairs; ones for the 32-element formats) gives each group's scaled dot in its own int32
//    lane. Signed codebook values (IQ4_*) go through the sign trick, whose pairs may reach
//    2 * 127 * 127: there each vpmaddubsw gets its own vpmaddwd;
//  - one convert per set, a multiply by the lanes' activation scales (permuted with them), one
//    FMA by the super-block's d (or the lanes' block scales). Mins likewise per lane (or per
//    sub-block of 32), against the groups' d * sum(q) (QActs's s); a constant code offset (Q3_K's 4, MXFP4's 12) is taken
//    off the int16 sums as offset * sum(q) of the 8 activations behind each int16 (per call).
// The integer dot of every group is exact as in the other tables; only float order differs.
#pragma once
#include <immintrin.h>

#include <array>
#include <cstdint>
#include <cstring>

#include "backend/cpu/quant_fused.h"
#include "backend/cpu/quant_gemv512.h"
#include "backend/cpu/quant_simd.h"
#include "backend/cpu/quant_unpack.h"
#include "quant/formats.h"

namespace ft::cpu::kqavx2 {

constexpr int k_rows = 4;      // rows side by side (2 measured ~15% slower on Q2_K / Q4_K)
constexpr int k_ahead = 1024;  // prefetch distance per row

using qsimd::unpack_detail::f16_at;
inline __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// Dword j of each 128-bit half takes dword (j + I) % 4.
template <int I>
inline __m256i rot(__m256i v) {
  if constexpr (I == 0)
    return v;
  else
    return _mm256_shuffle_epi32(v, (I & 3) | ((I + 1) & 3) << 2 | ((I + 2) & 3) << 4 | ((I + 3) & 3) << 6);
}

// Dword j of each half = dword (j + I) % 4 of v[j] (so over I = 0..3, every dword of v[j] in
// lane j): blends first (dword p from v[(p - I) % 4]), then the rotation.
template <int I>
inline __m256i gather(const __m256i* v) {
  constexpr int m1 = 0x11 << ((1 + I) & 3), m2 = 0x11 << ((2 + I) & 3), m3 = 0x11 << ((3 + I) & 3);
  const __m256i a = _mm256_blend_epi32(v[0], v[1], m1), b = _mm256_blend_epi32(v[2], v[3], m3);
  return rot<I>(_mm256_blend_epi32(a, b, m2 | m3));
}

// (v >> c_j) & mask per dword j of each half.
inline __m256i field(__m256i v, std::array<int, 4> c, int8_t mask) {
  return _mm256_and_si256(_mm256_srlv_epi32(v, _mm256_setr_epi32(c[0], c[1], c[2], c[3], c[0], c[1], c[2], c[3])),
                          _mm256_set1_epi8(mask));
}

// Byte T[L] of b (its 16 bytes the same in both halves) in each dword lane L: zero-extended to
// int32, or as an int16 pair (the vpmaddwd multiplier), zero- or sign-extended.
enum class As { int32, pair, signed_pair };
template <std::array<int, 8> T, As A>
inline __m256i spread(__m256i b) {
  static constexpr std::array<int8_t, 32> idx = [] {
    std::array<int8_t, 32> t{};
    for (int l = 0; l < 8; ++l) {
      const auto i = static_cast<int8_t>(T[l]), z = static_cast<int8_t>(-1);  // -1: a zero byte
      // signed: the byte high in each int16, then an arithmetic shift
      const int8_t v[3][4] = {{i, z, z, z}, {i, z, i, z}, {z, i, z, i}};
      for (int c = 0; c < 4; ++c) t[4 * l + c] = v[static_cast<int>(A)][c];
    }
    return t;
  }();
  const __m256i v = _mm256_shuffle_epi8(b, load32(idx.data()));
  return A == As::signed_pair ? _mm256_srai_epi16(v, 8) : v;
}

// Per format F, Layout<F> has:
//   kBytes: bytes per super-block (256 elements); kMaxU: the largest code;
//   kOffset: codes u stand for u - kOffset; kSigned: codes are signed bytes (sign trick);
//   kMins: w = d sc u - dmin mn, the mn term over QActs's s (d sum(q) per group): per group
//     (kMinSpan 16: the lanes' order, both sets) or per sub-block of 32 (kMinSpan 32, in order);
//   kPost: a constant factor of the whole dot;
//   group(s, L): the group (of 16) in lane L of set s;
//   codes(p, w): the regrouped code vectors w[s][i];
//   scales(p, sc): per set the lanes' int16 scale pairs;
//   dscale(p): the float factor of each lane (d, or the lane's block scale);
//   kMins: mins(p, s) = sum over the mins' lanes of mn s (s: the activations' kMinSpan sums),
//     dmin(p) (broadcast).
template <class F>
struct Layout;

// Per lane of set S of layout G: G::group(S, L) / Div + Add (the byte of its scale, or min).
template <class G, int S, int Div = 1, int Add = 0>
constexpr std::array<int, 8> lanes() {
  std::array<int, 8> t{};
  for (int l = 0; l < 8; ++l) t[l] = G::group(S, l) / Div + Add;
  return t;
}

struct Defaults {
  static constexpr int kOffset = 0;
  static constexpr bool kSigned = false, kMins = false;
  static constexpr int kMinSpan = 16;
  static constexpr float kPost = 1.f;
};

// fp16 d, dmin at p (adjacent): [d, dmin, 0, 0].
inline __m128 d_dmin(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(v)));
}

// Q2_K / Q3_K: element 128n + 32j + l is bits 2j of qs[32n + l]: in set n, lane j of half h is
// group 8n + 2j + h, from qs dword (j + i) % 4 shifted right by 2j.
struct Bits2 : Defaults {
  static constexpr int group(int s, int l) { return 8 * s + 2 * (l % 4) + l / 4; }
  template <int I>
  static __m256i low2(__m256i qs) {
    return field(rot<I>(qs), {0, 2, 4, 6}, 3);
  }
};

template <>
struct Layout<quant::Q2_K> : Bits2 {
  static constexpr int kBytes = sizeof(quant::BlockQ2_K);  // scales[16], qs[64], d, dmin
  static constexpr int kMaxU = 3;
  static constexpr bool kMins = true;
  static void codes(const uint8_t* p, __m256i w[2][4]) {
    for (int s = 0; s < 2; ++s) {
      const __m256i v = load32(p + 16 + 32 * s);
      w[s][0] = low2<0>(v), w[s][1] = low2<1>(v), w[s][2] = low2<2>(v), w[s][3] = low2<3>(v);
    }
  }
  // scales[g]: the scale in the low nibble, the min in the high one
  static __m256i scale_bytes(const uint8_t* p) {
    return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static void scales(const uint8_t* p, __m256i sc[2]) {
    const __m256i lo = _mm256_and_si256(scale_bytes(p), _mm256_set1_epi8(0x0f));
    sc[0] = spread<lanes<Bits2, 0>(), As::pair>(lo), sc[1] = spread<lanes<Bits2, 1>(), As::pair>(lo);
  }
  static __m256 mins(const uint8_t* p, const float* s) {
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(scale_bytes(p), 4), _mm256_set1_epi8(0x0f));
    const __m256 m0 = _mm256_cvtepi32_ps(spread<lanes<Bits2, 0>(), As::int32>(hi));
    const __m256 m1 = _mm256_cvtepi32_ps(spread<lanes<Bits2, 1>(), As::int32>(hi));
    return _mm256_fmadd_ps(m1, _mm256_loadu_ps(s + 8), _mm256_mul_ps(m0, _mm256_loadu_ps(s)));
  }
  static __m256 dscale(const uint8_t* p) { return _mm256_broadcastss_ps(d_dmin(p + 80)); }
  static __m256 dmin(const uint8_t* p) { return _mm256_broadcastss_ps(_mm_movehdup_ps(d_dmin(p + 80))); }
};

// Q3_K: Q2_K's low bits (qs at 32) | bit 4n + j of hmask[l] << 2; value (u - 4) d sc, sc
// signed 6-bit.
template <>
struct Layout<quant::Q3_K> : Bits2 {
  static constexpr int kBytes = sizeof(quant::BlockQ3_K);  // hmask[32], qs[64], scales[12], d
  static constexpr int kMaxU = 7, kOffset = 4;
  // hmask bit 4S + j of lane j's bytes to bit 2: bits 0-3 from hm << 2 (a dword shift, which
  // drops only bits 6-7 of the top byte), bits 4-7 from hm itself
  template <int I>
  static void code(__m256i q0, __m256i q1, __m256i hmask, __m256i w[2][4]) {
    const __m256i hm = rot<I>(hmask);
    w[0][I] = _mm256_or_si256(low2<I>(q0), field(_mm256_slli_epi32(hm, 2), {0, 1, 2, 3}, 4));
    w[1][I] = _mm256_or_si256(low2<I>(q1), field(hm, {2, 3, 4, 5}, 4));
  }
  static void codes(const uint8_t* p, __m256i w[2][4]) {
    const __m256i hm = load32(p), q0 = load32(p + 32), q1 = load32(p + 64);
    code<0>(q0, q1, hm, w), code<1>(q0, q1, hm, w), code<2>(q0, q1, hm, w), code<3>(q0, q1, hm, w);
  }
  static void scales(const uint8_t* p, __m256i sc[2]) {
    uint64_t l, h;  // k3_scale: 16 signed bytes in group order
    qsimd::unpack_detail::k3_scale_bytes(p + 96, &l, &h);
    const auto lo = static_cast<int64_t>(l), hi = static_cast<int64_t>(h);
    const __m256i b = _mm256_sub_epi8(_mm256_set_epi64x(hi, lo, hi, lo), _mm256_set1_epi8(32));
    sc[0] = spread<lanes<Bits2, 0>(), As::signed_pair>(b), sc[1] = spread<lanes<Bits2, 1>(), As::signed_pair>(b);
  }
  static __m256 dscale(const uint8_t* p) { return _mm256_set1_ps(f16_at(p + 108)); }
};

// Four rows of 32 nibble bytes, row c at v[c]: set s is nibble s, lane j of half h from row j.
inline void nibbles(const __m256i v[4], __m256i w[2][4]) {
  const __m256i g[4] = {gather<0>(v), gather<1>(v), gather<2>(v), gather<3>(v)};
  const __m256i m = _mm256_set1_epi8(0x0f);
  for (int i = 0; i < 4; ++i) {
    w[0][i] = _mm256_and_si256(g[i], m);
    w[1][i] = _mm256_and_si256(_mm256_srli_epi16(g[i], 4), m);
  }
}
inline void nibble_rows(const uint8_t* q, __m256i w[2][4]) {
  const __m256i v[4] = {load32(q), load32(q + 32), load32(q + 64), load32(q + 96)};
  nibbles(v, w);
}

// Q4_K / Q5_K: qs[32c + l] holds element 64c + l (low nibble) and 64c + 32 + l (high): lane j of
// half h, set s is group 4j + 2s + h (sub-block 2j + s). Scales and mins are 6-bit per
// sub-block (k4_scales_mins), the mins taken in sub-block order.
struct K45 : Defaults {
  static constexpr bool kMins = true;
  static constexpr int kMinSpan = 32;
  static constexpr int group(int s, int l) { return 4 * (l % 4) + 2 * s + l / 4; }
  static void scales(const uint8_t* p, __m256i sc[2]) {
    uint64_t s, m;
    qsimd::unpack_detail::k4_scales_mins(p + 4, &s, &m);
    const __m256i b = _mm256_set1_epi64x(static_cast<int64_t>(s));
    sc[0] = spread<lanes<K45, 0, 2>(), As::pair>(b), sc[1] = spread<lanes<K45, 1, 2>(), As::pair>(b);
  }
  static __m256 mins(const uint8_t* p, const float* s) {
    uint64_t sc, m;
    qsimd::unpack_detail::k4_scales_mins(p + 4, &sc, &m);
    const __m256i mn = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<int64_t>(m)));
    return _mm256_mul_ps(_mm256_cvtepi32_ps(mn), _mm256_loadu_ps(s));
  }
  static __m256 dscale(const uint8_t* p) { return _mm256_broadcastss_ps(d_dmin(p)); }
  static __m256 dmin(const uint8_t* p) { return _mm256_broadcastss_ps(_mm_movehdup_ps(d_dmin(p))); }
};

template <>
struct Layout<quant::Q4_K> : K45 {
  static constexpr int kBytes = sizeof(quant::BlockQ4_K);  // d, dmin, scales[12], qs[128]
  static constexpr int kMaxU = 15;
  static void codes(const uint8_t* p, __m256i w[2][4]) { nibble_rows(p + 16, w); }
};

// Q5_K: bit (sub-block) of qh[l] as bit 4: sub-block 2j + s of lane j.
template <>
struct Layout<quant::Q5_K> : K45 {
  static constexpr int kBytes = sizeof(quant::BlockQ5_K);  // d, dmin, scales[12], qh[32], qs[128]
  static constexpr int kMaxU = 31;
  static void codes(const uint8_t* p, __m256i w[2][4]) {
    nibble_rows(p + 48, w);
    // qh bit 2j + s of lane j's bytes to bit 4: for j < 2 (bits 0-3) from qh << 4 (a dword
    // shift, which drops bits 4-7 of the top byte), for j >= 2 from qh itself
    const __m256i qh = load32(p + 16);
    const __m256i h[4] = {qh, rot<1>(qh), rot<2>(qh), rot<3>(qh)};
    for (int i = 0; i < 4; ++i) {
      const __m256i hb = _mm256_blend_epi32(_mm256_slli_epi32(h[i], 4), h[i], 0xcc);
      for (int s = 0; s < 2; ++s) w[s][i] = _mm256_or_si256(w[s][i], field(hb, {s, 2 + s, s, 2 + s}, 0x10));
    }
  }
};

// Nibble formats whose row j holds 32-element (sub-)blocks 2j (half 0) and 2j + 1, 16 bytes
// each, low nibbles the first 16 elements: lane j of half h, set s is group 4j + 2h + s, block
// 2j + h (the same in both sets).
struct Blocks32 : Defaults {
  static constexpr int group(int s, int l) { return 4 * (l % 4) + 2 * (l / 4) + s; }
  static constexpr int block(int l) { return 2 * (l % 4) + l / 4; }
  static void ones(__m256i sc[2]) { sc[0] = sc[1] = _mm256_set1_epi16(1); }
  // the codebook's signed values
  static void iq4nl(__m256i w[2][4]) {
    const __m256i book = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(quant::k_iq4nl)));
    for (int s = 0; s < 2; ++s)
      for (int i = 0; i < 4; ++i) w[s][i] = _mm256_shuffle_epi8(book, w[s][i]);
  }
  // The 16 code bytes of each of 8 blocks of Stride bytes (codes at Off), as the 4 rows.
  template <int Stride, int Off>
  static void block_rows(const uint8_t* p, __m256i w[2][4]) {
    __m256i v[4];
    for (int c = 0; c < 4; ++c)
      v[c] = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(p + Stride * (2 * c + 1) + Off),
                                 reinterpret_cast<const __m128i*>(p + Stride * (2 * c) + Off));
    nibbles(v, w);
  }
  // Byte 0 of each of 8 blocks of Stride bytes (Bytes 2: its 16-bit word), in lane order, packed
  // in scalar registers (the integer ports are idle here).
  template <int Stride, int Bytes>
  static __m128i lane_fields(const uint8_t* p) {
    uint64_t v[2] = {0, 0};
    for (int l = 0; l < 8; ++l) {
      const uint64_t f = Bytes == 2 ? qsimd::unpack_detail::u16_at(p + Stride * block(l)) : p[Stride * block(l)];
      v[l * Bytes / 8] |= f << (8 * Bytes * l % 64);
    }
    return _mm_set_epi64x(static_cast<int64_t>(v[1]), static_cast<int64_t>(v[0]));
  }
};

// IQ4_XS: 16 qs bytes per sub-block of 32: qs row j holds sub-blocks 2j and 2j + 1. Codes are
// the codebook's signed values; 6-bit scales minus 32 per sub-block.
template <>
struct Layout<quant::IQ4_XS> : Blocks32 {
  static constexpr int kBytes = sizeof(quant::BlockIQ4_XS);  // d, scales_h, scales_l[4], qs[128]
  static constexpr int kMaxU = 127;
  static constexpr bool kSigned = true;
  static void codes(const uint8_t* p, __m256i w[2][4]) {
    nibble_rows(p + 8, w);
    iq4nl(w);
  }
  // sub-block b's scale: nibble b of scales_l | bits 2b, 2b + 1 of scales_h << 4, as byte
  // b / 2 (b even) or 4 + b / 2 (odd): lane L's sub-block 2j + h is byte L.
  static void scales(const uint8_t* p, __m256i sc[2]) {
    uint32_t l;
    std::memcpy(&l, p + 4, 4);
    const uint32_t h = qsimd::unpack_detail::u16_at(p + 2);
    // nibble t of h to byte t
    const uint32_t y = (h & 0xf) | (h & 0xf0) << 4 | (h & 0xf00) << 8 | (h & 0xf000) << 12;
    const uint32_t even = (l & 0x0f0f0f0f) | (y & 0x03030303) << 4;
    const uint32_t odd = ((l >> 4) & 0x0f0f0f0f) | (y & 0x0c0c0c0c) << 2;
    const __m256i b = _mm256_sub_epi8(_mm256_set1_epi64x(static_cast<int64_t>(even | static_cast<uint64_t>(odd) << 32)),
                                      _mm256_set1_epi8(32));
    constexpr std::array<int, 8> t = {0, 1, 2, 3, 4, 5, 6, 7};
    sc[0] = sc[1] = spread<t, As::signed_pair>(b);
  }
  static __m256 dscale(const uint8_t* p) { return _mm256_set1_ps(f16_at(p)); }
};

// IQ4_NL: 8 blocks of 18 bytes (fp16 d, qs[16]) per super-block.
template <>
struct Layout<quant::IQ4_NL> : Blocks32 {
  static constexpr int kBytes = 8 * sizeof(quant::BlockIQ4_NL);
  static constexpr int kMaxU = 127;
  static constexpr bool kSigned = true;
  static void codes(const uint8_t* p, __m256i w[2][4]) {
    block_rows<sizeof(quant::BlockIQ4_NL), 2>(p, w);
    iq4nl(w);
  }
  static void scales(const uint8_t*, __m256i sc[2]) { ones(sc); }
  static __m256 dscale(const uint8_t* p) { return _mm256_cvtph_ps(lane_fields<sizeof(quant::BlockIQ4_NL), 2>(p)); }
};

// MXFP4: 8 blocks of 17 bytes (e8m0 e, qs[16]); codes 2 e2m1 + 12 (k_e2m1_book), so the block
// scale is 2^(e - 127) / 2 (the 2 in kPost).
template <>
struct Layout<quant::MXFP4> : Blocks32 {
  static constexpr int kBytes = 8 * sizeof(quant::BlockMXFP4);
  static constexpr int kMaxU = 24, kOffset = 12;
  static constexpr float kPost = 0.5f;
  static void codes(const uint8_t* p, __m256i w[2][4]) {
    block_rows<sizeof(quant::BlockMXFP4), 1>(p, w);
    const __m256i book = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(quant::k_e2m1_book.v)));
    for (int s = 0; s < 2; ++s)
      for (int i = 0; i < 4; ++i) w[s][i] = _mm256_shuffle_epi8(book, w[s][i]);
  }
  static void scales(const uint8_t*, __m256i sc[2]) { ones(sc); }
  // e8m0: e << 23 as float bits; e = 0 is 2^-127 (0x00400000), 255 NaN (as quant::e8m0_f32)
  static __m256 dscale(const uint8_t* p) {
    const __m256i e = _mm256_cvtepu8_epi32(lane_fields<sizeof(quant::BlockMXFP4), 1>(p));
    const __m256i odd = _mm256_or_si256(_mm256_cmpeq_epi32(e, _mm256_setzero_si256()),
                                        _mm256_cmpeq_epi32(e, _mm256_set1_epi32(255)));
    return _mm256_castsi256_ps(_mm256_or_si256(_mm256_slli_epi32(e, 23),
                                               _mm256_and_si256(odd, _mm256_set1_epi32(0x00400000))));
  }
};

// Activations of whole super-blocks in the kernel's order: per super-block 256 bytes (set s,
// vector i at 128 s + 32 i), and per lane (set s at 8 s) the group's scale dx and aux: with
// kOffset the int16 pair kOffset * sum(q) over the 8 activations behind each int16 of the
// lane's vpmaddubsw sums (group elements 4d + {0, 1}, 4d + {2, 3}); with kMins d sum(q) of the
// lane's group (kMinSpan 16), or of sub-block b at b (32: the sum of its two groups').
struct Acts {
  const int8_t* q;
  const float* dx;
  const float* aux;
};
template <class F>
inline Acts perm_acts(const QActs& x, int64_t nsb) {
  using L = Layout<F>;
  // o = 8 s + L: lane L of set s; output dword 32 s + 8 i + L: input dword 4 group + (L % 4 + i) % 4
  static constexpr auto group = [] {
    std::array<uint8_t, 16> t{};
    for (int o = 0; o < 16; ++o) t[o] = static_cast<uint8_t>(L::group(o / 8, o % 8));
    return t;
  }();
  static constexpr auto src = [] {
    std::array<uint8_t, 64> t{};
    for (int d = 0; d < 64; ++d) t[d] = static_cast<uint8_t>(4 * group[d / 32 * 8 + d % 8] + (d % 4 + d / 8 % 4) % 4);
    return t;
  }();
  uint8_t* buf = quant_row_scratch(256 * nsb);  // 384 nsb bytes fit its k + 8 (k/16 + 1)
  auto* q = reinterpret_cast<int8_t*>(buf);
  auto* dx = reinterpret_cast<float*>(buf + 256 * nsb);
  float* aux = dx + 16 * nsb;
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const int8_t* in = x.q + 256 * sb;
    const float *d = x.d + 16 * sb, *s = x.s + 16 * sb;
    for (int o = 0; o < 64; ++o) std::memcpy(q + 256 * sb + 4 * o, in + 4 * src[o], 4);
    float* ax = aux + 16 * sb;
    for (int o = 0; o < 16; ++o) dx[16 * sb + o] = d[group[o]];
    if constexpr (L::kOffset != 0) {
      int32_t pairs[16];
      for (int g = 0; g < 16; g += 2) {  // each half: the sums of bytes 4d + {0, 1} and 4d + {2, 3}
        __m256i v = _mm256_maddubs_epi16(_mm256_set1_epi8(1), load32(in + 16 * g));
        v = _mm256_add_epi16(v, _mm256_shuffle_epi32(v, 0x4e));
        v = _mm256_mullo_epi16(_mm256_add_epi16(v, _mm256_shuffle_epi32(v, 0xb1)), _mm256_set1_epi16(L::kOffset));
        pairs[g] = _mm256_extract_epi32(v, 0), pairs[g + 1] = _mm256_extract_epi32(v, 4);
      }
      for (int o = 0; o < 16; ++o) std::memcpy(ax + o, &pairs[group[o]], 4);
    } else if constexpr (L::kMins && L::kMinSpan == 16) {
      for (int o = 0; o < 16; ++o) ax[o] = s[group[o]];
    } else if constexpr (L::kMins) {
      for (int b = 0; b < 8; ++b) ax[b] = s[2 * b] + s[2 * b + 1];
    }
  }
  return {q, dx, aux};
}

// out[j] = dot of rows[j] over nsb super-blocks. Row j's arithmetic does not depend on NR.
template <class F, int NR>
inline void kq_rows(const uint8_t* const* rows, int64_t nsb, const Acts& a, const uint8_t* pf_end,
                    float* out) {
  using L = Layout<F>;
  // vpmaddubsw must not saturate: pairs of u q, |q| <= 127 (signed codes: |v| sign(q, v)). An
  // unsigned set's int16 sums (wrapping) end at the sum of 8 products (u - kOffset) q.
  constexpr int kMaxV = L::kMaxU - L::kOffset > L::kOffset ? L::kMaxU - L::kOffset : L::kOffset;
  static_assert(2 * L::kMaxU * 127 <= 32767 || (L::kSigned && L::kMaxU <= 127));
  static_assert(L::kSigned || 8 * kMaxV * 127 <= 32767);
  __m256 acc[NR], accm[NR];
  for (int j = 0; j < NR; ++j) acc[j] = accm[j] = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const int8_t* q = a.q + 256 * sb;
    const float* dx = a.dx + 16 * sb;
    const float* aux = a.aux + 16 * sb;
    for (int j = 0; j < NR; ++j) {
      const uint8_t* p = rows[j] + L::kBytes * sb;
      if (p + k_ahead < pf_end)
        for (int o = 0; o < L::kBytes; o += 64)
          _mm_prefetch(reinterpret_cast<const char*>(p) + k_ahead + o, _MM_HINT_T0);
      __m256i w[2][4], sc[2];
      L::codes(p, w);
      L::scales(p, sc);
      __m256 t = _mm256_setzero_ps();
      for (int s = 0; s < 2; ++s) {
        auto act = [&](int i) { return load32(q + 128 * s + 32 * i); };
        __m256i isc;
        if constexpr (L::kSigned) {  // each vector's int16 pairs scaled apart, then summed
          auto dot = [&](int i) {
            return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(w[s][i]), _mm256_sign_epi8(act(i), w[s][i])),
                                     sc[s]);
          };
          isc = _mm256_add_epi32(_mm256_add_epi32(dot(0), dot(1)), _mm256_add_epi32(dot(2), dot(3)));
        } else {
          auto dot = [&](int i) { return _mm256_maddubs_epi16(w[s][i], act(i)); };
          __m256i sum = _mm256_add_epi16(_mm256_add_epi16(dot(0), dot(1)), _mm256_add_epi16(dot(2), dot(3)));
          if constexpr (L::kOffset != 0) sum = _mm256_sub_epi16(sum, load32(aux + 8 * s));
          isc = _mm256_madd_epi16(sum, sc[s]);
        }
        t = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isc), _mm256_loadu_ps(dx + 8 * s), t);
      }
      acc[j] = _mm256_fmadd_ps(t, L::dscale(p), acc[j]);
      if constexpr (L::kMins) accm[j] = _mm256_fmadd_ps(L::mins(p, aux), L::dmin(p), accm[j]);
    }
  }
  for (int j = 0; j < NR; ++j) out[j] = qsimd::hsum(_mm256_sub_ps(acc[j], accm[j]));
}

template <class F>
constexpr bool k_has = requires { Layout<F>::kBytes; };

// y[r] = post * dot(x, row r), r in [r0, r1): k_rows rows side by side (row_streams), then the
// blocks past the last whole super-block (32-element formats) through decode().
template <class F>
inline void gemv(const QActs& x, int64_t k, const uint8_t* w, size_t row_bytes, int64_t r0, int64_t r1,
                 float post, float* y) {
  const int64_t nsb = k / 256;
  const Acts a = perm_acts<F>(x, nsb);
  const bool has_tail = k % 256 != 0;
  row_streams<k_rows>(
      w, row_bytes, r0, r1,
      [&](auto nr, const uint8_t* const* rows, const uint8_t* end, float* out) {
        kq_rows<F, decltype(nr)::value>(rows, nsb, a, end, out);
      },
      [&](int64_t r, const uint8_t* row, float dot) {
        y[r] = post * (Layout<F>::kPost * dot + (has_tail ? block_tail<F>(row, k, x) : 0.f));
      });
}

}  // namespace ft::cpu::kqavx2
