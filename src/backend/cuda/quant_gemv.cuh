// Internal to the quantized GEMV (quant_gemv.cu: f32 activations, quant_gemv_q8.cu: int8
// activations): the launch parameters both kernels take and the aligned row-chunk load.
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>

#include <atomic>
#include <cstring>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft::cuda::qgemv {

constexpr int k_warps = 8;           // warps per block
constexpr int k_rows_per_warp = 2;   // rows sharing each activation load
constexpr int k_chunk_bytes = 1024;  // bytes of a row staged per step (whole blocks, about)

struct QParams {
  const float* x;
  int64_t ldx, cols;
  size_t row_bytes;
  int count;
  const uint8_t* w[k_gemv_multi];
  float* y[k_gemv_multi];
  const float* bias[k_gemv_multi];
  int64_t rows[k_gemv_multi];
  int64_t block0[k_gemv_multi + 1];  // first block of each matrix
  bool accumulate[k_gemv_multi];
  const float* scale_inv[k_gemv_multi];  // FP8 tiles [ceil(rows/128), ceil(cols/128)]
  float gscale[k_gemv_multi];            // NVFP4 global scale
  // Experts form (ids != nullptr, one token per slot = blockIdx.y): matrix w + ids[s] *
  // expert_bytes, input x + (s / x_div) * x_slot, output y + s * y_slot; ids[s] < 0 writes 0.
  const int32_t* ids;
  size_t expert_bytes;
  int x_div;
  int64_t x_slot, y_slot;
  const float* x_up = nullptr;  // non-null: the input is silu(x) * x_up (strides as x)
  // Experts form: the ids were final before the previous kernel started
  // (QuantExpertGemv::ids_early), so the streaming kernel reads them and issues its first
  // weight chunks before its PDL wait.
  bool ids_early = false;
  // int8 kernel: a block covers row_iters groups of k_warps * k_rows_per_warp rows (the f32
  // kernel: one).
  int row_iters = 1;
  // int8 streaming kernel (one token): warp w takes rows [w * rows_per_warp, + rows_per_warp)
  // of the matrices' rows end to end (matrix m: rows0[m] .. rows0[m + 1]), per slot.
  int64_t rows0[k_gemv_multi + 1] = {};
  int rows_per_warp = 1;
};

// block0 for row_iters row groups per block; returns the number of blocks.
inline int64_t set_blocks(QParams& p) {
  const int64_t per = int64_t{k_warps} * k_rows_per_warp * p.row_iters;
  p.block0[0] = 0;
  for (int m = 0; m < p.count; ++m) p.block0[m + 1] = p.block0[m] + (p.rows[m] + per - 1) / per;
  return p.block0[p.count];
}

// g * sigmoid(g) * u, as silu_mul.cu.
__device__ __forceinline__ float silu_mul1(float g, float u) { return g / (1.f + __expf(-g)) * u; }
__device__ __forceinline__ float4 silu_mul4(float4 g, float4 u) {
  return make_float4(silu_mul1(g.x, u.x), silu_mul1(g.y, u.y), silu_mul1(g.z, u.z),
                     silu_mul1(g.w, u.w));
}

// 16 bytes at p, or the bytes before end (the matrix's last vector may overhang it).
__device__ __forceinline__ uint4 load16(const uint8_t* p, const uint8_t* end) {
  if (p + 16 <= end) return ldg_stream(p);
  uint8_t b[16] = {};
  for (int i = 0; i < 16 && p + i < end; ++i) b[i] = p[i];
  uint4 v;
  memcpy(&v, b, 16);
  return v;
}

// The one-token streaming int8-activation GEMV (quant_gemv_stream.cu) on dt's blocks; false when
// it does not apply (an odd 32-element unit count, too little shared memory, no integer codes):
// nothing launched.
bool launch_stream(DType dt, QParams& p, int64_t slots);

// The int8-activation GEMV (quant_gemv_q8.cu) for nt tokens (slots experts' slots, else 0) when
// dt has integer codes and the activations fit shared memory; sets p.row_iters and block0.
// False: nothing launched, the caller runs the f32 kernel.
bool launch_q8(DType dt, QParams& p, int64_t nt, int64_t slots);

// Whether the fast kernels (int8 activations; FP8 on tensor cores) are on: set_quant_gemv_int8.
bool fast_on();

// The FP8 tensor-core GEMV (quant_gemv_fp8.cu) for nt <= 4 tokens of plain matrices (slots 0:
// launch_q8 sends FP8 there) or the experts form over slots FP8 records (fp8_experts_gemv; their
// scale tiles scale_offset bytes into each record, ids_early: see QuantExpertGemv). false when
// the f32 kernels are selected (set_quant_gemv_int8) or the shape or alignment does not suit
// it: nothing launched.
bool launch_fp8(const QParams& p, int64_t nt, int64_t slots = 0, size_t scale_offset = 0,
                bool ids_early = false);

}  // namespace ft::cuda::qgemv
