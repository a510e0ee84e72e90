// FP8 e4m3 and NVFP4 one-token GEMVs on AVX512-VBMI + AVX512-BF16 (see quant_gemv512.h).
// The target pragma lets any build compile this file; it runs only where vbmi_bf16_ok().
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,avx512bf16,fma,f16c")
#include "backend/cpu/quant_gemv512.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/quant_simd.h"
#include "base/env.h"
#include "base/error.h"
#include "quant/formats.h"

namespace ft::cpu {

bool vbmi_bf16_ok() {
  static const bool ok = [] {
    if (!env_on("FT_QUANT_VBMI")) return false;
    return __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512bf16") &&
           __builtin_cpu_supports("avx512vnni");
  }();
  return ok;
}

namespace {

constexpr int k_fp8_rows = 2;  // FP8 rows side by side (4 measured the same here)

// ---- FP8 e4m3 ----------------------------------------------------------------------------------
// bf16 of every e4m3 magnitude (exact: 3 mantissa bits, exponents 2^-9 .. 2^8 are bf16 normals;
// S.1111.111 -> NaN), as high and low bytes: the tables of two vpermi2b lookups.
struct E4m3Bf16 {
  alignas(64) uint8_t hi[128];
  alignas(64) uint8_t lo[128];
};
const E4m3Bf16& e4m3_bf16() {
  static const E4m3Bf16 t = [] {
    E4m3Bf16 b{};
    for (int i = 0; i < 128; ++i) {
      const float f = quant::e4m3_f32(static_cast<uint8_t>(i));
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      FT_CHECK(std::isnan(f) || (bits & 0xffff) == 0, "e4m3 {} is not exact in bf16", i);
      const uint16_t h = std::isnan(f) ? 0x7fc0 : static_cast<uint16_t>(bits >> 16);
      b.hi[i] = static_cast<uint8_t>(h >> 8);
      b.lo[i] = static_cast<uint8_t>(h & 0xff);
    }
    return b;
  }();
  return t;
}

// Word order of a 64-byte chunk after vpunpck{l,h}bw: w0 holds elements 16i + j (j < 8), w1
// elements 16i + 8 + j, i < 4.
inline __m512i chunk_order(int half) {
  alignas(64) uint16_t idx[32];
  for (int i = 0; i < 32; ++i) idx[i] = static_cast<uint16_t>((i / 8) * 16 + 8 * half + i % 8);
  return _mm512_load_si512(idx);
}

inline __m512 bf16_f32(__m256bh h) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(reinterpret_cast<__m256i&>(h)), 16));
}

inline __m512i join(__m256bh a, __m256bh b) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(reinterpret_cast<__m256i&>(a)),
                            reinterpret_cast<__m256i&>(b), 1);
}

// x[c] * s[c / 128] for the whole 64-column chunks of a row band, as bf16 hi + lo parts (hi + lo
// carries ~16 mantissa bits), per chunk [hi w0-order, hi w1-order, lo w0-order, lo w1-order].
void fp8_acts(const float* x, const float* s, int64_t chunks, uint16_t* out) {
  const __m512i o0 = chunk_order(0), o1 = chunk_order(1);
  for (int64_t c = 0; c < chunks; ++c) {
    const __m512 sc = _mm512_set1_ps(s[c / 2]);
    __m512 v[4];
    __m256bh h[4];
    __m512 lo[4];
    for (int i = 0; i < 4; ++i) {
      v[i] = _mm512_mul_ps(_mm512_loadu_ps(x + 64 * c + 16 * i), sc);
      h[i] = _mm512_cvtneps_pbh(v[i]);
      lo[i] = _mm512_sub_ps(v[i], bf16_f32(h[i]));
    }
    const __m512i ha = join(h[0], h[1]), hb = join(h[2], h[3]);
    const __m512bh la = _mm512_cvtne2ps_pbh(lo[1], lo[0]), lb = _mm512_cvtne2ps_pbh(lo[3], lo[2]);
    const __m512i lai = reinterpret_cast<const __m512i&>(la), lbi = reinterpret_cast<const __m512i&>(lb);
    uint16_t* o = out + 128 * c;
    _mm512_storeu_si512(o, _mm512_permutex2var_epi16(ha, o0, hb));
    _mm512_storeu_si512(o + 32, _mm512_permutex2var_epi16(ha, o1, hb));
    _mm512_storeu_si512(o + 64, _mm512_permutex2var_epi16(lai, o0, lbi));
    _mm512_storeu_si512(o + 96, _mm512_permutex2var_epi16(lai, o1, lbi));
  }
}

// NR rows side by side (NR memory streams) over the whole chunks; out[r] = their dots.
template <int NR>
inline void fp8_rows(const uint8_t* const* w, int64_t chunks, const uint16_t* xa, float* out,
                     const uint8_t* pf_end) {
  const E4m3Bf16& t = e4m3_bf16();
  const __m512i th0 = _mm512_load_si512(t.hi), th1 = _mm512_load_si512(t.hi + 64);
  const __m512i tl0 = _mm512_load_si512(t.lo), tl1 = _mm512_load_si512(t.lo + 64);
  const __m512i sign = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 acc[NR][4];
  for (int r = 0; r < NR; ++r)
    for (int i = 0; i < 4; ++i) acc[r][i] = _mm512_setzero_ps();
  for (int64_t c = 0; c < chunks; ++c) {
    const uint16_t* a = xa + 128 * c;
    const __m512bh xh0 = (__m512bh)_mm512_loadu_si512(a), xh1 = (__m512bh)_mm512_loadu_si512(a + 32);
    const __m512bh xl0 = (__m512bh)_mm512_loadu_si512(a + 64), xl1 = (__m512bh)_mm512_loadu_si512(a + 96);
    for (int r = 0; r < NR; ++r) {
      const uint8_t* p = w[r] + 64 * c;
      prefetch_ahead(p, 1, pf_end);
      const __m512i b = _mm512_loadu_si512(p);
      // high byte: the magnitude's (sign bit clear) with the code's sign bit or'ed in
      const __m512i hi = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(th0, b, th1), b, sign, 0xf8);
      const __m512i lo = _mm512_permutex2var_epi8(tl0, b, tl1);
      const __m512bh w0 = (__m512bh)_mm512_unpacklo_epi8(lo, hi), w1 = (__m512bh)_mm512_unpackhi_epi8(lo, hi);
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], w0, xh0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], w1, xh1);
      acc[r][2] = _mm512_dpbf16_ps(acc[r][2], w0, xl0);
      acc[r][3] = _mm512_dpbf16_ps(acc[r][3], w1, xl1);
    }
  }
  for (int r = 0; r < NR; ++r)
    out[r] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[r][0], acc[r][1]),
                                                _mm512_add_ps(acc[r][2], acc[r][3])));
}

// ---- NVFP4 -------------------------------------------------------------------------------------
// A super-block is 16 blocks (144 bytes: block b's e4m3 scale at 9b, its 8 code bytes after it).
// Quarter j (blocks 4j .. 4j + 3) is gathered from one or two 64-byte loads so that each block's
// 8 code bytes fill two qwords (the same bytes twice); vpmultishiftqb then picks nibbles 0-7 in
// the first qword and 8-15 in the second: 16 bytes per block in element order.
struct NvTables {
  alignas(64) uint8_t quarter[4][64];  // byte indices into the quarter's load(s), see below
  alignas(64) uint8_t scales[64];      // block b's scale byte: A[9b] (b < 8), D[9b - 72] (| 64)
  alignas(64) uint8_t shifts[64];      // vpmultishiftqb bit offsets: 4i in even qwords, 32 + 4i odd
  alignas(64) uint8_t book[64];        // codebook entry i & 15 (vpermb reads 6 index bits)
};
// Loads per super-block p: A = p[0, 64), B = p[64, 128), D = p[72, 136), C = p[80, 144).
// Quarter 0 reads A (vpermb), 1 reads A|B (vpermi2b), 2 reads D, 3 reads C.
const NvTables& nv_tables() {
  static const NvTables t = [] {
    NvTables n{};
    constexpr int base[4] = {0, 0, 72, 80};
    for (int j = 0; j < 4; ++j)
      for (int o = 0; o < 64; ++o) {
        const int blk = 4 * j + o / 16, byte = 9 * blk + 1 + o % 8;
        n.quarter[j][o] = static_cast<uint8_t>(byte - base[j]);  // quarter 1: >= 64 selects B
      }
    for (int b = 0; b < 16; ++b) n.scales[b] = static_cast<uint8_t>(b < 8 ? 9 * b : 64 + 9 * b - 72);
    for (int o = 0; o < 64; ++o) {
      n.shifts[o] = static_cast<uint8_t>(4 * (o % 8) + ((o / 8) % 2 ? 32 : 0));
      n.book[o] = quant::k_e2m1_book.v[o % 16];
    }
    return n;
  }();
  return t;
}

// e4m3 / 256 of 16 scale bytes, exactly (bits placed into fp16's fields; S.1111.111 -> NaN).
inline __m512 e4m3_over_256(__m128i bytes) {
  const __m256i b = _mm256_cvtepu8_epi16(bytes);
  const __m256i mag = _mm256_and_si256(b, _mm256_set1_epi16(0x7f));
  __m256i h = _mm256_ternarylogic_epi32(_mm256_slli_epi16(b, 8), _mm256_slli_epi16(mag, 7),
                                        _mm256_set1_epi16(static_cast<short>(0x8000)), 0xe4);
  h = _mm256_mask_mov_epi16(h, _mm256_cmpeq_epi16_mask(mag, _mm256_set1_epi16(0x7f)),
                            _mm256_set1_epi16(0x7e00));
  return _mm512_cvtph_ps(h);
}

template <int NR>
inline void nvfp4_rows(const uint8_t* const* w, int64_t nsb, const QActs& x, float* out,
                       const uint8_t* pf_end) {
  const NvTables& t = nv_tables();
  const __m512i q0 = _mm512_load_si512(t.quarter[0]), q1 = _mm512_load_si512(t.quarter[1]);
  const __m512i q2 = _mm512_load_si512(t.quarter[2]), q3 = _mm512_load_si512(t.quarter[3]);
  const __m512i isc = _mm512_load_si512(t.scales), sh = _mm512_load_si512(t.shifts);
  const __m512i book = _mm512_load_si512(t.book);
  // lane l of quarter j's dot belongs to block 4j + l / 4
  const __m512i lanes = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
  const __m512i four = _mm512_set1_epi32(4);
  __m512 acc[NR][2], accm[NR];
  for (int r = 0; r < NR; ++r) acc[r][0] = acc[r][1] = accm[r] = _mm512_setzero_ps();
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const int8_t* q = x.q + 256 * sb;
    const __m512 dx = _mm512_loadu_ps(x.d + 16 * sb), sx = _mm512_loadu_ps(x.s + 16 * sb);
    for (int r = 0; r < NR; ++r) {
      const uint8_t* p = w[r] + 144 * sb;
      prefetch_ahead(p, 144, pf_end);
      const __m512i A = _mm512_loadu_si512(p), B = _mm512_loadu_si512(p + 64);
      const __m512i D = _mm512_loadu_si512(p + 72), C = _mm512_loadu_si512(p + 80);
      const __m512 hw = e4m3_over_256(_mm512_castsi512_si128(_mm512_permutex2var_epi8(A, isc, D)));
      const __m512 s = _mm512_mul_ps(hw, dx);
      accm[r] = _mm512_fmadd_ps(hw, sx, accm[r]);
      const __m512i g[4] = {_mm512_permutexvar_epi8(q0, A), _mm512_permutex2var_epi8(A, q1, B),
                            _mm512_permutexvar_epi8(q2, D), _mm512_permutexvar_epi8(q3, C)};
      __m512i idx = lanes;
      for (int j = 0; j < 4; ++j) {
        const __m512i u = _mm512_permutexvar_epi8(_mm512_multishift_epi64_epi8(sh, g[j]), book);
        const __m512i d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, _mm512_loadu_si512(q + 64 * j));
        acc[r][j % 2] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_permutexvar_ps(idx, s), acc[r][j % 2]);
        idx = _mm512_add_epi32(idx, four);
      }
    }
  }
  // d = 0.5 e4m3 = 128 * hw; offset m = -12 d
  for (int r = 0; r < NR; ++r)
    out[r] = 128.f * (_mm512_reduce_add_ps(_mm512_add_ps(acc[r][0], acc[r][1])) -
                      12.f * _mm512_reduce_add_ps(accm[r]));
}

// ---- MXFP4 -------------------------------------------------------------------------------------
// A super-block is 8 blocks of 17 bytes (e8m0 scale, then 16 code bytes: element i in the low
// nibble of byte i, element 16 + i in the high one). Half h (blocks 4h .. 4h + 3) is gathered by
// one vpermi2b into a block per 128-bit lane; its low nibbles (groups 2b) and high nibbles
// (groups 2b + 1) are two vpdpbusd pieces against activations permuted to match once per call.
struct MxTables {
  alignas(64) uint8_t half[2][64];  // code bytes: half 0 from p[0, 128), half 1 from p[8, 136)
  alignas(64) uint8_t scales[64];   // e8m0 of group g's block (g / 2), from p[0, 128)
  alignas(64) uint8_t book[64];     // codebook entry i & 15
  alignas(64) uint8_t acts[2][64];  // activation bytes of the lo / hi piece, from q[0, 128)
};
const MxTables& mx_tables() {
  static const MxTables t = [] {
    MxTables m{};
    for (int o = 0; o < 64; ++o) {
      for (int h = 0; h < 2; ++h)
        m.half[h][o] = static_cast<uint8_t>(17 * (4 * h + o / 16) + 1 + o % 16 - 8 * h);
      m.book[o] = quant::k_e2m1_book.v[o % 16];
      for (int hi = 0; hi < 2; ++hi) m.acts[hi][o] = static_cast<uint8_t>(32 * (o / 16) + 16 * hi + o % 16);
    }
    for (int g = 0; g < 16; ++g) m.scales[g] = static_cast<uint8_t>(17 * (g / 2));
    return m;
  }();
  return t;
}

// q [k] permuted per 128 elements into [lo piece, hi piece] (block b's elements 0-15, then 16-31,
// per 16-byte lane); whole 128-element halves only.
void mx_acts(const int8_t* q, int64_t halves, int8_t* out) {
  const MxTables& t = mx_tables();
  const __m512i lo = _mm512_load_si512(t.acts[0]), hi = _mm512_load_si512(t.acts[1]);
  for (int64_t h = 0; h < halves; ++h) {
    const __m512i a = _mm512_loadu_si512(q + 128 * h), b = _mm512_loadu_si512(q + 128 * h + 64);
    _mm512_storeu_si512(out + 128 * h, _mm512_permutex2var_epi8(a, lo, b));
    _mm512_storeu_si512(out + 128 * h + 64, _mm512_permutex2var_epi8(a, hi, b));
  }
}

template <int NR>
inline void mxfp4_rows(const uint8_t* const* w, int64_t nsb, const QActs& x, const int8_t* qp,
                       float* out, const uint8_t* pf_end) {
  const MxTables& t = mx_tables();
  const __m512i i0 = _mm512_load_si512(t.half[0]), i1 = _mm512_load_si512(t.half[1]);
  const __m512i isc = _mm512_load_si512(t.scales), book = _mm512_load_si512(t.book);
  // lane l of a piece of half h: block 4h + l / 4, group 2 (4h + l / 4) (+ 1 for the hi piece)
  const __m512i blk = _mm512_set_epi32(6, 6, 6, 6, 4, 4, 4, 4, 2, 2, 2, 2, 0, 0, 0, 0);
  __m512i lanes[4];
  for (int h = 0; h < 2; ++h)
    for (int hi = 0; hi < 2; ++hi) lanes[2 * h + hi] = _mm512_add_epi32(blk, _mm512_set1_epi32(8 * h + hi));
  __m512 acc[NR][2], accm[NR];
  for (int r = 0; r < NR; ++r) acc[r][0] = acc[r][1] = accm[r] = _mm512_setzero_ps();
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const int8_t* q = qp + 256 * sb;
    const __m512 dx = _mm512_loadu_ps(x.d + 16 * sb), sx = _mm512_loadu_ps(x.s + 16 * sb);
    for (int r = 0; r < NR; ++r) {
      const uint8_t* p = w[r] + 136 * sb;
      prefetch_ahead(p, 136, pf_end);
      const __m512i A = _mm512_loadu_si512(p), B = _mm512_loadu_si512(p + 64);
      const __m512i C = _mm512_loadu_si512(p + 8), D = _mm512_loadu_si512(p + 72);
      // e8m0: 2^(e - 127) = e << 23 as float bits; e = 0 is 2^-127, 255 NaN; d = that / 2
      const __m512i e = _mm512_cvtepu8_epi32(_mm512_castsi512_si128(_mm512_permutex2var_epi8(A, isc, B)));
      const __mmask16 odd = _mm512_cmpeq_epi32_mask(e, _mm512_setzero_si512()) |
                            _mm512_cmpeq_epi32_mask(e, _mm512_set1_epi32(255));
      const __m512i eb = _mm512_slli_epi32(e, 23);
      const __m512 ws = _mm512_castsi512_ps(_mm512_mask_or_epi32(eb, odd, eb, _mm512_set1_epi32(0x00400000)));
      const __m512 s = _mm512_mul_ps(ws, dx);
      accm[r] = _mm512_fmadd_ps(ws, sx, accm[r]);
      const __m512i c[2] = {_mm512_permutex2var_epi8(A, i0, B), _mm512_permutex2var_epi8(C, i1, D)};
      for (int h = 0; h < 2; ++h) {
        const __m512i ulo = _mm512_permutexvar_epi8(c[h], book);
        const __m512i uhi = _mm512_permutexvar_epi8(_mm512_srli_epi16(c[h], 4), book);
        const __m512i dlo = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ulo, _mm512_loadu_si512(q + 128 * h));
        const __m512i dhi = _mm512_dpbusd_epi32(_mm512_setzero_si512(), uhi, _mm512_loadu_si512(q + 128 * h + 64));
        acc[r][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dlo), _mm512_permutexvar_ps(lanes[2 * h], s), acc[r][0]);
        acc[r][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dhi), _mm512_permutexvar_ps(lanes[2 * h + 1], s), acc[r][1]);
      }
    }
  }
  // d = 2^(e-127) / 2 (codes are doubled e2m1), m = -12 d
  for (int r = 0; r < NR; ++r)
    out[r] = 0.5f * (_mm512_reduce_add_ps(_mm512_add_ps(acc[r][0], acc[r][1])) -
                     12.f * _mm512_reduce_add_ps(accm[r]));
}

}  // namespace

void gemv_fp8_vbmi(const float* x, int64_t k, const uint8_t* w, const float* scale_inv,
                   int64_t r0, int64_t r1, float* y) {
  const int64_t chunks = k / 64, sc = (k + 127) / 128;
  thread_local std::vector<uint16_t> buf;
  if (buf.size() < static_cast<size_t>(128 * chunks)) buf.resize(128 * chunks);
  const float* lut = e4m3_table();
  auto tail = [&](const uint8_t* row, const float* s) {
    float acc = 0.f;
    for (int64_t c = 64 * chunks; c < k; ++c) acc += lut[row[c]] * x[c] * s[c / 128];
    return acc;
  };
  for (int64_t b0 = r0; b0 < r1;) {  // one 128-row band of scales at a time
    const int64_t b1 = std::min(r1, (b0 / 128 + 1) * 128);
    const float* s = scale_inv + (b0 / 128) * sc;
    fp8_acts(x, s, chunks, buf.data());
    const int64_t part = (b1 - b0) / k_fp8_rows;
    for (int64_t i = 0; i < part; ++i) {
      const uint8_t* rows[k_fp8_rows];
      for (int j = 0; j < k_fp8_rows; ++j) rows[j] = w + (b0 + j * part + i) * k;
      float out[k_fp8_rows];
      fp8_rows<k_fp8_rows>(rows, chunks, buf.data(), out, w + r1 * k);
      for (int j = 0; j < k_fp8_rows; ++j) y[b0 + j * part + i] = out[j] + tail(rows[j], s);
    }
    for (int64_t r = b0 + k_fp8_rows * part; r < b1; ++r) {
      const uint8_t* row = w + r * k;
      float out;
      fp8_rows<1>(&row, chunks, buf.data(), &out, w + r1 * k);
      y[r] = out + tail(row, s);
    }
    b0 = b1;
  }
}

void gemv_nvfp4_vbmi(const QActs& x, int64_t k, const uint8_t* w, size_t row_bytes, int64_t r0,
                     int64_t r1, float post, float* y) {
  const int64_t nsb = k / 256;
  const bool has_tail = k % 256 != 0;
  row_streams<4>(
      w, row_bytes, r0, r1,
      [&](auto nr, const uint8_t* const* rows, const uint8_t* end, float* out) {
        nvfp4_rows<decltype(nr)::value>(rows, nsb, x, out, end);
      },
      [&](int64_t r, const uint8_t* row, float dot) {
        y[r] = post * (dot + (has_tail ? block_tail<quant::NVFP4>(row, k, x) : 0.f));
      });
}

}  // namespace ft::cpu

namespace ft::cpu {

void gemv_mxfp4_vbmi(const QActs& x, int64_t k, const uint8_t* w, size_t row_bytes, int64_t r0,
                     int64_t r1, float post, float* y) {
  const int64_t nsb = k / 256;
  thread_local std::vector<int8_t> qp;
  if (qp.size() < static_cast<size_t>(256 * nsb)) qp.resize(256 * nsb);
  mx_acts(x.q, 2 * nsb, qp.data());
  const bool has_tail = k % 256 != 0;
  row_streams<4>(
      w, row_bytes, r0, r1,
      [&](auto nr, const uint8_t* const* rows, const uint8_t* end, float* out) {
        mxfp4_rows<decltype(nr)::value>(rows, nsb, x, qp.data(), out, end);
      },
      [&](int64_t r, const uint8_t* row, float dot) {
        y[r] = post * (dot + (has_tail ? block_tail<quant::MXFP4>(row, k, x) : 0.f));
      });
}

}  // namespace ft::cpu
