// NVFP4 one-token GEMV on AVX2 (include only from kernels_quant_avx2.cpp).
//
// The generic fused GEMV (quant_fused.h over Unpack<NVFP4>) spends most of its time on
// shuffle-unit work: 16 scalar inserts for the scale bytes (9-byte stride) and, per 32 codes, two
// 8-byte loads, an unpack, nibble interleaves and an insert, then a permute to spread each
// group scale over its lanes. Here instead:
//  - codes: a 256-bit load at b + 1 + i for block i of four has that block's 8 code bytes in
//    dwords 2i, 2i + 1 (9-byte blocks), so three dword blends give 4 blocks' codes with no
//    shuffle; one vshufps of two such vectors puts 8 blocks' code dwords (bytes 0-3, or 4-7)
//    one block per 32-bit lane;
//  - the nibbles are dotted as they lie (low nibble = even element) against activations
//    permuted once per call to that order, and the four 16-bit vpmaddubsw sums of a lane are
//    added before one vpmaddwd, so each 32-bit lane is a whole block's dot: its scale needs no
//    spreading, just one vector of 8 block scales in the same lane order;
//  - the offset (codes are 2 e2m1 + 12) is removed in integers: 12 sum(q) per block is
//    precomputed, which also drops the generic path's per-group m * s term;
//  - the 16 scale bytes come from masked qword loads (unpack_detail::nvfp4_scale_bytes, which
//    the generic path shares).
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "backend/cpu/quant_fused.h"
#include "backend/cpu/quant_gemv512.h"
#include "backend/cpu/quant_simd.h"

namespace ft::cpu::fp4avx2 {

constexpr int k_rows = 4;      // rows side by side (as the FP8 GEMV; 2 measured the same)
constexpr int k_ahead = 1024;  // prefetch distance per row (as the FP8 GEMV, measured there)

// Block of each 32-bit lane, within 8 blocks: vshufps of [0 1 | 2 3] and [4 5 | 6 7].
constexpr int k_order[8] = {0, 1, 4, 5, 2, 3, 6, 7};

inline __m256i load32(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// Code bytes of the 4 blocks at b: qword i = block i's 8 bytes (at b + 9i + 1).
inline __m256i codes4(const uint8_t* b) {
  const __m256i c01 = _mm256_blend_epi32(load32(b + 1), load32(b + 2), 0x0c);
  const __m256i c23 = _mm256_blend_epi32(load32(b + 3), load32(b + 4), 0xc0);
  return _mm256_blend_epi32(c01, c23, 0xf0);
}

// The 16 e4m3 scale bytes of a super-block, in k_order within each half of 8.
inline __m128i scale_bytes(const uint8_t* p) {
  return _mm_shuffle_epi8(qsimd::unpack_detail::nvfp4_scale_bytes(p),
                          _mm_setr_epi8(0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15));
}

// Activations of whole super-blocks in the kernel's order: per 8 blocks, four 32-byte vectors
// (elements 2i, 2i + 1, 8 + 2i, 9 + 2i, i < 4, of block k_order[j] in lane j), the activation
// scale of each block (dx) and 12 sum(q) (q12) in the same order.
struct Acts {
  const int8_t* q;
  const float* dx;
  const int32_t* q12;
};
inline Acts perm_acts(const QActs& x, int64_t nsb) {
  const int64_t nb = 16 * nsb;  // blocks (groups of 16)
  uint8_t* buf = quant_row_scratch(256 * nsb);  // 256 nsb + 8 nb bytes fit its k + 8 (k/16 + 1)
  auto* q = reinterpret_cast<int8_t*>(buf);
  auto* dx = reinterpret_cast<float*>(buf + 256 * nsb);
  auto* q12 = reinterpret_cast<int32_t*>(dx + nb);
  for (int64_t b0 = 0; b0 < nb; b0 += 8) {
    int8_t* o = q + 16 * b0;
    for (int j = 0; j < 8; ++j) {
      const int64_t g = b0 + k_order[j];
      const int8_t* src = x.q + 16 * g;
      int32_t sum = 0;
      for (int e = 0; e < 16; ++e) sum += src[e];
      for (int i = 0; i < 4; ++i) {
        o[4 * j + i] = src[2 * i];
        o[32 + 4 * j + i] = src[2 * i + 1];
        o[64 + 4 * j + i] = src[8 + 2 * i];
        o[96 + 4 * j + i] = src[9 + 2 * i];
      }
      dx[b0 + j] = x.d[g];
      q12[b0 + j] = 12 * sum;
    }
  }
  return {q, dx, q12};
}

// sum over the 8 blocks at b of isum * scale: isum the exact integer dot of the e2m1 values
// (doubled) with q, one block per lane.
inline __m256 half_dot(const uint8_t* b, const int8_t* q, const int32_t* q12, __m256 scale,
                       __m256 acc) {
  const __m256 y0 = _mm256_castsi256_ps(codes4(b)), y1 = _mm256_castsi256_ps(codes4(b + 36));
  const __m256i v0 = _mm256_castps_si256(_mm256_shuffle_ps(y0, y1, 0x88));  // code bytes 0-3
  const __m256i v1 = _mm256_castps_si256(_mm256_shuffle_ps(y0, y1, 0xdd));  // code bytes 4-7
  const __m256i nib = _mm256_set1_epi8(0x0f);
  const __m256i book = _mm256_broadcastsi128_si256(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(quant::k_e2m1_book.v)));
  auto dot = [&](__m256i u, int o) {
    return _mm256_maddubs_epi16(_mm256_shuffle_epi8(book, u), load32(reinterpret_cast<const uint8_t*>(q + o)));
  };
  // codes <= 24, |q| <= 128: each 16-bit sum is at most 2 * 24 * 128, four of them fit
  const __m256i s = _mm256_add_epi16(
      _mm256_add_epi16(dot(_mm256_and_si256(v0, nib), 0),
                       dot(_mm256_and_si256(_mm256_srli_epi16(v0, 4), nib), 32)),
      _mm256_add_epi16(dot(_mm256_and_si256(v1, nib), 64),
                       dot(_mm256_and_si256(_mm256_srli_epi16(v1, 4), nib), 96)));
  const __m256i isum = _mm256_sub_epi32(_mm256_madd_epi16(s, _mm256_set1_epi16(1)),
                                        load32(reinterpret_cast<const uint8_t*>(q12)));
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), scale, acc);
}

// out[j] = dot over the nsb whole super-blocks of rows[j], without the 0.5 e4m3 -> d factor's
// 128 (applied by the caller). Row j's arithmetic does not depend on NR.
template <int NR>
inline void nvfp4_rows(const uint8_t* const* rows, int64_t nsb, const Acts& a,
                       const uint8_t* pf_end, float* out) {
  __m256 acc[NR];
  for (int j = 0; j < NR; ++j) acc[j] = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const int8_t* q = a.q + 256 * sb;
    const float* dx = a.dx + 16 * sb;
    const int32_t* q12 = a.q12 + 16 * sb;
    for (int j = 0; j < NR; ++j) {
      const uint8_t* p = rows[j] + 144 * sb;
      if (p + k_ahead < pf_end)
        for (int o = 0; o < 144; o += 64)
          _mm_prefetch(reinterpret_cast<const char*>(p) + k_ahead + o, _MM_HINT_T0);
      __m256 ws0, ws1;
      qsimd::unpack_detail::e4m3x16_over_256(scale_bytes(p), &ws0, &ws1);
      acc[j] = half_dot(p, q, q12, _mm256_mul_ps(ws0, _mm256_loadu_ps(dx)), acc[j]);
      acc[j] = half_dot(p + 72, q + 128, q12 + 8, _mm256_mul_ps(ws1, _mm256_loadu_ps(dx + 8)),
                        acc[j]);
    }
  }
  for (int j = 0; j < NR; ++j) out[j] = qsimd::hsum(acc[j]);
}

// y[r] = post * dot(x, NVFP4 row r), r in [r0, r1): k_rows rows side by side (row_streams).
inline void gemv_nvfp4(const QActs& x, int64_t k, const uint8_t* w, size_t row_bytes, int64_t r0,
                       int64_t r1, float post, float* y) {
  const int64_t nsb = k / 256;
  const Acts a = perm_acts(x, nsb);
  const bool has_tail = k % 256 != 0;
  row_streams<k_rows>(
      w, row_bytes, r0, r1,
      [&](auto nr, const uint8_t* const* rows, const uint8_t* end, float* out) {
        nvfp4_rows<decltype(nr)::value>(rows, nsb, a, end, out);
      },
      [&](int64_t r, const uint8_t* row, float dot) {
        y[r] = post * (128.f * dot + (has_tail ? block_tail<quant::NVFP4>(row, k, x) : 0.f));
      });
}

}  // namespace ft::cpu::fp4avx2
