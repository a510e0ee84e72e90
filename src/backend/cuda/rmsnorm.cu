// rmsnorm: one block per row, fp32 accumulation.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft::cuda {

namespace {
// ---- kernels
__global__ void rmsnorm_kernel(const float* __restrict__ x, int64_t dim,
                               const float* __restrict__ w, float eps, float* __restrict__ y) {
  const float* row = x + blockIdx.x * dim;
  float* out = y + blockIdx.x * dim;
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) ss += row[i] * row[i];
  const float inv = rsqrtf(block_sum(ss) / static_cast<float>(dim) + eps);
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) out[i] = row[i] * inv * w[i];
}
}  // namespace

// ---- launcher
void rmsnorm(const float* x, int64_t n, int64_t dim, const float* w, float eps, float* y) {
  if (n == 0) return;
  rmsnorm_kernel<<<static_cast<unsigned>(n), 256>>>(x, dim, w, eps, y);
  CUDA_CHECK_LAUNCH();
}

}  // namespace ft::cuda
