// dot_units<F, A>: a lane's group of 32-element units of a quantized row dotted with int8
// activations (dot32<F, A>: one unit), the inner step of the one-token streaming GEMV
// (quant_gemv_stream.cu); a group is 1 unit, the 2, 4 or 8 sub-blocks of a K-quant block that
// share its code bytes and header (Group<F>, unit_group<F>), or for Wide<F> (MXFP4, NVFP4; rows
// of whole groups) 4 blocks whose stride is 4-byte aligned. A unit is elements [32u, 32u + 32)
// of the row: one block of the 32-element formats, sub-block s of the 256-element ones, two
// NVFP4 blocks. The activations come per unit as 8 words of int8 codes with the scales of its
// two halves and their scaled code sums (XUnit), in the byte order the format's
// decoder produces (x_order<F>): the nibble-codebook formats look a half-word of 4 nibbles up
// with byte permutes (book_dot), so their codes arrive as (low, high) nibble pairs and the
// activations are stored in that order instead of re-interleaving the weights. A: the alignment the
// block's address is known to have (16, 8, 4, or 1 for any), chosen per chunk by the kernel.
// Host-callable (prmt, funnel shift and dp4a emulated): quant_codes_test checks every format's
// groups against the reference dequant on the CPU.
#pragma once
#include "backend/cuda/quant_device.cuh"

namespace ft::cuda {

// The unit's activations: codes q (8 words, x_order<F>), the scales of elements 0..15 (dx0)
// and 16..31 (dx1: x ~= dx q), and each scale times its half's code sum (s0, s1). NATURAL
// formats round per 16 elements, as the CPU's int8 matmul; NIBBLE_PAIRS formats, whose code
// words mix the two halves, per 32 (dx0 == dx1).
struct XUnit {
  uint32_t q[8];
  float dx0, dx1, s0, s1;
};

// Byte order of a unit's activation codes: NATURAL (byte p = element p) or NIBBLE_PAIRS
// (byte p = element p / 2 + 16 (p % 2): qs byte j holds elements j and j + 16).
enum class XOrder { NATURAL, NIBBLE_PAIRS };
template <class F>
constexpr XOrder x_order() {
  using B = format_of<F>;
  if constexpr (std::is_same_v<B, MXFP4> || std::is_same_v<B, IQ4_NL> || std::is_same_v<B, IQ4_XS>)
    return XOrder::NIBBLE_PAIRS;
  return XOrder::NATURAL;
}
// A unit in F's blocks: units per block (a 256-element block's 8 sub-blocks; 1 for the 32-element
// formats) and blocks per unit (NVFP4's 16-element blocks: 2; else 1).
template <class F>
constexpr int units_per_block() {
  return F::kElems >= 32 ? F::kElems / 32 : 1;
}
template <class F>
constexpr int blocks_per_unit() {
  return F::kElems >= 32 ? 1 : 32 / F::kElems;
}
// Element of the unit at code byte p.
FT_QD int x_element(XOrder o, int p) { return o == XOrder::NATURAL ? p : p / 2 + 16 * (p % 2); }

// prmt.b32 in its default mode: selector nibble bit 3 replicates the sign bit of the selected
// byte (CUDA's __byte_perm masks it off, at the price of an extra instruction).
FT_QD uint32_t prmt_s(uint32_t a, uint32_t b, uint32_t s) {
#if defined(__CUDA_ARCH__)
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(s));
  return r;
#else
  const uint64_t v = (static_cast<uint64_t>(b) << 32) | a;
  uint32_t r = 0;
  for (int n = 0; n < 4; ++n) {
    const uint32_t sel = (s >> (4 * n)) & 15;
    uint32_t byte = static_cast<uint32_t>(v >> (8 * (sel & 7))) & 0xffu;
    if (sel & 8) byte = (byte & 0x80u) ? 0xffu : 0u;
    r |= byte << (8 * n);
  }
  return r;
#endif
}
// Signed bytes dotted with signed bytes, plus c.
FT_QD int dot_s8s8(uint32_t a, uint32_t b, int c) {
#if defined(__CUDA_ARCH__)
  int r;
  asm("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
  return r;
#else
  for (int i = 0; i < 4; ++i)
    c += static_cast<int8_t>((a >> (8 * i)) & 0xff) * static_cast<int8_t>((b >> (8 * i)) & 0xff);
  return c;
#endif
}

// N little-endian words from p, which is A-byte aligned (A = 1: any address; the words around
// are funnel-shifted, reading up to 4 bytes past the last).
template <int N, int A>
FT_QD void ldw(const uint8_t* p, uint32_t (&w)[N]) {
  if constexpr (A >= 16 && N % 4 == 0) {
#pragma unroll
    for (int k = 0; k < N / 4; ++k) {
      const uint4 v = reinterpret_cast<const uint4*>(p)[k];
      w[4 * k] = v.x, w[4 * k + 1] = v.y, w[4 * k + 2] = v.z, w[4 * k + 3] = v.w;
    }
  } else if constexpr (A >= 8 && N % 2 == 0) {
#pragma unroll
    for (int k = 0; k < N / 2; ++k) {
      const uint2 v = reinterpret_cast<const uint2*>(p)[k];
      w[2 * k] = v.x, w[2 * k + 1] = v.y;
    }
  } else if constexpr (A >= 4) {
#pragma unroll
    for (int k = 0; k < N; ++k) w[k] = reinterpret_cast<const uint32_t*>(p)[k];
  } else {
    const uint32_t mis = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(p) & 3);
    const uint32_t* q = reinterpret_cast<const uint32_t*>(p - mis);
    uint32_t a[N + 1];
#pragma unroll
    for (int k = 0; k <= N; ++k) a[k] = q[k];
#pragma unroll
    for (int k = 0; k < N; ++k) w[k] = fshr(a[k], a[k + 1], mis * 8);
  }
}
// A 16-bit field at p (2-byte aligned unless A == 1).
template <int A>
FT_QD uint32_t ld16(const uint8_t* p) {
  if constexpr (A >= 2) return *reinterpret_cast<const uint16_t*>(p);
  return p[0] | static_cast<uint32_t>(p[1]) << 8;
}

// w >> 16 on the multiplier (the ALU pipe, which the permutes and masks use, runs at half rate).
FT_QD uint32_t hi16(uint32_t w) {
#if defined(__CUDA_ARCH__)
  return __umulhi(w, 0x10000u);
#else
  return w >> 16;
#endif
}

// ---- nibble codebooks (e2m1 x2: MXFP4 / NVFP4; IQ4_NL / IQ4_XS), a signed 16-entry table
// looked up 4 nibbles at a time by two byte permutes, no mask: prmt's default mode reads a
// selector nibble's bit 3 as "replicate the selected byte's sign", so with the raw nibble n as
// selector A = prmt(L, n) is L[n] for n < 8 and sext(L[n & 7]) (0 or -1) above, and with n ^ 8
// B = prmt(H, n ^ 8) is H[n & 7] for n >= 8 and sext(H[n]) below. split_book picks L and H per
// entry so that A + B is the codebook value (IQ4: L = the negative low half, H = the high half
// + 1; e2m1: L = magnitude + 1 where the negative twin is nonzero, H = the negative half), and
// sum(v x) is one dp4a per table.
struct SplitBook {
  uint32_t l0, l1, h0, h1;  // L[0..3], L[4..7], H[0..3], H[4..7] as signed bytes
  bool ok;                  // every entry represented
};
constexpr SplitBook split_book(const int8_t (&v)[16]) {
  SplitBook s{0, 0, 0, 0, true};
  for (int k = 0; k < 8; ++k) {
    const int lo = v[k], hi = v[k + 8];
    const int cand[3][2] = {{lo, hi + 1}, {lo + 1, hi}, {lo, hi}};
    bool found = false;
    for (int c = 0; c < 3 && !found; ++c) {
      const int l = cand[c][0], h = cand[c][1];
      const int sl = l < 0 ? -1 : 0, sh = h < 0 ? -1 : 0;  // the replicated signs
      if (l < -128 || l > 127 || h < -128 || h > 127 || l + sh != lo || sl + h != hi) continue;
      found = true;
      const uint32_t lb = static_cast<uint8_t>(l), hb = static_cast<uint8_t>(h);
      if (k < 4)
        s.l0 |= lb << (8 * k), s.h0 |= hb << (8 * k);
      else
        s.l1 |= lb << (8 * (k - 4)), s.h1 |= hb << (8 * (k - 4));
    }
    s.ok = s.ok && found;
  }
  return s;
}
constexpr SplitBook k_e2m1_split = split_book(quant::k_e2m1_x2),
                    k_iq4_split = split_book(quant::k_iq4nl);
static_assert(k_e2m1_split.ok && k_iq4_split.ok, "codebook not representable as L + H");
// Namespace-scope constexpr scalars are usable in device code (structs are not).
constexpr uint32_t k_e2m1_l0 = k_e2m1_split.l0, k_e2m1_l1 = k_e2m1_split.l1,
                   k_e2m1_h0 = k_e2m1_split.h0, k_e2m1_h1 = k_e2m1_split.h1;
constexpr uint32_t k_iq4_l0 = k_iq4_split.l0, k_iq4_l1 = k_iq4_split.l1, k_iq4_h0 = k_iq4_split.h0,
                   k_iq4_h1 = k_iq4_split.h1;
// A format's byte-permute tables as values the compiler cannot see are constant, made once per
// kernel (tables<F>(z) with z a runtime 0): with a known constant as its table operand, ptxas
// lets each permute overwrite the register holding it and re-materializes the constant before
// the next one (measured in the sm_90 SASS: one extra MOV per permute, 16 per MXFP4 unit).
struct Tables {
  uint32_t t0, t1, t2, t3;  // L, then H (split_book)
};
// Over w's 8 nibbles (byte order lo, hi per byte) with the codes q0 (w's low half-word) and q1
// (its high one): a += the L lookups' dot, b += the H lookups' (sum(v x) = a + b).
FT_QD void book_dot(const Tables& tb, uint32_t w, uint32_t q0, uint32_t q1, int& a, int& b) {
  const uint32_t wx = w ^ 0x88888888u;
  a = dot_s8s8(prmt_s(tb.t0, tb.t1, w), q0, a);
  b = dot_s8s8(prmt_s(tb.t2, tb.t3, wx), q0, b);
  a = dot_s8s8(prmt_s(tb.t0, tb.t1, hi16(w)), q1, a);
  b = dot_s8s8(prmt_s(tb.t2, tb.t3, hi16(wx)), q1, b);
}

// Q4_0 / Q4_1's 16 bytes of nibble pairs (w[0..4)): lo = the low nibbles (elements 0..15) and
// hi = 16 x the high nibbles (16..31), dotted with the activation halves (masked in place; the
// caller shifts hi down after the dp4a).
FT_QD void nibble_pair_dots(const uint32_t* w, const XUnit& x, int& lo, int& hi) {
  lo = 0, hi = 0;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    lo = dot_u8s8(w[k] & 0x0f0f0f0fu, x.q[k], lo);
    hi = dot_u8s8(w[k] & 0xf0f0f0f0u, x.q[4 + k], hi);
  }
}

// ---- per format, Dot32<F>::dot<A>: p is the block (or, for NVFP4, the unit's first block), s
// the unit in it.
template <class F>
struct Dot32;

template <>
struct Dot32<Q4_0> {
  template <int A>
  static FT_QD float dot(const uint8_t* p, int, const XUnit& x, const Tables&) {
    uint32_t w[4];
    ldw<4, 1>(p + 2, w);  // 18-byte blocks
    int lo, hi;
    nibble_pair_dots(w, x, lo, hi);
    const float r = fmaf(x.dx0, i2f(lo), fmaf(x.dx1, i2f(hi >> 4), -8.f * (x.s0 + x.s1)));
    return h2f(static_cast<uint16_t>(ld16<A>(p))) * r;
  }
};
template <>
struct Dot32<Q4_1> {
  template <int A>
  static FT_QD float dot(const uint8_t* p, int, const XUnit& x, const Tables&) {
    uint32_t w[5];
    ldw<5, A>(p, w);  // d | m << 16, then qs
    int lo, hi;
    nibble_pair_dots(w + 1, x, lo, hi);
    const float d = h2f(static_cast<uint16_t>(w[0])), m = h2f(static_cast<uint16_t>(w[0] >> 16));
    return fmaf(d, fmaf(x.dx0, i2f(lo), x.dx1 * i2f(hi >> 4)), m * (x.s0 + x.s1));
  }
};
template <>
struct Dot32<Q8_0> {
  template <int A>
  static FT_QD float dot(const uint8_t* p, int, const XUnit& x, const Tables&) {
    uint32_t w[8];
    ldw<8, 1>(p + 2, w);  // 34-byte blocks
    int su0 = 0, su1 = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      su0 = dot_s8s8(w[k], x.q[k], su0);
      su1 = dot_s8s8(w[4 + k], x.q[4 + k], su1);
    }
    return h2f(static_cast<uint16_t>(ld16<A>(p))) * fmaf(x.dx0, i2f(su0), x.dx1 * i2f(su1));
  }
};
template <>
struct Dot32<IQ4_NL> {
  template <int A>
  static FT_QD float dot(const uint8_t* p, int, const XUnit& x, const Tables& tb) {
    uint32_t w[4];
    ldw<4, 1>(p + 2, w);
    int a = 0, b = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) book_dot(tb, w[k], x.q[2 * k], x.q[2 * k + 1], a, b);
    return h2f(static_cast<uint16_t>(ld16<A>(p))) * (x.dx0 * i2f(a + b));
  }
};
// An MXFP4 block's scale byte e as 0.5 * 2^(e - 127) (the codebook holds twice the e2m1
// values; e < 2: denormals); e = 255 (NaN) no quantizer writes.
FT_QD float e8m0_half(uint32_t e) { return bits_f32(e > 1 ? (e - 1) << 23 : 0x00200000u << e); }
template <>
struct Dot32<MXFP4> {
  template <int A>
  static FT_QD float dot(const uint8_t* p, int, const XUnit& x, const Tables& tb) {
    uint32_t w[4];
    ldw<4, 1>(p + 1, w);  // 17-byte blocks
    int a = 0, b = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) book_dot(tb, w[k], x.q[2 * k], x.q[2 * k + 1], a, b);
    return e8m0_half(p[0]) * x.dx0 * i2f(a + b);
  }
};
// Two e4m3 bytes (v's low byte -> lo, the next -> hi) as f32, exactly: on sm_89+ one
// e4m3x2 -> f16x2 convert (f16 holds every e4m3 value) and two widenings.
FT_QD void e4m3x2_f32(uint32_t v, float& lo, float& hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  const __half2_raw h =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(v & 0xffffu), __NV_E4M3);
  const float2 f = __half22float2(__half2(h));
  lo = f.x, hi = f.y;
#else
  lo = e4m3_f32(static_cast<uint8_t>(v)), hi = e4m3_f32(static_cast<uint8_t>(v >> 8));
#endif
}
template <>
struct Dot32<NVFP4> {
  template <int A>
  static FT_QD float dot(const uint8_t* p, int, const XUnit& x, const Tables& tb) {
    float sc[2];  // the two blocks' scales
    e4m3x2_f32(p[0] | static_cast<uint32_t>(p[9]) << 8, sc[0], sc[1]);
    float acc = 0.f;
#pragma unroll
    for (int b = 0; b < 2; ++b) {  // two 9-byte blocks: scale byte, 8 bytes of nibble pairs
      uint32_t w[2];
      ldw<2, 1>(p + 9 * b + 1, w);
      int sl = 0, sh = 0;
      book_dot(tb, w[0], x.q[4 * b], x.q[4 * b + 1], sl, sh);
      book_dot(tb, w[1], x.q[4 * b + 2], x.q[4 * b + 3], sl, sh);
      acc = fmaf(0.5f * sc[b] * (b ? x.dx1 : x.dx0), i2f(sl + sh), acc);
    }
    return acc;
  }
};
template <>
struct Dot32<IQ4_XS> {
  template <int A>
  static FT_QD float dot(const uint8_t* p, int s, const XUnit& x, const Tables& tb) {
    uint32_t h[2], w[4];
    ldw<2, A>(p, h);  // d | scales_h << 16, scales_l
    ldw<4, A>(p + 8 + 16 * s, w);
    int a = 0, b = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) book_dot(tb, w[k], x.q[2 * k], x.q[2 * k + 1], a, b);
    const int ls =
        static_cast<int>(((h[1] >> (4 * s)) & 15u) | (((h[0] >> (16 + 2 * s)) & 3u) << 4)) - 32;
    return h2f(static_cast<uint16_t>(h[0])) * i2f(ls) * (x.dx0 * i2f(a + b));
  }
};

template <class F, int A>
FT_QD float dot32(const uint8_t* p, int s, const XUnit& x, const Tables& tb) {
  return Dot32<F>::template dot<A>(p, s, x, tb);
}

// ---- unit groups: a lane takes Group<F>::kG consecutive units of one block at once, so the
// loads they share (the K-quants' code bytes that hold 2 or 4 sub-blocks' bits, their block
// header and scales) are read and decoded once; dot<A>(p, s, x, tb) sums units s .. s + kG - 1
// (s a multiple of kG) with their activations x(0) .. x(kG - 1) (an accessor: the kernel loads
// each from shared memory where it is used, so the group's units are not all live at once).
// One unit (Dot32) for the other formats.
template <class F>
struct Group {
  static constexpr int kG = 1;
  template <int A, class X>
  static FT_QD float dot(const uint8_t* p, int s, const X& x, const Tables& tb) {
    return Dot32<F>::template dot<A>(p, s, x(0), tb);
  }
};
template <class F>
FT_QD Tables tables(uint32_t z) {
  using B = format_of<F>;
  if constexpr (std::is_same_v<B, MXFP4> || std::is_same_v<B, NVFP4>)
    return {k_e2m1_l0 | z, k_e2m1_l1 | z, k_e2m1_h0 | z, k_e2m1_h1 | z};
  if constexpr (std::is_same_v<B, IQ4_NL> || std::is_same_v<B, IQ4_XS>)
    return {k_iq4_l0 | z, k_iq4_l1 | z, k_iq4_h0 | z, k_iq4_h1 | z};
  return {0, 0, 0, 0};
}
template <class F>
constexpr int unit_group() {
  return Group<F>::kG;
}
template <class F, int A, class X>
FT_QD float dot_units(const uint8_t* p, int s, const X& x, const Tables& tb) {
  return Group<F>::template dot<A>(p, s, x, tb);
}

// Byte k of w (unsigned) as f32, plus `bias` (exact for small values): the byte in a float's
// mantissa at 2^23 (one PRMT and an FADD).
FT_QD float byte_fb(uint32_t w, int k, float bias) {
  return bits_f32(prmt(w, 0x4B00u, 0x5440u | static_cast<uint32_t>(k))) - (8388608.f - bias);
}
// byte_fb with the constant as the permute's first operand and w its second: the selector is
// then an immediate and 0x4B00 one register, where byte_fb's form has ptxas move a selector
// into a register before every permute (Q2_K: 16 MOVs per group of 4 units; Q4_K / Q5_K's
// pair keeps fewer with byte_fb).
FT_QD float byte_fbi(uint32_t w, int k, float bias) {
  return bits_f32(prmt(0x4B00u, w, 0x1004u + static_cast<uint32_t>(k))) - (8388608.f - bias);
}
// Unit sums: the low (elements 0..15) and high (16..31) halves of u[k] . x.q[k].
FT_QD void dot_halves(const uint32_t (&u)[8], const XUnit& x, int& su0, int& su1) {
  su0 = 0, su1 = 0;
#pragma unroll
  for (int k = 0; k < 4; ++k) su0 = dot_u8s8(u[k], x.q[k], su0);
#pragma unroll
  for (int k = 4; k < 8; ++k) su1 = dot_u8s8(u[k], x.q[k], su1);
}

// Q4_K / Q5_K sub-blocks s and s + 1 (s even) from their halves' code sums a (unit s) and b
// (unit s + 1, times 1 / bs) and the block's head words h (d | dmin << 16, the 12 scale bytes):
// d (sc_s (dx0 a0 + dx1 a1) + sc_s+1 (...)) - dmin (mn_s sum(x_s) + mn_s+1 sum(x_s+1)). The
// 6-bit scales and mins of all 8 sub-blocks as bytes of two words (j < 4: the low 6 bits of
// bytes 0..3 and 4..7; j >= 4: bytes 8..11's nibbles with those bytes' top 2 bits), then bytes
// s & 3 and its successor.
FT_QD float k4_pair(const uint32_t (&h)[4], int s, const int (&a)[2], const int (&b)[2], float bs,
                    const XUnit& x0, const XUnit& x1) {
  const bool hi = s >= 4;
  const uint32_t sc = hi ? (h[3] & 0x0f0f0f0fu) | ((h[1] >> 2) & 0x30303030u) : h[1] & 0x3f3f3f3fu;
  const uint32_t mn =
      hi ? ((h[3] >> 4) & 0x0f0f0f0fu) | ((h[2] >> 2) & 0x30303030u) : h[2] & 0x3f3f3f3fu;
  const int k = s & 3;
  const float d = h2f(static_cast<uint16_t>(h[0])), dmin = h2f(static_cast<uint16_t>(h[0] >> 16));
  const float r = byte_fb(sc, k, 0.f) * fmaf(x0.dx0, i2f(a[0]), x0.dx1 * i2f(a[1])) +
                  byte_fb(sc, k + 1, 0.f) * bs * fmaf(x1.dx0, i2f(b[0]), x1.dx1 * i2f(b[1]));
  const float m = byte_fb(mn, k, 0.f) * (x0.s0 + x0.s1) + byte_fb(mn, k + 1, 0.f) * (x1.s0 + x1.s1);
  return fmaf(d, r, -dmin * m);
}

template <>
struct Group<Q4_K> {  // sub-blocks s, s + 1: the low and high nibbles of qs bytes 16 s ..
  static constexpr int kG = 2;
  template <int A, class X>
  static FT_QD float dot(const uint8_t* p, int s, const X& x, const Tables&) {
    uint32_t h[4], w[8];
    ldw<4, A>(p, h);
    ldw<8, A>(p + 16 + 16 * s, w);
    const XUnit x0 = x(0), x1 = x(1);
    int a[2] = {0, 0}, b[2] = {0, 0};  // b: 16 x the high nibbles' sums (1/16 in k4_pair)
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      a[k / 4] = dot_u8s8(w[k] & 0x0f0f0f0fu, x0.q[k], a[k / 4]);
      b[k / 4] = dot_u8s8(w[k] & 0xf0f0f0f0u, x1.q[k], b[k / 4]);
    }
    return k4_pair(h, s, a, b, 0.0625f, x0, x1);
  }
};
template <>
struct Group<Q5_K> {  // as Q4_K, with bit s (s + 1) of qh as each code's bit 4
  static constexpr int kG = 2;
  template <int A, class X>
  static FT_QD float dot(const uint8_t* p, int s, const X& x, const Tables&) {
    uint32_t h[4], qh[8], w[8];
    ldw<4, A>(p, h);
    ldw<8, A>(p + 16, qh);
    ldw<8, A>(p + 48 + 16 * s, w);
    int a[2] = {0, 0}, b[2] = {0, 0};
    const XUnit x0 = x(0);
#pragma unroll
    for (int k = 0; k < 8; ++k)
      a[k / 4] =
          dot_u8s8((w[k] & 0x0f0f0f0fu) | (((qh[k] >> s) << 4) & 0x10101010u), x0.q[k], a[k / 4]);
    const XUnit x1 = x(1);
#pragma unroll
    for (int k = 0; k < 8; ++k)
      b[k / 4] = dot_u8s8(((w[k] >> 4) & 0x0f0f0f0fu) | (((qh[k] >> s) << 3) & 0x10101010u),
                          x1.q[k], b[k / 4]);
    return k4_pair(h, s, a, b, 1.f, x0, x1);
  }
};
template <>
struct Group<Q6_K> {  // sub-blocks s = 4n .. 4n + 3: ql 64 n .. (two halves), qh 32 n ..
  static constexpr int kG = 4;
  template <int A, class X>
  static FT_QD float dot(const uint8_t* p, int s, const X& x, const Tables&) {
    const int n = s >> 2;
    uint32_t l0[8], l1[8], qh[8], sw[2];
    ldw<8, 1>(p + 64 * n, l0);  // 210-byte blocks
    ldw<8, 1>(p + 64 * n + 32, l1);
    ldw<8, 1>(p + 128 + 32 * n, qh);
    ldw<2, 1>(p + 192 + 8 * n, sw);  // the 8 signed scales, biased to unsigned
    sw[0] ^= 0x80808080u, sw[1] ^= 0x80808080u;
    float r = 0.f;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      uint32_t u[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const uint32_t l = j & 1 ? l1[k] : l0[k];
        const uint32_t q = j == 0 ? qh[k] << 4 : j == 1 ? qh[k] << 2 : j == 2 ? qh[k] : qh[k] >> 2;
        u[k] = ((j & 2 ? l >> 4 : l) & 0x0f0f0f0fu) | (q & 0x30303030u);
      }
      const XUnit xj = x(j);
      int su0, su1;
      dot_halves(u, xj, su0, su1);
      const float sc0 = byte_fb(sw[j >> 1], 2 * (j & 1), -128.f),
                  sc1 = byte_fb(sw[j >> 1], 2 * (j & 1) + 1, -128.f);
      r = fmaf(sc0, fmaf(xj.dx0, i2f(su0), -32.f * xj.s0), r);
      r = fmaf(sc1, fmaf(xj.dx1, i2f(su1), -32.f * xj.s1), r);
    }
    return h2f(static_cast<uint16_t>(ld16<A>(p + 208))) * r;
  }
};
template <>
struct Group<Q2_K> {  // sub-blocks s = 4n .. 4n + 3: bits 2 j of qs bytes 32 n ..
  static constexpr int kG = 4;
  template <int A, class X>
  static FT_QD float dot(const uint8_t* p, int s, const X& x, const Tables&) {
    const int n = s >> 2;
    uint32_t q[8], sw[2];
    ldw<8, A>(p + 16 + 32 * n, q);
    ldw<2, A>(p + 8 * n, sw);  // scale | min << 4 per 16 elements
    float r[4], m = 0.f;       // r[j]: 4^j x sub-block j's scaled sums
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      uint32_t u[8];  // the codes masked in place: 4^j x their values (no shift)
#pragma unroll
      for (int k = 0; k < 8; ++k) u[k] = q[k] & (0x03030303u << (2 * j));
      const XUnit xj = x(j);
      int su0, su1;
      dot_halves(u, xj, su0, su1);
      const uint32_t sc = sw[j >> 1] & 0x0f0f0f0fu, mn = (sw[j >> 1] >> 4) & 0x0f0f0f0fu;
      const int b = 2 * (j & 1);
      r[j] = byte_fbi(sc, b, 0.f) * (xj.dx0 * i2f(su0));
      r[j] = fmaf(byte_fbi(sc, b + 1, 0.f), xj.dx1 * i2f(su1), r[j]);
      m = fmaf(byte_fbi(mn, b, 0.f), xj.s0, m);
      m = fmaf(byte_fbi(mn, b + 1, 0.f), xj.s1, m);
    }
    const float rs = fmaf(r[3], 1.f / 64, fmaf(r[2], 1.f / 16, fmaf(r[1], 0.25f, r[0])));
    const float d = h2f(static_cast<uint16_t>(ld16<A>(p + 80))),
                dmin = h2f(static_cast<uint16_t>(ld16<A>(p + 82)));
    return fmaf(d, rs, -dmin * m);
  }
};
template <>
struct Group<Q3_K> {  // the whole block: hmask, scales and d read once for its 8 sub-blocks
  static constexpr int kG = 8;
  // Sub-block 4 n + j's codes (bits 2 j of qs bytes 32 n ..) and their high bits (hmask bit
  // 4 n + j; the words shifted down by 4 n once) masked in place: 4^j x the 2-bit code and 2^j x
  // the bit, two dp4a per word and no shifts per sub-block; (q + 4 h) 4^j = a + 2^(j + 2) b per
  // half, and the 4^-j and the codes' -4 offset applied once at the end. (Against 4 sub-blocks
  // per lane, each building its 3-bit codes: 98304x2048 61 -> 73% of the copy on the H200.)
  template <int A, class X>
  static FT_QD float dot(const uint8_t* p, int, const X& x, const Tables&) {
    uint32_t hm[8], sw[3];
    ldw<8, 1>(p, hm);  // 110-byte blocks
    ldw<3, 1>(p + 96, sw);
    float r[4] = {0.f, 0.f, 0.f, 0.f}, m = 0.f;  // r[j]: 4^j x sub-blocks 4 n + j's scaled sums
#pragma unroll
    for (int n = 0; n < 2; ++n) {
      uint32_t q[8], h[8];
      ldw<8, 1>(p + 32 + 32 * n, q);
#pragma unroll
      for (int k = 0; k < 8; ++k) h[k] = hm[k] >> (4 * n);
      // the 8 scales (k3_scale 8 n ..): low nibbles (n = 0) or high ones of bytes 0..7, bits
      // 4,5 from bytes 8..11's bit pairs 2 (2 n) and 2 (2 n + 1); 32 subtracted as floats
      const uint32_t hs = sw[2] >> (4 * n);
      const uint32_t sc[2] = {((sw[0] >> (4 * n)) & 0x0f0f0f0fu) | ((hs << 4) & 0x30303030u),
                              ((sw[1] >> (4 * n)) & 0x0f0f0f0fu) | ((hs << 2) & 0x30303030u)};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint32_t mq = 0x03030303u << (2 * j), mh = 0x01010101u << j;
        const XUnit xj = x(4 * n + j);
        int a[2] = {0, 0}, b[2] = {0, 0};
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          a[k / 4] = dot_u8s8(q[k] & mq, xj.q[k], a[k / 4]);
          b[k / 4] = dot_u8s8(h[k] & mh, xj.q[k], b[k / 4]);
        }
        const int bb = 2 * (j & 1);
        const float sc0 = byte_fb(sc[j >> 1], bb, -32.f), sc1 = byte_fb(sc[j >> 1], bb + 1, -32.f);
        r[j] = fmaf(sc0 * xj.dx0, i2f(a[0] + (b[0] << (j + 2))), r[j]);
        r[j] = fmaf(sc1 * xj.dx1, i2f(a[1] + (b[1] << (j + 2))), r[j]);
        m = fmaf(sc0, xj.s0, fmaf(sc1, xj.s1, m));
      }
    }
    const float rs = fmaf(r[3], 1.f / 64, fmaf(r[2], 1.f / 16, fmaf(r[1], 0.25f, r[0])));
    return h2f(static_cast<uint16_t>(ld16<A>(p + 108))) * fmaf(-4.f, m, rs);
  }
};

// The codebook dot (book_dot) of NW code words that start at byte o of the aligned words w,
// against activation words q[0 .. 2 NW): o is a constant once unrolled, so the words come out by
// constant funnel shifts (none at a word boundary).
template <int NW, int M>
FT_QD int book_dot_at(const Tables& tb, const uint32_t (&w)[M], int o, const uint32_t* q) {
  const int i0 = o / 4, sh = 8 * (o % 4);
  int lo = 0, hi = 0;
#pragma unroll
  for (int k = 0; k < NW; ++k) {
    const uint32_t c = sh ? fshr(w[i0 + k], w[i0 + k + (sh ? 1 : 0)], sh) : w[i0 + k];
    book_dot(tb, c, q[2 * k], q[2 * k + 1], lo, hi);
  }
  return lo + hi;
}

// Four 32-element MXFP4 blocks (68 bytes, 4-byte aligned when the first is: the shifts that
// take the codes out of the 17-byte blocks are constants, and a lane's words sit 17 apart, so a
// warp's 32-bit loads hit 32 banks). Against one block per lane on the H200: 98304x2048 69 ->
// 74% of the copy bandwidth, 4096x14336 30 -> 45%; NVFP4's pair of units 66 -> 75%.
template <>
struct Group<Wide<MXFP4>> {
  static constexpr int kG = 4;
  template <int A, class X>
  static FT_QD float dot(const uint8_t* p, int, const X& x, const Tables& tb) {
    uint32_t w[17];
    ldw<17, A >= 4 ? 4 : 1>(p, w);
    float r = 0.f;
#pragma unroll
    for (int b = 0; b < 4; ++b) {  // block b: its scale byte 17 b, its codes after
      const XUnit xb = x(b);
      const uint32_t e = (w[17 * b / 4] >> (8 * (17 * b % 4))) & 0xffu;
      r = fmaf(e8m0_half(e) * xb.dx0, i2f(book_dot_at<4>(tb, w, 17 * b + 1, xb.q)), r);
    }
    return r;
  }
};
// Two NVFP4 units: four 9-byte blocks (36 bytes, as Wide<MXFP4>); the scale bytes 0, 9, 18, 27
// paired by two permutes into two e4m3x2 converts.
template <>
struct Group<Wide<NVFP4>> {
  static constexpr int kG = 2;
  template <int A, class X>
  static FT_QD float dot(const uint8_t* p, int, const X& x, const Tables& tb) {
    uint32_t w[9];
    ldw<9, A >= 4 ? 4 : 1>(p, w);
    float sc[4];
    e4m3x2_f32(prmt(w[0], w[2], 0x0050u), sc[0], sc[1]);
    e4m3x2_f32(prmt(w[4], w[6], 0x0072u), sc[2], sc[3]);
    float r = 0.f;
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const XUnit xu = x(u);
#pragma unroll
      for (int h = 0; h < 2; ++h) {  // block 2 u + h: the unit's half h
        const int b = 2 * u + h;
        const int d = book_dot_at<2>(tb, w, 9 * b + 1, xu.q + 4 * h);
        r = fmaf(0.5f * sc[b] * (h ? xu.dx1 : xu.dx0), i2f(d), r);
      }
    }
    return r;
  }
};

// Whether the streaming GEMV has a Wide<F> group (rows of whole Wide groups only).
template <class F>
constexpr bool has_wide() {
  return std::is_same_v<F, MXFP4> || std::is_same_v<F, NVFP4>;
}

// The best alignment a lane group's first block can have (all groups of a row share it modulo
// this): that of the bytes from one group to the next, a block or several (Wide).
template <class F>
constexpr int block_align() {
  constexpr int bb = sizeof(typename F::Block), upb = units_per_block<F>();
  constexpr int g = unit_group<F>() * blocks_per_unit<F>(), st = g > upb ? g / upb * bb : bb;
  return st % 16 == 0 ? 16 : st % 8 == 0 ? 8 : st % 4 == 0 ? 4 : st % 2 == 0 ? 2 : 1;
}

}  // namespace ft::cuda
