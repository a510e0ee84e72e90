// Device side of the weight-format traits (quant/formats.h): dequant_group(block, g, w) writes
// the 16 values of group g (elements 16g..16g+15) of one block, the unit every CUDA quant
// kernel (quant_gemv.cu, quant_gemm.cu) is written over; dispatch_quant maps a DType to its
// traits type. The scalar reference stays F::dequant (checked against this by quant_checks).
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>

#include <type_traits>

#include "base/error.h"
#include "base/tensor.h"
#include "quant/formats.h"

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

// A scale the block does not carry: NVFP4's per-tensor global scale, FP8's per-tile scale_inv.
enum class QuantExt { NONE, GLOBAL, TILE128 };
template <class F>
constexpr QuantExt quant_ext() {
  if constexpr (std::is_same_v<F, quant::NVFP4>) return QuantExt::GLOBAL;
  if constexpr (std::is_same_v<F, FP8_B128>) return QuantExt::TILE128;
  return QuantExt::NONE;
}

// ---- helpers
// 4 bytes at any address: the two enclosing aligned words funnel-shifted (block fields sit at
// any byte offset; every buffer read this way has 4 readable bytes after the last block).
__device__ __forceinline__ uint32_t ld32(const uint8_t* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const uint32_t* q = reinterpret_cast<const uint32_t*>(a & ~uintptr_t{3});
  return __funnelshift_r(q[0], q[1], static_cast<uint32_t>(a & 3) * 8);
}
// Unsigned byte k of w as f32, exactly: the byte in a float's mantissa at 2^23, minus 2^23
// (a PRMT and an FADD; I2F is a quarter-rate instruction).
__device__ __forceinline__ float byte_f32(uint32_t w, int k) {
  return __uint_as_float(__byte_perm(w, 0x4B00u, 0x5440u | static_cast<uint32_t>(k))) - 8388608.f;
}
// Four bytes of w to u[0..3].
__device__ __forceinline__ void bytes_f32(uint32_t w, float* u) {
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
__device__ __forceinline__ uint32_t book4(uint32_t n) {
  constexpr bool iq = B == BookId::IQ4NL;
  const uint32_t sel = ((n | (n >> 4)) & 0xffu) | (((n >> 16) | (n >> 20)) & 0xffu) << 8;
  const uint32_t lo = __byte_perm(iq ? k_iq4_w0 : k_e2m1_w0, iq ? k_iq4_w1 : k_e2m1_w1, sel & 0x7777u);
  const uint32_t hi = __byte_perm(iq ? k_iq4_w2 : k_e2m1_w2, iq ? k_iq4_w3 : k_e2m1_w3, sel & 0x7777u);
  const uint32_t mask = ((n >> 3) & 0x01010101u) * 0xffu;
  return (hi & mask) | (lo & ~mask);
}

// ---- one overload per block type: group g's codes u[16] (small non-negative values, exact
// in f32) and affine map w = d * u + m -- formats.h's decode() form, so a dot product is
// d * sum(u x) + m * sum(x). FP8's u are the e4m3 values (d = 1, m = 0).
using namespace ::ft::quant;

// 16 bytes at p, each passed through f (word -> word) then to u.
template <class Fn>
__device__ __forceinline__ void codes16(const uint8_t* p, float (&u)[16], Fn f) {
#pragma unroll
  for (int k = 0; k < 4; ++k) bytes_f32(f(ld32(p + 4 * k), k), u + 4 * k);
}

__device__ __forceinline__ void code_group(const BlockQ4_0& b, int g, float (&u)[16], float& d,
                                           float& m) {
  codes16(b.qs, u, [&](uint32_t w, int) { return (w >> (4 * g)) & 0x0f0f0f0fu; });
  d = half_f32(b.d), m = -8.f * d;
}
__device__ __forceinline__ void code_group(const BlockQ4_1& b, int g, float (&u)[16], float& d,
                                           float& m) {
  codes16(b.qs, u, [&](uint32_t w, int) { return (w >> (4 * g)) & 0x0f0f0f0fu; });
  d = half_f32(b.d), m = half_f32(b.m);
}
__device__ __forceinline__ void code_group(const BlockQ8_0& b, int g, float (&u)[16], float& d,
                                           float& m) {
  codes16(reinterpret_cast<const uint8_t*>(b.qs) + 16 * g, u,
          [](uint32_t w, int) { return w ^ 0x80808080u; });  // int8 + 128
  d = half_f32(b.d), m = -128.f * d;
}
__device__ __forceinline__ void code_group(const BlockIQ4_NL& b, int g, float (&u)[16], float& d,
                                           float& m) {
  codes16(b.qs, u,
          [&](uint32_t w, int) { return book4<BookId::IQ4NL>((w >> (4 * g)) & 0x0f0f0f0fu); });
  d = half_f32(b.d), m = -128.f * d;
}
__device__ __forceinline__ void code_group(const BlockMXFP4& b, int g, float (&u)[16], float& d,
                                           float& m) {
  codes16(b.qs, u,
          [&](uint32_t w, int) { return book4<BookId::E2M1>((w >> (4 * g)) & 0x0f0f0f0fu); });
  d = MXFP4::scale(b), m = -12.f * d;
}
__device__ __forceinline__ void code_group(const BlockNVFP4& b, int, float (&u)[16], float& d,
                                           float& m) {
#pragma unroll
  for (int k = 0; k < 2; ++k) {  // byte j: element 2j low nibble, 2j + 1 high nibble
    const uint32_t w = ld32(b.qs + 4 * k);
    const uint32_t lo = book4<BookId::E2M1>(w & 0x0f0f0f0fu);
    const uint32_t hi = book4<BookId::E2M1>((w >> 4) & 0x0f0f0f0fu);
#pragma unroll
    for (int j = 0; j < 4; ++j) u[8 * k + 2 * j] = byte_f32(lo, j), u[8 * k + 2 * j + 1] = byte_f32(hi, j);
  }
  d = 0.5f * e4m3_f32(b.d), m = -12.f * d;
}
__device__ __forceinline__ void code_group(const BlockFP8x16& b, int, float (&u)[16], float& d,
                                           float& m) {
#pragma unroll
  for (int i = 0; i < 16; ++i) u[i] = e4m3_f32(b.q[i]);
  d = 1.f, m = 0.f;
}
// K-quants: group g of 16 in a 256 block. Q2_K/Q3_K/Q6_K: half n = g >> 3, 32-run j = (g >> 1)
// & 3, l = 16 (g & 1) + i. Q4_K/Q5_K: 64-chunk c = g >> 2, nibble s = (g >> 1) & 1.
__device__ __forceinline__ void code_group(const BlockQ2_K& b, int g, float (&u)[16], float& d,
                                           float& m) {
  const int n = g >> 3, j = (g >> 1) & 3, l0 = 16 * (g & 1);
  codes16(b.qs + 32 * n + l0, u, [&](uint32_t w, int) { return (w >> (2 * j)) & 0x03030303u; });
  d = half_f32(b.d) * static_cast<float>(b.scales[g] & 0xf);
  m = -half_f32(b.dmin) * static_cast<float>(b.scales[g] >> 4);
}
__device__ __forceinline__ void code_group(const BlockQ3_K& b, int g, float (&u)[16], float& d,
                                           float& m) {
  const int n = g >> 3, j = (g >> 1) & 3, l0 = 16 * (g & 1);
  codes16(b.qs + 32 * n + l0, u, [&](uint32_t w, int k) {
    const uint32_t h = (ld32(b.hmask + l0 + 4 * k) >> (4 * n + j)) & 0x01010101u;
    return ((w >> (2 * j)) & 0x03030303u) | (h << 2);
  });
  d = half_f32(b.d) * static_cast<float>(k3_scale(g, b.scales)), m = -4.f * d;
}
__device__ __forceinline__ void code_group(const BlockQ4_K& b, int g, float (&u)[16], float& d,
                                           float& m) {
  const int c = g >> 2, s = (g >> 1) & 1, l0 = 16 * (g & 1);
  codes16(b.qs + 32 * c + l0, u, [&](uint32_t w, int) { return (w >> (4 * s)) & 0x0f0f0f0fu; });
  int sc, mn;
  k4_scale_min(2 * c + s, b.scales, &sc, &mn);
  d = half_f32(b.d) * static_cast<float>(sc), m = -half_f32(b.dmin) * static_cast<float>(mn);
}
__device__ __forceinline__ void code_group(const BlockQ5_K& b, int g, float (&u)[16], float& d,
                                           float& m) {
  const int c = g >> 2, s = (g >> 1) & 1, l0 = 16 * (g & 1);
  codes16(b.qs + 32 * c + l0, u, [&](uint32_t w, int k) {
    const uint32_t h = (ld32(b.qh + l0 + 4 * k) >> (2 * c + s)) & 0x01010101u;
    return ((w >> (4 * s)) & 0x0f0f0f0fu) | (h << 4);
  });
  int sc, mn;
  k4_scale_min(2 * c + s, b.scales, &sc, &mn);
  d = half_f32(b.d) * static_cast<float>(sc), m = -half_f32(b.dmin) * static_cast<float>(mn);
}
__device__ __forceinline__ void code_group(const BlockQ6_K& b, int g, float (&u)[16], float& d,
                                           float& m) {
  const int n = g >> 3, j = (g >> 1) & 3, l0 = 16 * (g & 1);
  codes16(b.ql + 64 * n + l0 + 32 * (j & 1), u, [&](uint32_t w, int k) {
    const uint32_t h = (ld32(b.qh + 32 * n + l0 + 4 * k) >> (2 * j)) & 0x03030303u;
    return ((w >> (4 * (j >> 1))) & 0x0f0f0f0fu) | (h << 4);
  });
  d = half_f32(b.d) * static_cast<float>(b.scales[g]), m = -32.f * d;
}
__device__ __forceinline__ void code_group(const BlockIQ4_XS& b, int g, float (&u)[16], float& d,
                                           float& m) {
  const int s = g >> 1;
  codes16(b.qs + 16 * s, u, [&](uint32_t w, int) {
    return book4<BookId::IQ4NL>((w >> (4 * (g & 1))) & 0x0f0f0f0fu);
  });
  d = half_f32(b.d) * static_cast<float>(IQ4_XS::scale(b, s)), m = -128.f * d;
}

// The 16 dequantized values of group g (w = d * u + m, one rounding: the reference's value).
template <class Block>
__device__ __forceinline__ void dequant_group(const Block& b, int g, float (&w)[16]) {
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
