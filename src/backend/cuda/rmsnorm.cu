// rmsnorm: y = x / rms(x) * w per row, fp32 accumulation. Rows up to 1024 wide take one warp
// each (per-head q/k norms are many short rows); wider rows take a block.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft::cuda {

namespace {
constexpr int k_batch = 4;  // elements a thread loads before using any (latency, not bandwidth)

// Sum of squares of row[0..dim) over this thread's elements i0, i0 + stride, ...
__device__ __forceinline__ float sum_squares(const float* row, int64_t dim, int64_t i0,
                                             int64_t stride) {
  float ss = 0.f;
  for (int64_t i = i0; i < dim; i += stride * k_batch) {
    float r[k_batch];
#pragma unroll
    for (int u = 0; u < k_batch; ++u) r[u] = i + u * stride < dim ? row[i + u * stride] : 0.f;
#pragma unroll
    for (int u = 0; u < k_batch; ++u) ss += r[u] * r[u];
  }
  return ss;
}

// out[i] = row[i] * inv * w[i] over the same elements (out may alias row).
__device__ __forceinline__ void scale_row(const float* row, int64_t dim, int64_t i0, int64_t stride,
                                          float inv, const float* __restrict__ w, float* out) {
  for (int64_t i = i0; i < dim; i += stride * k_batch) {
    float r[k_batch], g[k_batch];
#pragma unroll
    for (int u = 0; u < k_batch; ++u)
      if (i + u * stride < dim) r[u] = row[i + u * stride], g[u] = w[i + u * stride];
#pragma unroll
    for (int u = 0; u < k_batch; ++u)
      if (i + u * stride < dim) out[i + u * stride] = r[u] * inv * g[u];
  }
}

// ---- kernels
__global__ void rmsnorm_block_kernel(const float* x, int64_t dim, const float* __restrict__ w,
                                     float eps, float* y) {
  pdl_wait();
  pdl_trigger();
  const float* row = x + blockIdx.x * dim;
  const float ss = sum_squares(row, dim, threadIdx.x, blockDim.x);
  const float inv = rsqrtf(block_sum(ss) / static_cast<float>(dim) + eps);
  scale_row(row, dim, threadIdx.x, blockDim.x, inv, w, y + blockIdx.x * dim);
}

constexpr int k_rows_per_block = 8;

__global__ void rmsnorm_warp_kernel(const float* x, int64_t n, int64_t dim,
                                    const float* __restrict__ w, float eps, float* y) {
  pdl_wait();
  pdl_trigger();
  const int64_t r = blockIdx.x * int64_t{k_rows_per_block} + threadIdx.y;
  if (r >= n) return;
  const float* row = x + r * dim;
  const float ss = sum_squares(row, dim, threadIdx.x, 32);
  const float inv = rsqrtf(warp_sum(ss) / static_cast<float>(dim) + eps);
  scale_row(row, dim, threadIdx.x, 32, inv, w, y + r * dim);
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
