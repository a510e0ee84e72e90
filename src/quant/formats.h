// Block layouts and scalar reference dequant of every quantized weight format: one traits
// struct per format. Plain structs and inline functions only, so .cu files can include it.
//
// Each traits type F provides:
//   Block, kElems (elements per block), dequant(const Block&, float* y)  -- the reference
//   decode(const Block&, uint8_t* u, float* d, float* m): the same values as unsigned codes
//     with an affine map per 16-element group g: w[i] = d[g] * u[i] + m[g]; kMaxU bounds u.
//     Every format's dot product with int8 activations is written once over this form.
//     kHasBook: decode() writes 4-bit codebook indices and u = kBook.v[index] (a 16-entry
//     byte table, so SIMD kernels map whole rows with one shuffle); code<F>() applies it.
// Layouts follow ggml's ggml-common.h (GGUF formats), the OCP MX spec (MXFP4) and NVIDIA
// ModelOpt (NVFP4, with our 16-element block: scale byte then 8 bytes of e2m1 pairs).
#pragma once
#include <cstdint>
#include <cstring>
#if (defined(__SSE2__) || defined(__F16C__)) && !defined(__CUDACC__)
#include <immintrin.h>
#endif

#if defined(__CUDACC__)
#define FT_QHD __host__ __device__ __forceinline__
#else
// Always inlined: translation units built for different ISAs (-mavx512f, plain x86-64) must
// each get their own code, never one merged out-of-line copy.
#define FT_QHD inline __attribute__((always_inline))
#endif
#define FT_RESTRICT __restrict__

namespace ft::quant {

// ---- scalar conversions --------------------------------------------------------------------
FT_QHD float bits_f32(uint32_t u) {
  union {
    uint32_t u;
    float f;
  } c{u};
  return c.f;
}

FT_QHD uint32_t f32_bits(float f) {
  union {
    float f;
    uint32_t u;
  } c{f};
  return c.u;
}

// IEEE binary16, exact. Branch-free, and subnormals go through an integer convert: a denormal
// float operand would cost a microcode assist per block (Q6_K / IQ4_XS scales often are
// fp16 subnormals).
FT_QHD float half_f32(uint16_t h) {
#if defined(__F16C__) && !defined(__CUDACC__)
  return _cvtsh_ss(h);  // vcvtph2ps: exact, subnormals included
#endif
  const uint32_t e = h & 0x7c00u, mag = static_cast<uint32_t>(h & 0x7fff) << 13;
  float v = bits_f32(e == 0x7c00u ? (mag | 0x7f800000u) : mag + 0x38000000u);  // rebias 15 -> 127
  if (e == 0) v = static_cast<float>(h & 0x3ff) * 5.9604644775390625e-8f;   // m * 2^-24
  return bits_f32(f32_bits(v) | (static_cast<uint32_t>(h & 0x8000) << 16));
}

// OCP FP8 E4M3 (fn): bias 7, no infinities, S.1111.111 is NaN, max 448.
FT_QHD float e4m3_f32(uint8_t b) {
  const uint32_t a = b & 0x7fu;
  float v = bits_f32((a << 20) + (120u << 23));                    // normal: rebias 7 -> 127
  if (a < 8) v = static_cast<float>(a) * 0.001953125f;            // subnormal: m * 2^-9
  if (a == 0x7f) v = bits_f32(0x7fc00000u);                        // S.1111.111: NaN
  return bits_f32(f32_bits(v) | (static_cast<uint32_t>(b & 0x80) << 24));
}

// The 256 e4m3 values as a constexpr table (host decode loops: one load per block scale).
struct E4M3Table {
  float v[256];
};
constexpr E4M3Table make_e4m3_table() {
  E4M3Table t{};
  for (int b = 0; b < 256; ++b) {
    const int e = (b >> 3) & 15, m = b & 7;
    float v = e == 0 ? static_cast<float>(m) / 512.f : 1.f + static_cast<float>(m) / 8.f;
    for (int i = 7; i < e; ++i) v *= 2.f;
    for (int i = e; i < 7 && e != 0; ++i) v *= 0.5f;
    if (e == 15 && m == 7) v = __builtin_nanf("");
    t.v[b] = (b & 0x80) ? -v : v;
  }
  return t;
}
#if !defined(__CUDACC__)
inline constexpr E4M3Table k_e4m3 = make_e4m3_table();
#endif

// OCP E8M0 scale 2^(e-127) (255 is NaN).
FT_QHD float e8m0_f32(uint8_t e) {
  if (e == 255) return bits_f32(0x7fc00000u);
  return e == 0 ? bits_f32(0x00400000u) : bits_f32(static_cast<uint32_t>(e) << 23);
}

// Low nibbles of q[0..15] to lo[0..15], high nibbles to hi[0..15]. On x86 hosts one SSE2
// vector each (compilers do not vectorize the byte loop across block structs); elsewhere SWAR,
// 8 bytes per 64-bit word.
FT_QHD void split_nibbles16(const uint8_t* q, uint8_t* FT_RESTRICT lo, uint8_t* FT_RESTRICT hi) {
#if defined(__SSE2__) && !defined(__CUDACC__)
  const __m128i m = _mm_set1_epi8(0x0f), v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(lo), _mm_and_si128(v, m));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(hi), _mm_and_si128(_mm_srli_epi16(v, 4), m));
#else
  for (int h = 0; h < 2; ++h) {
    uint64_t w;
    memcpy(&w, q + 8 * h, 8);
    const uint64_t l = w & 0x0f0f0f0f0f0f0f0full, u = (w >> 4) & 0x0f0f0f0f0f0f0f0full;
    memcpy(lo + 8 * h, &l, 8);
    memcpy(hi + 8 * h, &u, 8);
  }
#endif
}

// Byte j of q[0..7] to out[2j] (low nibble) and out[2j + 1] (high nibble).
FT_QHD void interleave_nibbles8(const uint8_t* q, uint8_t* FT_RESTRICT out) {
#if defined(__SSE2__) && !defined(__CUDACC__)
  const __m128i m = _mm_set1_epi8(0x0f), v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out),
                   _mm_unpacklo_epi8(_mm_and_si128(v, m), _mm_and_si128(_mm_srli_epi16(v, 4), m)));
#else
  for (int h = 0; h < 2; ++h) {
    uint32_t v;
    memcpy(&v, q + 4 * h, 4);
    uint64_t t = (static_cast<uint64_t>(v) | (static_cast<uint64_t>(v) << 16)) & 0x0000ffff0000ffffull;
    t = (t | (t << 8)) & 0x00ff00ff00ff00ffull;  // byte i in 16-bit lane i
    const uint64_t r = (t & 0x000f000f000f000full) | (((t >> 4) & 0x000f000f000f000full) << 8);
    memcpy(out + 8 * h, &r, 8);
  }
#endif
}

// E2M1 codes doubled so they are integers: {0, .5, 1, 1.5, 2, 3, 4, 6} x 2, sign in bit 3.
constexpr int8_t k_e2m1_x2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
// IQ4_NL / IQ4_XS non-linear 4-bit codebook.
constexpr int8_t k_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                1,    13,   25,  38,  53,  69,  89,  113};

// A 16-entry byte codebook: a signed table shifted by `off` into unsigned codes.
struct Book {
  uint8_t v[16];
};
constexpr Book make_book(const int8_t (&t)[16], int off) {
  Book b{};
  for (int i = 0; i < 16; ++i) b.v[i] = static_cast<uint8_t>(t[i] + off);
  return b;
}
constexpr Book k_iq4nl_book = make_book(k_iq4nl, 128);
constexpr Book k_e2m1_book = make_book(k_e2m1_x2, 12);

// Q4_K / Q5_K: 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes.
FT_QHD void k4_scale_min(int j, const uint8_t* s, int* sc, int* mn) {
  if (j < 4) {
    *sc = s[j] & 63;
    *mn = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0xf) | ((s[j - 4] >> 6) << 4);
    *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Q4_K/Q5_K decode scales: each 32-element sub-block's scale and negated min, written for both
// of its 16-element groups (d[16], m[16]).
FT_QHD void k4_decode_scales(uint16_t d_half, uint16_t dmin_half, const uint8_t* scales,
                             float* FT_RESTRICT d, float* FT_RESTRICT m) {
  const float dd = half_f32(d_half), dm = half_f32(dmin_half);
  for (int s = 0; s < 8; ++s) {
    int sc, mn;
    k4_scale_min(s, scales, &sc, &mn);
    d[2 * s] = d[2 * s + 1] = dd * static_cast<float>(sc);
    m[2 * s] = m[2 * s + 1] = -dm * static_cast<float>(mn);
  }
}

// Q3_K: signed 6-bit scale of group j (0..15) from the 12 packed bytes (low 4 bits in bytes
// 0..7, high 2 bits in bytes 8..11).
FT_QHD int k3_scale(int j, const uint8_t* s) {
  const int lo = j < 8 ? (s[j] & 0xf) : (s[j - 8] >> 4);
  const int hi = (s[8 + (j & 3)] >> (2 * (j >> 2))) & 3;
  return (lo | (hi << 4)) - 32;
}

// ---- block structs ---------------------------------------------------------------------------
struct BlockQ4_0 { uint16_t d; uint8_t qs[16]; };
struct BlockQ4_1 { uint16_t d, m; uint8_t qs[16]; };
struct BlockQ8_0 { uint16_t d; int8_t qs[32]; };
struct BlockQ2_K { uint8_t scales[16]; uint8_t qs[64]; uint16_t d, dmin; };
struct BlockQ3_K { uint8_t hmask[32]; uint8_t qs[64]; uint8_t scales[12]; uint16_t d; };
struct BlockQ4_K { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[128]; };
struct BlockQ5_K { uint16_t d, dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; };
struct BlockQ6_K { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; uint16_t d; };
struct BlockIQ4_NL { uint16_t d; uint8_t qs[16]; };
struct BlockIQ4_XS { uint16_t d; uint16_t scales_h; uint8_t scales_l[4]; uint8_t qs[128]; };
struct BlockMXFP4 { uint8_t e; uint8_t qs[16]; };
struct BlockNVFP4 { uint8_t d; uint8_t qs[8]; };

static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110 && sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockIQ4_NL) == 18 && sizeof(BlockIQ4_XS) == 136);
static_assert(sizeof(BlockMXFP4) == 17 && sizeof(BlockNVFP4) == 9);

// ---- 32-element formats ------------------------------------------------------------------------
// Low nibble of qs[i] is element i, high nibble element i + 16.
struct Q4_0 {
  using Block = BlockQ4_0;
  static constexpr int kElems = 32, kMaxU = 15;
  static constexpr bool kHasBook = false;
  static FT_QHD void dequant(const Block& b, float* y) {
    const float d = half_f32(b.d);
    for (int i = 0; i < 16; ++i) {
      y[i] = static_cast<float>((b.qs[i] & 0xf) - 8) * d;
      y[i + 16] = static_cast<float>((b.qs[i] >> 4) - 8) * d;
    }
  }
  static FT_QHD void decode(const Block& b, uint8_t* FT_RESTRICT u, float* FT_RESTRICT d, float* FT_RESTRICT m) {
    split_nibbles16(b.qs, u, u + 16);
    d[0] = d[1] = half_f32(b.d);
    m[0] = m[1] = -8.f * d[0];
  }
};

struct Q4_1 {
  using Block = BlockQ4_1;
  static constexpr int kElems = 32, kMaxU = 15;
  static constexpr bool kHasBook = false;
  static FT_QHD void dequant(const Block& b, float* y) {
    const float d = half_f32(b.d), m = half_f32(b.m);
    for (int i = 0; i < 16; ++i) {
      y[i] = static_cast<float>(b.qs[i] & 0xf) * d + m;
      y[i + 16] = static_cast<float>(b.qs[i] >> 4) * d + m;
    }
  }
  static FT_QHD void decode(const Block& b, uint8_t* FT_RESTRICT u, float* FT_RESTRICT d, float* FT_RESTRICT m) {
    split_nibbles16(b.qs, u, u + 16);
    d[0] = d[1] = half_f32(b.d);
    m[0] = m[1] = half_f32(b.m);
  }
};

struct Q8_0 {
  using Block = BlockQ8_0;
  static constexpr int kElems = 32, kMaxU = 255;
  static constexpr bool kHasBook = false;
  static FT_QHD void dequant(const Block& b, float* y) {
    const float d = half_f32(b.d);
    for (int i = 0; i < 32; ++i) y[i] = static_cast<float>(b.qs[i]) * d;
  }
  static FT_QHD void decode(const Block& b, uint8_t* FT_RESTRICT u, float* FT_RESTRICT d, float* FT_RESTRICT m) {
    for (int i = 0; i < 32; ++i) u[i] = static_cast<uint8_t>(b.qs[i] + 128);
    d[0] = d[1] = half_f32(b.d);
    m[0] = m[1] = -128.f * d[0];
  }
};

// Nibble codes into a 16-entry int8 codebook with one scale per 32 (IQ4_NL) or per 16 (NVFP4,
// whose codebook is k_e2m1_x2 and scale is halved to undo the doubling).
struct IQ4_NL {
  using Block = BlockIQ4_NL;
  static constexpr int kElems = 32, kMaxU = 255;
  static constexpr bool kHasBook = true;
  static constexpr const Book& kBook = k_iq4nl_book;
  static FT_QHD void dequant(const Block& b, float* y) {
    const float d = half_f32(b.d);
    for (int i = 0; i < 16; ++i) {
      y[i] = d * static_cast<float>(k_iq4nl[b.qs[i] & 0xf]);
      y[i + 16] = d * static_cast<float>(k_iq4nl[b.qs[i] >> 4]);
    }
  }
  static FT_QHD void decode(const Block& b, uint8_t* FT_RESTRICT u, float* FT_RESTRICT d, float* FT_RESTRICT m) {
    split_nibbles16(b.qs, u, u + 16);
    d[0] = d[1] = half_f32(b.d);
    m[0] = m[1] = -128.f * d[0];
  }
};

// OCP MXFP4 in ggml's block: value = e2m1 * 2^(e-127) = k_e2m1_x2 * 2^(e-128).
struct MXFP4 {
  using Block = BlockMXFP4;
  static constexpr int kElems = 32, kMaxU = 24;
  static constexpr bool kHasBook = true;
  static constexpr const Book& kBook = k_e2m1_book;
  static FT_QHD float scale(const Block& b) { return 0.5f * e8m0_f32(b.e); }
  static FT_QHD void dequant(const Block& b, float* y) {
    const float d = scale(b);
    for (int i = 0; i < 16; ++i) {
      y[i] = static_cast<float>(k_e2m1_x2[b.qs[i] & 0xf]) * d;
      y[i + 16] = static_cast<float>(k_e2m1_x2[b.qs[i] >> 4]) * d;
    }
  }
  static FT_QHD void decode(const Block& b, uint8_t* FT_RESTRICT u, float* FT_RESTRICT d, float* FT_RESTRICT m) {
    split_nibbles16(b.qs, u, u + 16);
    d[0] = d[1] = scale(b);
    m[0] = m[1] = -12.f * d[0];
  }
};

// ModelOpt NVFP4, 16 elements: element 2j in the low nibble of qs[j], 2j+1 in the high one;
// value = e2m1 * e4m3(d), times the tensor's global scale (applied by the caller).
struct NVFP4 {
  using Block = BlockNVFP4;
  static constexpr int kElems = 16, kMaxU = 24;
  static constexpr bool kHasBook = true;
  static constexpr const Book& kBook = k_e2m1_book;
  static FT_QHD void dequant(const Block& b, float* y) {
    const float d = 0.5f * e4m3_f32(b.d);
    for (int j = 0; j < 8; ++j) {
      y[2 * j] = static_cast<float>(k_e2m1_x2[b.qs[j] & 0xf]) * d;
      y[2 * j + 1] = static_cast<float>(k_e2m1_x2[b.qs[j] >> 4]) * d;
    }
  }
  static FT_QHD void decode(const Block& b, uint8_t* FT_RESTRICT u, float* FT_RESTRICT d, float* FT_RESTRICT m) {
    interleave_nibbles8(b.qs, u);
#if defined(__CUDACC__)
    d[0] = 0.5f * e4m3_f32(b.d);
#else
    d[0] = 0.5f * k_e4m3.v[b.d];
#endif
    m[0] = -12.f * d[0];
  }
};

// ---- 256-element K-quants ----------------------------------------------------------------------
// Q2_K: 16 groups of 16; scales[g] = 4-bit scale | 4-bit min << 4. Element 128n + 32j + l
// (n < 2, j < 4, l < 32) is bits 2j..2j+1 of qs[32n + l], group 8n + 2j + l/16.
// w = d * sc * q - dmin * min.
struct Q2_K {
  using Block = BlockQ2_K;
  static constexpr int kElems = 256, kMaxU = 3;
  static constexpr bool kHasBook = false;
  static FT_QHD int q(const Block& b, int e) {
    return (b.qs[32 * (e >> 7) + (e & 31)] >> (2 * ((e >> 5) & 3))) & 3;
  }
  static FT_QHD void dequant(const Block& b, float* y) {
    const float d = half_f32(b.d), dmin = half_f32(b.dmin);
    for (int e = 0; e < 256; ++e) {
      const int sc = b.scales[e >> 4];
      y[e] = d * static_cast<float>(sc & 0xf) * static_cast<float>(q(b, e)) -
             dmin * static_cast<float>(sc >> 4);
    }
  }
  static FT_QHD void decode(const Block& b, uint8_t* FT_RESTRICT u, float* FT_RESTRICT d, float* FT_RESTRICT m) {
    for (int n = 0; n < 2; ++n)
      for (int j = 0; j < 4; ++j)
        for (int l = 0; l < 32; ++l) u[128 * n + 32 * j + l] = (b.qs[32 * n + l] >> (2 * j)) & 3;
    const float dd = half_f32(b.d), dm = half_f32(b.dmin);
    for (int g = 0; g < 16; ++g) {
      d[g] = dd * static_cast<float>(b.scales[g] & 0xf);
      m[g] = -dm * static_cast<float>(b.scales[g] >> 4);
    }
  }
};

// Q3_K: like Q2_K's 2-bit layout plus a high bit: element 128n + 32j + l has high bit
// hmask[l] bit (4n + j); q = low | high << 2 in 0..7, value (q - 4) * d * k3_scale(group).
struct Q3_K {
  using Block = BlockQ3_K;
  static constexpr int kElems = 256, kMaxU = 7;
  static constexpr bool kHasBook = false;
  static FT_QHD int q(const Block& b, int e) {
    const int n = e >> 7, j = (e >> 5) & 3, l = e & 31;
    const int lo = (b.qs[32 * n + l] >> (2 * j)) & 3;
    const int hi = (b.hmask[l] >> (4 * n + j)) & 1;
    return lo | (hi << 2);
  }
  static FT_QHD void dequant(const Block& b, float* y) {
    const float d = half_f32(b.d);
    for (int e = 0; e < 256; ++e)
      y[e] = d * static_cast<float>(k3_scale(e >> 4, b.scales)) * static_cast<float>(q(b, e) - 4);
  }
  static FT_QHD void decode(const Block& b, uint8_t* FT_RESTRICT u, float* FT_RESTRICT d, float* FT_RESTRICT m) {
    for (int n = 0; n < 2; ++n)
      for (int j = 0; j < 4; ++j)
        for (int l = 0; l < 32; ++l)
          u[128 * n + 32 * j + l] = static_cast<uint8_t>(((b.qs[32 * n + l] >> (2 * j)) & 3) |
                                                         (((b.hmask[l] >> (4 * n + j)) & 1) << 2));
    const float dd = half_f32(b.d);
    for (int g = 0; g < 16; ++g) {
      d[g] = dd * static_cast<float>(k3_scale(g, b.scales));
      m[g] = -4.f * d[g];
    }
  }
};

// Q4_K: 8 sub-blocks of 32 with 6-bit scales/mins (k4_scale_min). Chunk c < 4 of 64 elements:
// element 64c + l is the low nibble of qs[32c + l], 64c + 32 + l the high nibble.
// w = d * sc * q - dmin * min.
struct Q4_K {
  using Block = BlockQ4_K;
  static constexpr int kElems = 256, kMaxU = 15;
  static constexpr bool kHasBook = false;
  static FT_QHD void dequant(const Block& b, float* y) {
    const float d = half_f32(b.d), dmin = half_f32(b.dmin);
    for (int c = 0; c < 4; ++c) {
      int sc0, m0, sc1, m1;
      k4_scale_min(2 * c, b.scales, &sc0, &m0);
      k4_scale_min(2 * c + 1, b.scales, &sc1, &m1);
      const float d0 = d * static_cast<float>(sc0), mm0 = dmin * static_cast<float>(m0);
      const float d1 = d * static_cast<float>(sc1), mm1 = dmin * static_cast<float>(m1);
      for (int l = 0; l < 32; ++l) {
        y[64 * c + l] = d0 * static_cast<float>(b.qs[32 * c + l] & 0xf) - mm0;
        y[64 * c + 32 + l] = d1 * static_cast<float>(b.qs[32 * c + l] >> 4) - mm1;
      }
    }
  }
  static FT_QHD void decode(const Block& b, uint8_t* FT_RESTRICT u, float* FT_RESTRICT d, float* FT_RESTRICT m) {
    for (int c = 0; c < 4; ++c) {
      split_nibbles16(b.qs + 32 * c, u + 64 * c, u + 64 * c + 32);
      split_nibbles16(b.qs + 32 * c + 16, u + 64 * c + 16, u + 64 * c + 48);
    }
    k4_decode_scales(b.d, b.dmin, b.scales, d, m);
  }
};

// Q5_K: Q4_K plus a fifth bit: element 64c + l has qh[l] bit 2c, 64c + 32 + l bit 2c + 1.
struct Q5_K {
  using Block = BlockQ5_K;
  static constexpr int kElems = 256, kMaxU = 31;
  static constexpr bool kHasBook = false;
  static FT_QHD void dequant(const Block& b, float* y) {
    const float d = half_f32(b.d), dmin = half_f32(b.dmin);
    for (int c = 0; c < 4; ++c) {
      int sc0, m0, sc1, m1;
      k4_scale_min(2 * c, b.scales, &sc0, &m0);
      k4_scale_min(2 * c + 1, b.scales, &sc1, &m1);
      const float d0 = d * static_cast<float>(sc0), mm0 = dmin * static_cast<float>(m0);
      const float d1 = d * static_cast<float>(sc1), mm1 = dmin * static_cast<float>(m1);
      for (int l = 0; l < 32; ++l) {
        const int lo = (b.qs[32 * c + l] & 0xf) | (((b.qh[l] >> (2 * c)) & 1) << 4);
        const int hi = (b.qs[32 * c + l] >> 4) | (((b.qh[l] >> (2 * c + 1)) & 1) << 4);
        y[64 * c + l] = d0 * static_cast<float>(lo) - mm0;
        y[64 * c + 32 + l] = d1 * static_cast<float>(hi) - mm1;
      }
    }
  }
  static FT_QHD void decode(const Block& b, uint8_t* FT_RESTRICT u, float* FT_RESTRICT d, float* FT_RESTRICT m) {
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l) {
        u[64 * c + l] = static_cast<uint8_t>((b.qs[32 * c + l] & 0xf) |
                                             (((b.qh[l] >> (2 * c)) & 1) << 4));
        u[64 * c + 32 + l] = static_cast<uint8_t>((b.qs[32 * c + l] >> 4) |
                                                  (((b.qh[l] >> (2 * c + 1)) & 1) << 4));
      }
    k4_decode_scales(b.d, b.dmin, b.scales, d, m);
  }
};

// Q6_K: 16 groups of 16 with int8 scales. Half n < 2, l < 32, element 128n + 32i + l for
// i < 4: low 4 bits from ql[64n + l + 32 (i & 1)] (low nibble for i < 2, high for i >= 2),
// high 2 bits from qh[32n + l] bits 2i..2i+1. Value (q - 32) * d * scales[group].
struct Q6_K {
  using Block = BlockQ6_K;
  static constexpr int kElems = 256, kMaxU = 63;
  static constexpr bool kHasBook = false;
  static FT_QHD int q(const Block& b, int e) {
    const int n = e >> 7, i = (e >> 5) & 3, l = e & 31;
    const int lo = (b.ql[64 * n + l + 32 * (i & 1)] >> (4 * (i >> 1))) & 0xf;
    return lo | (((b.qh[32 * n + l] >> (2 * i)) & 3) << 4);
  }
  static FT_QHD void dequant(const Block& b, float* y) {
    const float d = half_f32(b.d);
    for (int e = 0; e < 256; ++e)
      y[e] = d * static_cast<float>(b.scales[e >> 4]) * static_cast<float>(q(b, e) - 32);
  }
  static FT_QHD void decode(const Block& b, uint8_t* FT_RESTRICT u, float* FT_RESTRICT d, float* FT_RESTRICT m) {
    for (int n = 0; n < 2; ++n)
      for (int i = 0; i < 4; ++i)
        for (int l = 0; l < 32; ++l)
          u[128 * n + 32 * i + l] = static_cast<uint8_t>(
              ((b.ql[64 * n + l + 32 * (i & 1)] >> (4 * (i >> 1))) & 0xf) |
              (((b.qh[32 * n + l] >> (2 * i)) & 3) << 4));
    const float dd = half_f32(b.d);
    for (int g = 0; g < 16; ++g) {
      d[g] = dd * static_cast<float>(b.scales[g]);
      m[g] = -32.f * d[g];
    }
  }
};

// IQ4_XS: 8 sub-blocks of 32, IQ4_NL codes, 6-bit scales (4 low bits in scales_l nibbles,
// 2 high bits in scales_h) minus 32; sub-block s uses qs[16s..16s+15] like an IQ4_NL block.
struct IQ4_XS {
  using Block = BlockIQ4_XS;
  static constexpr int kElems = 256, kMaxU = 255;
  static constexpr bool kHasBook = true;
  static constexpr const Book& kBook = k_iq4nl_book;
  static FT_QHD int scale(const Block& b, int s) {
    return (((b.scales_l[s >> 1] >> (4 * (s & 1))) & 0xf) | (((b.scales_h >> (2 * s)) & 3) << 4)) -
           32;
  }
  static FT_QHD void dequant(const Block& b, float* y) {
    const float d = half_f32(b.d);
    for (int s = 0; s < 8; ++s) {
      const float dl = d * static_cast<float>(scale(b, s));
      for (int i = 0; i < 16; ++i) {
        y[32 * s + i] = dl * static_cast<float>(k_iq4nl[b.qs[16 * s + i] & 0xf]);
        y[32 * s + i + 16] = dl * static_cast<float>(k_iq4nl[b.qs[16 * s + i] >> 4]);
      }
    }
  }
  static FT_QHD void decode(const Block& b, uint8_t* FT_RESTRICT u, float* FT_RESTRICT d, float* FT_RESTRICT m) {
    for (int s = 0; s < 8; ++s) split_nibbles16(b.qs + 16 * s, u + 32 * s, u + 32 * s + 16);
    const float dd = half_f32(b.d);
    for (int s = 0; s < 8; ++s) {
      d[2 * s] = d[2 * s + 1] = dd * static_cast<float>(scale(b, s));
      m[2 * s] = m[2 * s + 1] = -128.f * d[2 * s];
    }
  }
};

// Code u of decode() output v: through the codebook where the format has one.
template <class F>
FT_QHD uint8_t code(uint8_t v) {
  if constexpr (F::kHasBook)
    return F::kBook.v[v];
  else
    return v;
}

// Calls fn(F{}) with the traits type of a block-format QuantType id (ggml/our ids, see quant.h);
// returns false for types without a block traits struct (F32, F16, BF16, FP8_E4M3_B128).
template <class Fn>
bool visit_format(uint32_t id, Fn&& fn) {
  switch (id) {
    case 2: fn(Q4_0{}); return true;
    case 3: fn(Q4_1{}); return true;
    case 8: fn(Q8_0{}); return true;
    case 10: fn(Q2_K{}); return true;
    case 11: fn(Q3_K{}); return true;
    case 12: fn(Q4_K{}); return true;
    case 13: fn(Q5_K{}); return true;
    case 14: fn(Q6_K{}); return true;
    case 20: fn(IQ4_NL{}); return true;
    case 23: fn(IQ4_XS{}); return true;
    case 39: fn(MXFP4{}); return true;
    case 1002: fn(NVFP4{}); return true;
    default: return false;
  }
}

}  // namespace ft::quant
