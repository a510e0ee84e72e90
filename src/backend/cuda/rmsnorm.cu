// rmsnorm: y = x / rms(x) * w per row, fp32 accumulation. Rows up to 1024 wide take one warp
// each (per-head q/k norms are many short rows); wider rows take a block.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft::cuda {

namespace {
// ---- kernels
__global__ void rmsnorm_block_kernel(const float* x, int64_t dim, const float* __restrict__ w,
                                     float eps, float* y) {
  pdl_wait();
  pdl_trigger();
  const float* row = x + blockIdx.x * dim;
  float* out = y + blockIdx.x * dim;
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) ss += row[i] * row[i];
  const float inv = rsqrtf(block_sum(ss) / static_cast<float>(dim) + eps);
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) out[i] = row[i] * inv * w[i];
}

constexpr int k_rows_per_block = 8;

__global__ void rmsnorm_warp_kernel(const float* x, int64_t n, int64_t dim,
                                    const float* __restrict__ w, float eps, float* y) {
  pdl_wait();
  pdl_trigger();
  const int64_t r = blockIdx.x * int64_t{k_rows_per_block} + threadIdx.y;
  if (r >= n) return;
  const float* row = x + r * dim;
  float* out = y + r * dim;
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < dim; i += 32) ss += row[i] * row[i];
  const float inv = rsqrtf(warp_sum(ss) / static_cast<float>(dim) + eps);
  for (int64_t i = threadIdx.x; i < dim; i += 32) out[i] = row[i] * inv * w[i];
}
}  // namespace

// ---- launcher
void rmsnorm(const float* x, int64_t n, int64_t dim, const float* w, float eps, float* y) {
  FT_CHECK(n >= 0 && dim > 0, "rmsnorm: bad shape [{}, {}]", n, dim);
  if (n == 0) return;
  if (dim <= 1024) {
    const dim3 block(32, k_rows_per_block);
    const auto blocks = static_cast<unsigned>((n + k_rows_per_block - 1) / k_rows_per_block);
    launch_kernel(rmsnorm_warp_kernel, dim3(blocks), block, 0, x, n, dim, w, eps, y);
  } else {
    launch_kernel(rmsnorm_block_kernel, dim3(static_cast<unsigned>(n)), dim3(256), 0, x, dim, w,
                  eps, y);
  }
}

}  // namespace ft::cuda
