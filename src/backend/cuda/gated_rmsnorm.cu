// gated_rmsnorm: o = rmsnorm(o) * w * silu(z) per row (the DeltaNet output norm of each value
// head), one warp per row. Same order as model/delta_net_block.cpp: the norm, then the gate.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft::cuda {

namespace {
constexpr int k_rows_per_block = 8;

// ---- kernels
__global__ void gated_rmsnorm_kernel(float* o, const float* z, int64_t rows, int64_t dim,
                                     const float* __restrict__ w, float eps) {
  pdl_wait();
  pdl_trigger();
  const int64_t r = blockIdx.x * int64_t{k_rows_per_block} + threadIdx.y;
  if (r >= rows) return;
  float* row = o + r * dim;
  const float* zr = z + r * dim;
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < dim; i += 32) ss += row[i] * row[i];
  const float inv = 1.f / sqrtf(warp_sum(ss) / static_cast<float>(dim) + eps);
  for (int64_t i = threadIdx.x; i < dim; i += 32) {
    const float y = row[i] * inv * w[i];
    row[i] = y * (zr[i] / (1.f + expf(-zr[i])));
  }
}
}  // namespace

// ---- launcher
void gated_rmsnorm(float* o, const float* z, int64_t rows, int64_t dim, const float* w, float eps) {
  FT_CHECK(rows >= 0 && dim > 0 && o && z && w, "gated_rmsnorm: bad shape [{}, {}]", rows, dim);
  if (rows == 0) return;
  const auto blocks = static_cast<unsigned>((rows + k_rows_per_block - 1) / k_rows_per_block);
  launch_kernel(gated_rmsnorm_kernel, dim3(blocks), dim3(32, k_rows_per_block), 0, o, z, rows, dim,
                w, eps);
}

}  // namespace ft::cuda
