// dot32<F, A>: one 32-element unit of a quantized row dotted with int8 activations, the inner
// step of the one-token streaming GEMV (quant_gemv_stream.cu). A unit is elements [32u, 32u + 32)
// of the row: one block of the 32-element formats, sub-block s of the 256-element ones, two
// NVFP4 blocks. The activations come per unit as 8 words of int8 codes with the scales of its
// two halves and their scaled code sums (XUnit), in the byte order the format's
// decoder produces (x_order<F>): the nibble-codebook formats look a half-word of 4 nibbles up
// with one byte permute, so their codes arrive as (low, high) nibble pairs and the activations
// are stored in that order instead of re-interleaving the weights. A: the alignment the
// block's address is known to have (16, 8, 4, or 1 for any), chosen per chunk by the kernel.
// Host-callable (prmt, funnel shift and dp4a emulated): quant_codes_test checks every format
// against the reference dequant on the CPU.
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
  if constexpr (std::is_same_v<F, MXFP4> || std::is_same_v<F, IQ4_NL> || std::is_same_v<F, IQ4_XS>)
    return XOrder::NIBBLE_PAIRS;
  return XOrder::NATURAL;
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

// ---- nibble codebooks. e2m1 (x2) is symmetric: its 8 magnitudes look up by a nibble's low 3
// bits with one byte permute per half-word of 4 nibbles. With the raw nibble as selector, the
// sign bit becomes prmt's replicate flag and negative entries read 0 (the magnitude table's top
// bits are clear), so sum(v x) = 2 dp4a(pos) - dp4a(all): all = the magnitudes of every nibble.
constexpr uint32_t k_e2m1_mag0 = 0x03020100u, k_e2m1_mag1 = 0x0c080604u;  // 0 1 2 3 | 4 6 8 12
// w >> 16 on the multiplier (the ALU pipe, which the permutes and masks use, runs at half rate).
FT_QD uint32_t hi16(uint32_t w) {
#if defined(__CUDA_ARCH__)
  return __umulhi(w, 0x10000u);
#else
  return w >> 16;
#endif
}
// Over w's 8 nibbles (byte order lo, hi per byte) with the codes q0 (w's low half-word) and q1
// (its high one): pos += sum over the non-negative entries, all += sum over |entries|.
FT_QD void e2m1_dot(uint32_t w, uint32_t q0, uint32_t q1, int& pos, int& all) {
  const uint32_t m7 = w & 0x77777777u;
  pos = dot_u8s8(prmt_s(k_e2m1_mag0, k_e2m1_mag1, w), q0, pos);
  pos = dot_u8s8(prmt_s(k_e2m1_mag0, k_e2m1_mag1, hi16(w)), q1, pos);
  all = dot_u8s8(prmt_s(k_e2m1_mag0, k_e2m1_mag1, m7), q0, all);
  all = dot_u8s8(prmt_s(k_e2m1_mag0, k_e2m1_mag1, hi16(m7)), q1, all);
}
// IQ4_NL's table (biased +128 to bytes) is not symmetric: entries 0..7 and 8..15 look up
// separately and bit 3 of each nibble picks, through a byte mask made by prmt's replicate
// mode from the nibbles' bit 3 (shifted to a byte's top bit).
FT_QD int iq4_dot(uint32_t w, uint32_t q0, uint32_t q1, int acc) {
  const uint32_t m7 = w & 0x77777777u, w4 = w << 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint32_t s = h ? hi16(m7) : m7;
    const uint32_t lo = prmt_s(k_iq4_w0, k_iq4_w1, s), hi = prmt_s(k_iq4_w2, k_iq4_w3, s);
    const uint32_t mask = prmt_s(w4, w, h ? 0xfbeau : 0xd9c8u);  // 0xff where bit 3 is set
    acc = dot_u8s8((hi & mask) | (lo & ~mask), h ? q1 : q0, acc);
  }
  return acc;
}

// Q4_K / Q5_K sub-block j's 6-bit scale and min from the scale words a, b, c (bytes 0..11).
FT_QD void k4_words_sm(int j, uint32_t a, uint32_t b, uint32_t c, int& sc, int& mn) {
  const uint32_t sh = 8u * static_cast<uint32_t>(j & 3);
  const uint32_t A = a >> sh, B = b >> sh, C = c >> sh;
  if (j < 4) {
    sc = static_cast<int>(A & 63u), mn = static_cast<int>(B & 63u);
  } else {
    sc = static_cast<int>((C & 15u) | ((A >> 2) & 48u));
    mn = static_cast<int>(((C >> 4) & 15u) | ((B >> 2) & 48u));
  }
}
// Q4_K / Q5_K sub-block s from its code sums (su0, su1: the unit's halves) and the block's head
// words h (d | dmin << 16, then the 12 scale bytes): d sc (dx0 su0 + dx1 su1) - dmin mn sum(x).
FT_QD float k4_unit(const uint32_t (&h)[4], int s, int su0, int su1, const XUnit& x) {
  int sc, mn;
  k4_words_sm(s, h[1], h[2], h[3], sc, mn);
  const float d = h2f(static_cast<uint16_t>(h[0])), dmin = h2f(static_cast<uint16_t>(h[0] >> 16));
  return fmaf(d * i2f(sc), fmaf(x.dx0, i2f(su0), x.dx1 * i2f(su1)), -dmin * i2f(mn) * (x.s0 + x.s1));
}
// Low/high half (16 elements each) sums of u[k] . q[k].
FT_QD void dot_halves(const uint32_t (&u)[8], const XUnit& x, int& su0, int& su1) {
  su0 = 0, su1 = 0;
#pragma unroll
  for (int k = 0; k < 4; ++k) su0 = dot_u8s8(u[k], x.q[k], su0);
#pragma unroll
  for (int k = 4; k < 8; ++k) su1 = dot_u8s8(u[k], x.q[k], su1);
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
  static FT_QD float dot(const uint8_t* p, int, const XUnit& x) {
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
  static FT_QD float dot(const uint8_t* p, int, const XUnit& x) {
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
  static FT_QD float dot(const uint8_t* p, int, const XUnit& x) {
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
  static FT_QD float dot(const uint8_t* p, int, const XUnit& x) {
    uint32_t w[4];
    ldw<4, 1>(p + 2, w);
    int su = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) su = iq4_dot(w[k], x.q[2 * k], x.q[2 * k + 1], su);
    return h2f(static_cast<uint16_t>(ld16<A>(p))) * fmaf(x.dx0, i2f(su), -128.f * (x.s0 + x.s1));
  }
};
template <>
struct Dot32<MXFP4> {
  template <int A>
  static FT_QD float dot(const uint8_t* p, int, const XUnit& x) {
    uint32_t w[4];
    ldw<4, 1>(p + 1, w);  // 17-byte blocks
    int pos = 0, all = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) e2m1_dot(w[k], x.q[2 * k], x.q[2 * k + 1], pos, all);
    // 0.5 * 2^(e - 127) (e < 2: denormals); e = 255 (NaN) no quantizer writes
    const uint32_t e = p[0];
    return bits_f32(e > 1 ? (e - 1) << 23 : 0x00200000u << e) * x.dx0 * i2f(2 * pos - all);
  }
};
template <>
struct Dot32<NVFP4> {
  template <int A>
  static FT_QD float dot(const uint8_t* p, int, const XUnit& x) {
    float acc = 0.f;
#pragma unroll
    for (int b = 0; b < 2; ++b) {  // two 9-byte blocks: scale byte, 8 bytes of nibble pairs
      uint32_t w[2];
      ldw<2, 1>(p + 9 * b + 1, w);
      int pos = 0, all = 0;
      e2m1_dot(w[0], x.q[4 * b], x.q[4 * b + 1], pos, all);
      e2m1_dot(w[1], x.q[4 * b + 2], x.q[4 * b + 3], pos, all);
      acc = fmaf(0.5f * e4m3_f32(p[9 * b]) * (b ? x.dx1 : x.dx0), i2f(2 * pos - all), acc);
    }
    return acc;
  }
};
template <>
struct Dot32<Q4_K> {
  template <int A>
  static FT_QD float dot(const uint8_t* p, int s, const XUnit& x) {
    const int c = s >> 1, nib = s & 1;
    uint32_t h[4], w[8];
    ldw<4, A>(p, h);  // d | dmin << 16, scales
    ldw<8, A>(p + 16 + 32 * c, w);
    const uint32_t mask = nib ? 0xf0f0f0f0u : 0x0f0f0f0fu;
    int su0 = 0, su1 = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      su0 = dot_u8s8(w[k] & mask, x.q[k], su0);
      su1 = dot_u8s8(w[4 + k] & mask, x.q[4 + k], su1);
    }
    su0 >>= 4 * nib, su1 >>= 4 * nib;
    return k4_unit(h, s, su0, su1, x);
  }
};
template <>
struct Dot32<Q5_K> {
  template <int A>
  static FT_QD float dot(const uint8_t* p, int s, const XUnit& x) {
    const int c = s >> 1, nib = s & 1;
    uint32_t h[4], qh[8], w[8];
    ldw<4, A>(p, h);
    ldw<8, A>(p + 16, qh);
    ldw<8, A>(p + 48 + 32 * c, w);
    uint32_t u[8];
#pragma unroll
    for (int k = 0; k < 8; ++k)
      u[k] = ((w[k] >> (4 * nib)) & 0x0f0f0f0fu) | (((qh[k] >> s) & 0x01010101u) << 4);
    int su0, su1;
    dot_halves(u, x, su0, su1);
    return k4_unit(h, s, su0, su1, x);
  }
};
template <>
struct Dot32<Q6_K> {
  template <int A>
  static FT_QD float dot(const uint8_t* p, int s, const XUnit& x) {
    const int n = s >> 2, j = s & 3;
    uint32_t ql[8], qh[8], u[8];
    ldw<8, 1>(p + 64 * n + 32 * (j & 1), ql);  // 210-byte blocks
    ldw<8, 1>(p + 128 + 32 * n, qh);
#pragma unroll
    for (int k = 0; k < 8; ++k)
      u[k] = ((ql[k] >> (4 * (j >> 1))) & 0x0f0f0f0fu) | (((qh[k] >> (2 * j)) & 0x03030303u) << 4);
    int su0, su1;
    dot_halves(u, x, su0, su1);
    const int g = 8 * n + 2 * j;
    const float sc0 = i2f(static_cast<int8_t>(p[192 + g])), sc1 = i2f(static_cast<int8_t>(p[193 + g]));
    const float r = sc0 * fmaf(x.dx0, i2f(su0), -32.f * x.s0) + sc1 * fmaf(x.dx1, i2f(su1), -32.f * x.s1);
    return h2f(static_cast<uint16_t>(ld16<A>(p + 208))) * r;
  }
};
template <>
struct Dot32<Q2_K> {
  template <int A>
  static FT_QD float dot(const uint8_t* p, int s, const XUnit& x) {
    const int n = s >> 2, j = s & 3;
    uint32_t q[8], u[8];
    ldw<8, A>(p + 16 + 32 * n, q);
#pragma unroll
    for (int k = 0; k < 8; ++k) u[k] = (q[k] >> (2 * j)) & 0x03030303u;
    int su0, su1;
    dot_halves(u, x, su0, su1);
    const int g = 8 * n + 2 * j;
    const uint32_t sc0 = p[g], sc1 = p[g + 1];
    const float d = h2f(static_cast<uint16_t>(ld16<A>(p + 80))), dmin = h2f(static_cast<uint16_t>(ld16<A>(p + 82)));
    const float r = i2f(static_cast<int>(sc0 & 15u)) * x.dx0 * i2f(su0) +
                    i2f(static_cast<int>(sc1 & 15u)) * x.dx1 * i2f(su1);
    const float mn = i2f(static_cast<int>(sc0 >> 4)) * x.s0 + i2f(static_cast<int>(sc1 >> 4)) * x.s1;
    return fmaf(d, r, -dmin * mn);
  }
};
template <>
struct Dot32<Q3_K> {
  template <int A>
  static FT_QD float dot(const uint8_t* p, int s, const XUnit& x) {
    const int n = s >> 2, j = s & 3;
    uint32_t q[8], hm[8], u[8];
    ldw<8, 1>(p + 32 + 32 * n, q);  // 110-byte blocks
    ldw<8, 1>(p, hm);
    const int hb = 4 * n + j;
#pragma unroll
    for (int k = 0; k < 8; ++k)
      u[k] = ((q[k] >> (2 * j)) & 0x03030303u) | (((hm[k] >> hb) & 0x01010101u) << 2);
    int su0, su1;
    dot_halves(u, x, su0, su1);
    const int g = 8 * n + 2 * j;
    const float sc0 = i2f(k3_scale(g, p + 96)), sc1 = i2f(k3_scale(g + 1, p + 96));
    const float r = sc0 * fmaf(x.dx0, i2f(su0), -4.f * x.s0) + sc1 * fmaf(x.dx1, i2f(su1), -4.f * x.s1);
    return h2f(static_cast<uint16_t>(ld16<A>(p + 108))) * r;
  }
};
template <>
struct Dot32<IQ4_XS> {
  template <int A>
  static FT_QD float dot(const uint8_t* p, int s, const XUnit& x) {
    uint32_t h[2], w[4];
    ldw<2, A>(p, h);  // d | scales_h << 16, scales_l
    ldw<4, A>(p + 8 + 16 * s, w);
    int su = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) su = iq4_dot(w[k], x.q[2 * k], x.q[2 * k + 1], su);
    const int ls = static_cast<int>(((h[1] >> (4 * s)) & 15u) | (((h[0] >> (16 + 2 * s)) & 3u) << 4)) - 32;
    return h2f(static_cast<uint16_t>(h[0])) * i2f(ls) * fmaf(x.dx0, i2f(su), -128.f * (x.s0 + x.s1));
  }
};

template <class F, int A>
FT_QD float dot32(const uint8_t* p, int s, const XUnit& x) {
  return Dot32<F>::template dot<A>(p, s, x);
}

// The best alignment a block of F can have (all blocks of a row share it modulo this).
template <class F>
constexpr int block_align() {
  constexpr int bb = sizeof(typename F::Block);
  return bb % 16 == 0 ? 16 : bb % 8 == 0 ? 8 : bb % 4 == 0 ? 4 : bb % 2 == 0 ? 2 : 1;
}

}  // namespace ft::cuda
