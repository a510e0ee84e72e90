// rmsnorm of rows split over tensor-parallel ranks (a full-width q/k norm on sharded heads):
// each rank sums the squares of its columns, the sums are all-reduced, then each rank scales
// its columns by the global 1 / rms.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft::cuda {

namespace {
// ---- kernels
constexpr int k_rows_per_block = 8;

__global__ void row_sumsq_kernel(const float* x, int64_t n, int64_t dim, float* out) {
  pdl_wait();
  pdl_trigger();
  const int64_t r = blockIdx.x * int64_t{k_rows_per_block} + threadIdx.y;
  if (r >= n) return;
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < dim; i += 32) ss += x[r * dim + i] * x[r * dim + i];
  ss = warp_sum(ss);
  if (threadIdx.x == 0) out[r] = ss;
}

__global__ void rmsnorm_sumsq_kernel(const float* x, int64_t n, int64_t dim, const float* sumsq,
                                     float inv_total, const float* __restrict__ w, float eps,
                                     float* y) {
  pdl_wait();
  pdl_trigger();
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n * dim) return;
  const int64_t r = i / dim;
  y[i] = x[i] * rsqrtf(sumsq[r] * inv_total + eps) * w[i % dim];
}
}  // namespace

// ---- launchers
void row_sumsq(const float* x, int64_t n, int64_t dim, float* out) {
  FT_CHECK(n >= 0 && dim > 0, "row_sumsq: bad shape [{}, {}]", n, dim);
  if (n == 0) return;
  const auto blocks = static_cast<unsigned>((n + k_rows_per_block - 1) / k_rows_per_block);
  launch_kernel(row_sumsq_kernel, dim3(blocks), dim3(32, k_rows_per_block), 0, x, n, dim, out);
}

void rmsnorm_from_sumsq(const float* x, int64_t n, int64_t dim, const float* sumsq,
                        int64_t total_dim, const float* w, float eps, float* y) {
  FT_CHECK(n >= 0 && dim > 0 && total_dim >= dim, "rmsnorm_from_sumsq: bad shape [{}, {}] of {}",
           n, dim, total_dim);
  if (n == 0) return;
  const auto blocks = static_cast<unsigned>((n * dim + 255) / 256);
  launch_kernel(rmsnorm_sumsq_kernel, dim3(blocks), dim3(256), 0, x, n, dim, sumsq,
                1.f / static_cast<float>(total_dim), w, eps, y);
}

}  // namespace ft::cuda
