// add_sigmoid_scaled: x[t, :] += sigmoid(logit[t]) * y[t, :], the shared expert's per-token
// gate (Qwen3-Next, Qwen3.5) added into the residual stream.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft::cuda {

namespace {
// ---- kernels
__global__ void add_sigmoid_scaled_kernel(float* x, const float* y, const float* logit,
                                          int64_t count, int64_t dim) {
  pdl_wait();
  pdl_trigger();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float g = 1.f / (1.f + expf(-logit[i / dim]));
    x[i] += g * y[i];
  }
}
}  // namespace

// ---- launcher
void add_sigmoid_scaled(float* x, const float* y, const float* logit, int64_t n, int64_t dim) {
  FT_CHECK(n >= 0 && dim > 0 && x && y && logit, "add_sigmoid_scaled: bad arguments");
  const int64_t count = n * dim;
  if (count == 0) return;
  const int64_t b = (count + 255) / 256;
  launch_kernel(add_sigmoid_scaled_kernel, dim3(static_cast<unsigned>(b < 65535 ? b : 65535)),
                dim3(256), 0, x, y, logit, count, dim);
}

}  // namespace ft::cuda
