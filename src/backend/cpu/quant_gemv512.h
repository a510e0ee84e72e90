// One-token GEMVs with 512-bit unpack for the formats whose 256-bit fused form (quant_fused.h)
// cannot keep up with DRAM. Called from the AVX-512 quant table (kernels_quant_avx512.cpp).
// kernels_quant_vbmi.cpp, only where vbmi_bf16_ok() (Sapphire Rapids and later; Ice Lake lacks
// BF16): FP8 e4m3 (bytes -> bf16 by two 128-entry vpermi2b lookups, vdpbf16ps against bf16
// hi + lo parts of the scaled activations) and NVFP4 (16-element blocks gathered and split into
// nibbles by vpermb / vpmultishiftqb, codebook by vpermb, vpdpbusd against int8 activations).
// kernels_quant_k512.cpp (AVX512-VNNI, like the table): the K-quants Q2_K .. Q6_K, 64 codes per
// vpdpbusd (and MXFP4 in kernels_quant_vbmi.cpp, on VBMI).
#pragma once
#include <xmmintrin.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "backend/cpu/quant_kernels.h"
#include "quant/formats.h"

namespace ft::cpu {

// This CPU has AVX512-VBMI and AVX512-BF16 (and FT_QUANT_VBMI is not 0 in the environment).
bool vbmi_bf16_ok();

// y[r] = dot(x, e4m3 row r) with scale_inv [ceil(rows/128), ceil(k/128)], r in [r0, r1).
void gemv_fp8_vbmi(const float* x, int64_t k, const uint8_t* w, const float* scale_inv,
                   int64_t r0, int64_t r1, float* y);
// y[r] = post * dot(x, NVFP4 row r) over whole 256-element super-blocks and a block tail.
void gemv_nvfp4_vbmi(const QActs& x, int64_t k, const uint8_t* w, size_t row_bytes, int64_t r0,
                     int64_t r1, float post, float* y);
// The same for MXFP4 (activations permuted per call to the kernel's element order).
void gemv_mxfp4_vbmi(const QActs& x, int64_t k, const uint8_t* w, size_t row_bytes, int64_t r0,
                     int64_t r1, float post, float* y);
// y[r] = dot(x, row r) over whole 256-element blocks (K-quant rows are whole blocks).
void gemv_q2k_512(const QActs& x, int64_t k, const uint8_t* w, size_t row_bytes, int64_t r0,
                  int64_t r1, float* y);
void gemv_q3k_512(const QActs& x, int64_t k, const uint8_t* w, size_t row_bytes, int64_t r0,
                  int64_t r1, float* y);
void gemv_q4k_512(const QActs& x, int64_t k, const uint8_t* w, size_t row_bytes, int64_t r0,
                  int64_t r1, float* y);
void gemv_q5k_512(const QActs& x, int64_t k, const uint8_t* w, size_t row_bytes, int64_t r0,
                  int64_t r1, float* y);
void gemv_q6k_512(const QActs& x, int64_t k, const uint8_t* w, size_t row_bytes, int64_t r0,
                  int64_t r1, float* y);


// ---- shared by the kernel files (each instantiates these under its own target pragma)

// The blocks past the last whole super-block (k % 256 elements), through decode() like the
// scalar table. static: each kernel file keeps its own copy, compiled for its instruction set
// (an inline template would be one symbol across the files, and the linker could keep the
// AVX-512 copy for the AVX2 table).
template <class F>
static float block_tail(const uint8_t* row, int64_t k, const QActs& x) {
  constexpr int be = F::kElems;
  const int64_t nsb = k / 256;
  const auto* blk = reinterpret_cast<const typename F::Block*>(row) + 256 / be * nsb;
  float acc = 0.f;
  for (int64_t b = 0; b < (k - 256 * nsb) / be; ++b) {
    uint8_t u[be];
    float d[be / 16], m[be / 16];
    F::decode(blk[b], u, d, m);
    for (int j = 0; j < be / 16; ++j) {
      const int64_t g = (256 * nsb + be * b) / 16 + j;
      int32_t s = 0;
      for (int i = 0; i < 16; ++i)
        s += static_cast<int32_t>(quant::code<F>(u[16 * j + i])) * x.q[16 * g + i];
      acc += d[j] * x.d[g] * static_cast<float>(s) + m[j] * x.s[g];
    }
  }
  return acc;
}

// Distance in bytes ahead of the current block that each row stream prefetches (as quant_fused.h).
constexpr int k_ahead_512 = 4096;

// Every line of the `bytes` at p + k_ahead_512, while that stays before pf_end (the task's rows:
// no prefetch into the next task's data).
inline void prefetch_ahead(const uint8_t* p, int bytes, const uint8_t* pf_end) {
  if (p + k_ahead_512 >= pf_end) return;
  for (int o = 0; o < bytes; o += 64)
    _mm_prefetch(reinterpret_cast<const char*>(p) + k_ahead_512 + o, _MM_HINT_T0);
}

// The rows r0..r1 of a GEMV as NR memory streams: NR rows side by side, one from each NR-th of
// the range (each activation load shared by NR rows), then the leftover rows one by one.
// dots(nr, rows, pf_end, out) writes the dots of nr rows (nr: std::integral_constant<int, n>);
// put(r, row, dot) stores row r's result.
template <int NR, class Dots, class Put>
inline void row_streams(const uint8_t* w, size_t row_bytes, int64_t r0, int64_t r1, Dots&& dots,
                        Put&& put) {
  const int64_t part = (r1 - r0) / NR;
  const uint8_t* end = w + r1 * row_bytes;
  for (int64_t i = 0; i < part; ++i) {
    const uint8_t* rows[NR];
    for (int j = 0; j < NR; ++j) rows[j] = w + (r0 + j * part + i) * row_bytes;
    float out[NR];
    dots(std::integral_constant<int, NR>{}, rows, end, out);
    for (int j = 0; j < NR; ++j) put(r0 + j * part + i, rows[j], out[j]);
  }
  for (int64_t r = r0 + NR * part; r < r1; ++r) {
    const uint8_t* row = w + r * row_bytes;
    float out;
    dots(std::integral_constant<int, 1>{}, &row, end, &out);
    put(r, row, out);
  }
}

}  // namespace ft::cpu
