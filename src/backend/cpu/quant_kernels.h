// CPU GEMV/GEMM over quantized weights: one kernel template over the format traits
// (quant/formats.h) and an ISA traits type (quant_simd.h), dispatched like kernels.h.
// Block formats take activations quantized to int8 with one scale per 16 elements; the
// weights' decode() form (w = d * u + m per group of 16) makes every format's dot product
//   sum_g d_g * dx_g * sum_i(u_i * q_i)  +  sum_g m_g * (dx_g * sum_i q_i).
// FP8_E4M3_B128 keeps f32 activations (e4m3 is not an integer grid).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "base/tensor.h"

namespace ft::cpu {

// Activations of n tokens quantized per group of 16: q [n, k] int8 in [-127, 127],
// d [n, k/16] the group scale (x ~= d * q), s [n, k/16] = d * sum(q) over the group.
struct QActs {
  const int8_t* q;
  const float* d;
  const float* s;
};

// Quantize x [n, k] (k % 16 == 0) into caller buffers of the QActs shapes. One implementation
// for every ISA table, so the tables see the same activations.
void quantize_acts(const float* x, int64_t n, int64_t k, int8_t* q, float* d, float* s);

// y[t * ldy + r] = post * dot(x_t, w_r), t < n, r in [r0, r1). w: rows of row_bytes bytes.
using QGemmFn = void (*)(const QActs& x, int64_t n, int64_t k, const uint8_t* w, size_t row_bytes,
                         int64_t r0, int64_t r1, float post, float* y, int64_t ldy);
// FP8 e4m3 rows [rows, k] with scale_inv [ceil(rows/128), ceil(k/128)], f32 x [n, k].
using Fp8GemmFn = void (*)(const float* x, int64_t n, int64_t k, const uint8_t* w,
                           const float* scale_inv, int64_t r0, int64_t r1, float* y, int64_t ldy);

constexpr int k_num_block_formats = static_cast<int>(DType::NVFP4) - static_cast<int>(DType::Q4_0) + 1;

struct QuantKernels {
  const char* isa;
  QGemmFn gemm[k_num_block_formats];  // indexed by dtype - DType::Q4_0
  Fp8GemmFn gemm_fp8;
  QGemmFn for_dtype(DType t) const { return gemm[static_cast<int>(t) - static_cast<int>(DType::Q4_0)]; }
};

// The table matching kernels().isa (FT_ISA honoured); "avx512" needs AVX512-VNNI as well,
// without it the AVX2 table is used.
const QuantKernels& quant_kernels();
// A specific table ("scalar", "avx2", "avx512"), or nullptr when this CPU or build lacks it.
const QuantKernels* quant_kernels_for(std::string_view isa);

extern const QuantKernels k_scalar_quant_kernels;
const QuantKernels* avx2_quant_kernels();
const QuantKernels* avx512_quant_kernels();

}  // namespace ft::cpu
