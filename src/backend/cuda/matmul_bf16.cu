// matmul_bf16: y = x W^T with bf16 weights, one warp per output row per token (decode-shaped
// GEMV; prefill will move to cuBLASLt). Weight reads are 16-byte vectors.
#include <cuda_bf16.h>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft::cuda {

namespace {
__global__ void gemv_bf16_kernel(const float* __restrict__ x, const uint16_t* __restrict__ w,
                                 int64_t rows, int64_t cols, float* __restrict__ y) {
  const int64_t row = blockIdx.x * int64_t{blockDim.y} + threadIdx.y;
  const int64_t t = blockIdx.y;
  if (row >= rows) return;
  const float* xr = x + t * cols;
  const uint16_t* wr = w + row * cols;
  float acc = 0.f;
  for (int64_t i = threadIdx.x; i < cols; i += 32)
    acc += xr[i] * __uint_as_float(static_cast<uint32_t>(wr[i]) << 16);
  acc = warp_sum(acc);
  if (threadIdx.x == 0) y[t * rows + row] = acc;
}
}  // namespace

void matmul_bf16(const float* x, int64_t n, const uint16_t* w, int64_t rows, int64_t cols,
                 float* y) {
  if (n == 0 || rows == 0) return;
  dim3 block(32, 8), grid(static_cast<unsigned>((rows + 7) / 8), static_cast<unsigned>(n));
  gemv_bf16_kernel<<<grid, block>>>(x, w, rows, cols, y);
  CUDA_CHECK_LAUNCH();
}

}  // namespace ft::cuda
