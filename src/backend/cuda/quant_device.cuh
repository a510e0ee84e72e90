// Device side of the weight-format traits (quant/formats.h): code_words(block, g, u, d, m) gives
// group g (elements 16g..16g+15) of one block as four words of unsigned code bytes and an affine
// map w = d * u + m, the unit every CUDA quant kernel is written over (the int8-activation GEMV
// takes the words to __dp4a; code_group / dequant_group turn them into floats for the f32 GEMV
// and the GEMM panels); dispatch_quant maps a DType to its traits type. The scalar reference
// stays F::dequant (checked against this by quant_checks). Helpers are host-callable too (byte
// permute and funnel shift emulated) so the decoders can be checked on a CPU.
#pragma once
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <type_traits>

#include "base/error.h"
#include "base/tensor.h"
#include "quant/formats.h"

#define FT_QD __host__ __device__ __forceinline__

namespace ft::cuda {

// FP8 e4m3 with 128x128 block scales as a 16-element "block" (no scale inside: the kernels
// multiply each group by its tile's scale_inv, see kExt).
struct BlockFP8x16 {
  uint8_t q[16];
};
struct FP8_B128 {
  using Block = BlockFP8x16;
  static constexpr int kElems = 16;
};

// Format F read by the one-token streaming GEMV in wider lane groups (quant_dot32.cuh's
// Group<Wide<F>>: four MXFP4 / NVFP4 blocks per lane at once, rows of whole groups only); the
// same blocks and traits as F. format_of<F> is the format itself.
template <class F>
struct Wide : F {};
template <class F>
struct FormatOf {
  using type = F;
};
template <class F>
struct FormatOf<Wide<F>> {
  using type = F;
};
template <class F>
using format_of = typename FormatOf<F>::type;

// A scale the block does not carry: NVFP4's per-tensor global scale, FP8's per-tile scale_inv.
enum class QuantExt { NONE, GLOBAL, TILE128 };
template <class F>
constexpr QuantExt quant_ext() {
  if constexpr (std::is_same_v<format_of<F>, quant::NVFP4>) return QuantExt::GLOBAL;
  if constexpr (std::is_same_v<F, FP8_B128>) return QuantExt::TILE128;
  return QuantExt::NONE;
}

// ---- helpers
// __byte_perm (selector nibbles 0..7) and __funnelshift_r, emulated on the host.
FT_QD uint32_t prmt(uint32_t x, uint32_t y, uint32_t s) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(x, y, s);
#else
  const uint64_t v = (static_cast<uint64_t>(y) << 32) | x;
  uint32_t r = 0;
  for (int n = 0; n < 4; ++n) r |= static_cast<uint32_t>((v >> (8 * ((s >> (4 * n)) & 7))) & 0xff) << (8 * n);
  return r;
#endif
}
FT_QD uint32_t fshr(uint32_t lo, uint32_t hi, uint32_t sh) {
#if defined(__CUDA_ARCH__)
  return __funnelshift_r(lo, hi, sh);
#else
  return static_cast<uint32_t>(((static_cast<uint64_t>(hi) << 32) | lo) >> (sh & 31));
#endif
}
// 4 bytes at any address: the two enclosing aligned words funnel-shifted (block fields sit at
// any byte offset; every buffer read this way has 4 readable bytes after the last block). The
// aligned address is p minus its misalignment, not an integer cast back to a pointer, so the
// compiler keeps p's address space (shared-memory loads stay LDS, not generic loads).
FT_QD uint32_t ld32(const uint8_t* p) {
  const uint32_t mis = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(p) & 3);
  const uint32_t* q = reinterpret_cast<const uint32_t*>(p - mis);
  return fshr(q[0], q[1], mis * 8);
}
// 16 bytes at any address as four words: the five enclosing aligned words funnel-shifted.
FT_QD void ld128(const uint8_t* p, uint32_t (&u)[4]) {
  const uint32_t mis = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(p) & 3);
  const uint32_t* q = reinterpret_cast<const uint32_t*>(p - mis);
  const uint32_t sh = mis * 8, w4 = q[4];
  uint32_t w[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) w[k] = q[k];
#pragma unroll
  for (int k = 0; k < 4; ++k) u[k] = fshr(w[k], k < 3 ? w[k + 1] : w4, sh);
}
// IEEE half bits as f32, exactly (the hardware convert on the device).
FT_QD float h2f(uint16_t h) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(h));
#else
  return quant::half_f32(h);
#endif
}
// An int with |v| < 2^22 as f32, exactly: added into the mantissa of 1.5 * 2^23 (an IADD and
// an FADD; I2F is a quarter-rate instruction).
FT_QD float i2f(int v) {
  return quant::bits_f32(0x4B400000u + static_cast<uint32_t>(v)) - 12582912.f;
}
// Unsigned byte k of w as f32, exactly: the byte in a float's mantissa at 2^23, minus 2^23
// (a PRMT and an FADD; I2F is a quarter-rate instruction).
FT_QD float byte_f32(uint32_t w, int k) {
  return quant::bits_f32(prmt(w, 0x4B00u, 0x5440u | static_cast<uint32_t>(k))) - 8388608.f;
}
// Four bytes of w to u[0..3].
FT_QD void bytes_f32(uint32_t w, float* u) {
#pragma unroll
  for (int k = 0; k < 4; ++k) u[k] = byte_f32(w, k);
}

// 16-entry byte codebooks (formats.h's biased kBook tables) as four little-endian words.
struct Book16 {
  uint32_t w0, w1, w2, w3;
};
constexpr Book16 book16(const quant::Book& b) {
  auto v = [&](int i) { return static_cast<uint32_t>(b.v[i]); };
  return {v(0) | v(1) << 8 | v(2) << 16 | v(3) << 24, v(4) | v(5) << 8 | v(6) << 16 | v(7) << 24,
          v(8) | v(9) << 8 | v(10) << 16 | v(11) << 24,
          v(12) | v(13) << 8 | v(14) << 16 | v(15) << 24};
}
// Namespace-scope constexpr scalars are usable in device code (structs and arrays are not).
constexpr uint32_t k_iq4_w0 = book16(quant::k_iq4nl_book).w0, k_iq4_w1 = book16(quant::k_iq4nl_book).w1,
                   k_iq4_w2 = book16(quant::k_iq4nl_book).w2, k_iq4_w3 = book16(quant::k_iq4nl_book).w3;
constexpr uint32_t k_e2m1_w0 = book16(quant::k_e2m1_book).w0, k_e2m1_w1 = book16(quant::k_e2m1_book).w1,
                   k_e2m1_w2 = book16(quant::k_e2m1_book).w2, k_e2m1_w3 = book16(quant::k_e2m1_book).w3;
enum class BookId { IQ4NL, E2M1 };

// n: four nibble indices, one per byte (each < 16) -> the four codebook bytes.
template <BookId B>
FT_QD uint32_t book4(uint32_t n) {
  constexpr bool iq = B == BookId::IQ4NL;
  const uint32_t sel = ((n | (n >> 4)) & 0xffu) | (((n >> 16) | (n >> 20)) & 0xffu) << 8;
  const uint32_t lo = prmt(iq ? k_iq4_w0 : k_e2m1_w0, iq ? k_iq4_w1 : k_e2m1_w1, sel & 0x7777u);
  const uint32_t hi = prmt(iq ? k_iq4_w2 : k_e2m1_w2, iq ? k_iq4_w3 : k_e2m1_w3, sel & 0x7777u);
  const uint32_t mask = ((n >> 3) & 0x01010101u) * 0xffu;
  return (hi & mask) | (lo & ~mask);
}

// ---- one overload per block type: group g's codes as four words u[4] of unsigned bytes in
// element order (small non-negative values) and the affine map w = d * u + m -- formats.h's
// decode() form, so a dot product is d * sum(u x) + m * sum(x). FP8 has no integer codes: its
// code_group gives the e4m3 values as floats (d = 1, m = 0) and it has no code_words.
using namespace ::ft::quant;

// u[k] = f(the 4 bytes at p + 4k, k).
template <class Fn>
FT_QD void words16(const uint8_t* p, uint32_t (&u)[4], Fn f) {
  ld128(p, u);
#pragma unroll
  for (int k = 0; k < 4; ++k) u[k] = f(u[k], k);
}

FT_QD void code_words(const BlockQ4_0& b, int g, uint32_t (&u)[4], float& d, float& m) {
  words16(b.qs, u, [&](uint32_t w, int) { return (w >> (4 * g)) & 0x0f0f0f0fu; });
  d = h2f(b.d), m = -8.f * d;
}
FT_QD void code_words(const BlockQ4_1& b, int g, uint32_t (&u)[4], float& d, float& m) {
  words16(b.qs, u, [&](uint32_t w, int) { return (w >> (4 * g)) & 0x0f0f0f0fu; });
  d = h2f(b.d), m = h2f(b.m);
}
FT_QD void code_words(const BlockQ8_0& b, int g, uint32_t (&u)[4], float& d, float& m) {
  words16(reinterpret_cast<const uint8_t*>(b.qs) + 16 * g, u,
          [](uint32_t w, int) { return w ^ 0x80808080u; });  // int8 + 128
  d = h2f(b.d), m = -128.f * d;
}
FT_QD void code_words(const BlockIQ4_NL& b, int g, uint32_t (&u)[4], float& d, float& m) {
  words16(b.qs, u,
          [&](uint32_t w, int) { return book4<BookId::IQ4NL>((w >> (4 * g)) & 0x0f0f0f0fu); });
  d = h2f(b.d), m = -128.f * d;
}
FT_QD void code_words(const BlockMXFP4& b, int g, uint32_t (&u)[4], float& d, float& m) {
  words16(b.qs, u,
          [&](uint32_t w, int) { return book4<BookId::E2M1>((w >> (4 * g)) & 0x0f0f0f0fu); });
  d = MXFP4::scale(b), m = -12.f * d;
}
FT_QD void code_words(const BlockNVFP4& b, int, uint32_t (&u)[4], float& d, float& m) {
#pragma unroll
  for (int k = 0; k < 2; ++k) {  // byte j: element 2j low nibble, 2j + 1 high nibble
    const uint32_t w = ld32(b.qs + 4 * k);
    const uint32_t lo = book4<BookId::E2M1>(w & 0x0f0f0f0fu);
    const uint32_t hi = book4<BookId::E2M1>((w >> 4) & 0x0f0f0f0fu);
    u[2 * k] = prmt(lo, hi, 0x5140u), u[2 * k + 1] = prmt(lo, hi, 0x7362u);  // interleave
  }
  d = 0.5f * e4m3_f32(b.d), m = -12.f * d;
}
// K-quants: group g of 16 in a 256 block. Q2_K/Q3_K/Q6_K: half n = g >> 3, 32-run j = (g >> 1)
// & 3, l = 16 (g & 1) + i. Q4_K/Q5_K: 64-chunk c = g >> 2, nibble s = (g >> 1) & 1.
FT_QD void code_words(const BlockQ2_K& b, int g, uint32_t (&u)[4], float& d, float& m) {
  const int n = g >> 3, j = (g >> 1) & 3, l0 = 16 * (g & 1);
  words16(b.qs + 32 * n + l0, u, [&](uint32_t w, int) { return (w >> (2 * j)) & 0x03030303u; });
  d = h2f(b.d) * i2f(b.scales[g] & 0xf);
  m = -h2f(b.dmin) * i2f(b.scales[g] >> 4);
}
FT_QD void code_words(const BlockQ3_K& b, int g, uint32_t (&u)[4], float& d, float& m) {
  const int n = g >> 3, j = (g >> 1) & 3, l0 = 16 * (g & 1);
  uint32_t hm[4];
  ld128(b.hmask + l0, hm);
  words16(b.qs + 32 * n + l0, u, [&](uint32_t w, int k) {
    const uint32_t h = (hm[k] >> (4 * n + j)) & 0x01010101u;
    return ((w >> (2 * j)) & 0x03030303u) | (h << 2);
  });
  d = h2f(b.d) * i2f(k3_scale(g, b.scales)), m = -4.f * d;
}
// Q4_K/Q5_K sub-block j's 6-bit scale and min (formats.h k4_scale_min) without a branch on j:
// the 12 scale bytes as three words, byte j & 3 of each, then the j < 4 or j >= 4 packing.
FT_QD void k4_sm(int j, const uint8_t* scales, float& sc, float& mn) {
  const uint32_t sh = 8u * static_cast<uint32_t>(j & 3);
  const uint32_t a = (ld32(scales) >> sh) & 0xffu, b = (ld32(scales + 4) >> sh) & 0xffu;
  const uint32_t c = (ld32(scales + 8) >> sh) & 0xffu;
  const bool lo = j < 4;
  sc = i2f(static_cast<int>(lo ? a & 63u : (c & 0xfu) | (a >> 6) << 4));
  mn = i2f(static_cast<int>(lo ? b & 63u : (c >> 4) | (b >> 6) << 4));
}
FT_QD void code_words(const BlockQ4_K& b, int g, uint32_t (&u)[4], float& d, float& m) {
  const int c = g >> 2, s = (g >> 1) & 1, l0 = 16 * (g & 1);
  words16(b.qs + 32 * c + l0, u, [&](uint32_t w, int) { return (w >> (4 * s)) & 0x0f0f0f0fu; });
  float sc, mn;
  k4_sm(2 * c + s, b.scales, sc, mn);
  d = h2f(b.d) * sc, m = -h2f(b.dmin) * mn;
}
FT_QD void code_words(const BlockQ5_K& b, int g, uint32_t (&u)[4], float& d, float& m) {
  const int c = g >> 2, s = (g >> 1) & 1, l0 = 16 * (g & 1);
  uint32_t qh[4];
  ld128(b.qh + l0, qh);
  words16(b.qs + 32 * c + l0, u, [&](uint32_t w, int k) {
    const uint32_t h = (qh[k] >> (2 * c + s)) & 0x01010101u;
    return ((w >> (4 * s)) & 0x0f0f0f0fu) | (h << 4);
  });
  float sc, mn;
  k4_sm(2 * c + s, b.scales, sc, mn);
  d = h2f(b.d) * sc, m = -h2f(b.dmin) * mn;
}
FT_QD void code_words(const BlockQ6_K& b, int g, uint32_t (&u)[4], float& d, float& m) {
  const int n = g >> 3, j = (g >> 1) & 3, l0 = 16 * (g & 1);
  uint32_t qh[4];
  ld128(b.qh + 32 * n + l0, qh);
  words16(b.ql + 64 * n + l0 + 32 * (j & 1), u, [&](uint32_t w, int k) {
    const uint32_t h = (qh[k] >> (2 * j)) & 0x03030303u;
    return ((w >> (4 * (j >> 1))) & 0x0f0f0f0fu) | (h << 4);
  });
  d = h2f(b.d) * i2f(b.scales[g]), m = -32.f * d;
}
FT_QD void code_words(const BlockIQ4_XS& b, int g, uint32_t (&u)[4], float& d, float& m) {
  const int s = g >> 1;
  words16(b.qs + 16 * s, u, [&](uint32_t w, int) {
    return book4<BookId::IQ4NL>((w >> (4 * (g & 1))) & 0x0f0f0f0fu);
  });
  d = h2f(b.d) * i2f(IQ4_XS::scale(b, s)), m = -128.f * d;
}

// Whether F's blocks have integer codes (code_words): every format but FP8.
template <class F>
constexpr bool has_code_words() {
  return !std::is_same_v<F, FP8_B128>;
}

// Group g's codes as floats u[16] (exact) and its affine map.
template <class Block>
FT_QD void code_group(const Block& b, int g, float (&u)[16], float& d, float& m) {
  uint32_t w[4];
  code_words(b, g, w, d, m);
#pragma unroll
  for (int k = 0; k < 4; ++k) bytes_f32(w[k], u + 4 * k);
}
FT_QD void code_group(const BlockFP8x16& b, int, float (&u)[16], float& d, float& m) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint32_t ws[4];
  ld128(b.q, ws);
#pragma unroll
  for (int k = 0; k < 4; ++k) {  // the hardware e4m3x2 -> f16x2 convert (exact), then to f32
    const uint32_t w = ws[k];
    const __half2_raw lo = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w & 0xffffu), __NV_E4M3);
    const __half2_raw hi = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w >> 16), __NV_E4M3);
    const float2 a = __half22float2(__half2(lo)), c = __half22float2(__half2(hi));
    u[4 * k] = a.x, u[4 * k + 1] = a.y, u[4 * k + 2] = c.x, u[4 * k + 3] = c.y;
  }
#else
#pragma unroll
  for (int i = 0; i < 16; ++i) u[i] = e4m3_f32(b.q[i]);
#endif
  d = 1.f, m = 0.f;
}

// sum_k u[k] . q[k] over bytes: unsigned code bytes times signed int8 activations, plus c.
FT_QD int dot_u8s8(uint32_t u, uint32_t q, int c) {
#if defined(__CUDA_ARCH__)
  int r;
  asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(u), "r"(q), "r"(c));
  return r;
#else
  for (int i = 0; i < 4; ++i)
    c += static_cast<int>((u >> (8 * i)) & 0xff) * static_cast<int8_t>((q >> (8 * i)) & 0xff);
  return c;
#endif
}

// The 16 dequantized values of group g (w = d * u + m, one rounding: the reference's value).
template <class Block>
FT_QD void dequant_group(const Block& b, int g, float (&w)[16]) {
  float u[16], d, m;
  code_group(b, g, u, d, m);
#pragma unroll
  for (int i = 0; i < 16; ++i) w[i] = fmaf(d, u[i], m);
}

// Calls fn(F{}) with the traits type of a quantized weight dtype; false for other dtypes.
template <class Fn>
bool dispatch_quant(DType t, Fn&& fn) {
  switch (t) {
    case DType::Q4_0: fn(Q4_0{}); return true;
    case DType::Q4_1: fn(Q4_1{}); return true;
    case DType::Q8_0: fn(Q8_0{}); return true;
    case DType::Q2_K: fn(Q2_K{}); return true;
    case DType::Q3_K: fn(Q3_K{}); return true;
    case DType::Q4_K: fn(Q4_K{}); return true;
    case DType::Q5_K: fn(Q5_K{}); return true;
    case DType::Q6_K: fn(Q6_K{}); return true;
    case DType::IQ4_NL: fn(IQ4_NL{}); return true;
    case DType::IQ4_XS: fn(IQ4_XS{}); return true;
    case DType::MXFP4: fn(MXFP4{}); return true;
    case DType::NVFP4: fn(NVFP4{}); return true;
    case DType::F8_E4M3_B128: fn(FP8_B128{}); return true;
    default: return false;
  }
}

}  // namespace ft::cuda
