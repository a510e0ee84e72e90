// silu_mul: y = g * sigmoid(g) * u, elementwise.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft::cuda {

namespace {
__global__ void silu_mul_kernel(const float* __restrict__ g, const float* __restrict__ u,
                                int64_t count, float* __restrict__ y) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x)
    y[i] = g[i] / (1.f + __expf(-g[i])) * u[i];
}
}  // namespace

void silu_mul(const float* g, const float* u, int64_t count, float* y) {
  if (count == 0) return;
  const int64_t blocks = (count + 255) / 256;
  silu_mul_kernel<<<static_cast<unsigned>(blocks < 65535 ? blocks : 65535), 256, 0, stream()>>>(g, u, count, y);
  CUDA_CHECK_LAUNCH();
}

}  // namespace ft::cuda
