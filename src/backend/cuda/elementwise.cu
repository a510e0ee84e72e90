// Elementwise ops: residual add, bias add, clamp (clip_qkv). Grid-stride loops.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft::cuda {

namespace {
// ---- kernels
__global__ void add_kernel(float* __restrict__ x, const float* __restrict__ y, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x)
    x[i] += y[i];
}

__global__ void add_bias_kernel(float* __restrict__ y, int64_t count, int64_t rows,
                                const float* __restrict__ bias) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x)
    y[i] += bias[i % rows];
}

__global__ void clamp_kernel(float* __restrict__ x, int64_t count, float limit) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x)
    x[i] = fminf(fmaxf(x[i], -limit), limit);
}

unsigned grid_for(int64_t count) {
  const int64_t blocks = (count + 255) / 256;
  return static_cast<unsigned>(blocks < 65535 ? blocks : 65535);
}
}  // namespace

// ---- launchers
void add_inplace(float* x, const float* y, int64_t count) {
  FT_CHECK(count >= 0, "add_inplace: negative count");
  if (count == 0) return;
  add_kernel<<<grid_for(count), 256, 0, stream()>>>(x, y, count);
  CUDA_CHECK_LAUNCH();
}

void add_bias(float* y, int64_t n, int64_t rows, const float* bias) {
  FT_CHECK(n >= 0 && rows > 0 && bias, "add_bias: bad arguments");
  if (n == 0) return;
  add_bias_kernel<<<grid_for(n * rows), 256, 0, stream()>>>(y, n * rows, rows, bias);
  CUDA_CHECK_LAUNCH();
}

void clamp(float* x, int64_t count, float limit) {
  FT_CHECK(count >= 0 && limit > 0, "clamp: bad arguments");
  if (count == 0) return;
  clamp_kernel<<<grid_for(count), 256, 0, stream()>>>(x, count, limit);
  CUDA_CHECK_LAUNCH();
}

}  // namespace ft::cuda
