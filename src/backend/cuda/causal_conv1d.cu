// causal_conv1d_silu: depthwise causal conv1d + SiLU over the steps of a pass, each continuing
// from its sequence's conv state; a second kernel then advances the states (so no output reads
// a state entry after it changed). Same arithmetic order as ops/delta_net.cpp.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft::cuda {

namespace {
constexpr int k_threads = 256;
constexpr int k_max_kernel = 8;

// The first token of t's step (the last u <= t with u == 0 or seq[u - 1] != seq[u]), found by
// the whole block; every thread gets it.
__device__ __forceinline__ int64_t step_first(const int32_t* seq, int64_t t) {
  __shared__ int first;
  if (threadIdx.x == 0) first = 0;
  __syncthreads();
  for (int64_t u = t - threadIdx.x; u > 0; u -= blockDim.x)
    if (seq[u - 1] != seq[u]) {
      atomicMax(&first, static_cast<int>(u));
      break;
    }
  __syncthreads();
  return first;
}

// ---- kernels
// Block (channel block, token t): out[t, c] = silu(sum_j w[c, j] * in(t - hist + j)), in(i)
// reading x for i in the step and the state before it.
__global__ void __launch_bounds__(k_threads) conv_kernel(const __grid_constant__ ConvArgs a) {
  pdl_wait();
  pdl_trigger();
  const int64_t t = blockIdx.y, hist = a.kernel - 1;
  const int64_t f = step_first(a.seq, t);
  const int64_t c = blockIdx.x * int64_t{k_threads} + threadIdx.x;
  if (c >= a.channels) return;
  const float* wc = a.w + c * a.kernel;
  const float* sc = a.state + a.seq[t] * a.seq_stride + c * hist;
  float acc = 0.f;
  for (int64_t j = 0; j < a.kernel; ++j) {
    const int64_t i = t - hist + j;
    acc += wc[j] * (i >= f ? a.x[i * a.channels + c] : sc[hist + i - f]);
  }
  a.out[t * a.channels + c] = acc / (1.f + expf(-acc));
}

// Block (channel block, token t), working only where t is the last token of its step: the
// state becomes the step's last kernel - 1 inputs (older ones from the state itself when the
// step is shorter).
__global__ void __launch_bounds__(k_threads) conv_state_kernel(const __grid_constant__ ConvArgs a) {
  pdl_wait();
  pdl_trigger();
  const int64_t t = blockIdx.y, hist = a.kernel - 1;
  if (t + 1 < a.n && a.seq[t + 1] == a.seq[t]) return;  // uniform across the block
  const int64_t f = step_first(a.seq, t);
  const int64_t c = blockIdx.x * int64_t{k_threads} + threadIdx.x;
  if (c >= a.channels) return;
  float* sc = a.state + a.seq[t] * a.seq_stride + c * hist;
  const int64_t len = t - f + 1;
  float next[k_max_kernel];
  for (int64_t j = 0; j < hist; ++j) {
    const int64_t i = len - hist + j;  // index within the step
    next[j] = i >= 0 ? a.x[(f + i) * a.channels + c] : sc[hist + i];
  }
  for (int64_t j = 0; j < hist; ++j) sc[j] = next[j];
}
}  // namespace

// ---- launcher
void causal_conv1d_silu(const ConvArgs& a) {
  FT_CHECK(a.n >= 0 && a.channels > 0 && a.kernel >= 1 && a.kernel <= k_max_kernel && a.x &&
               a.out && a.w && a.state && a.seq && a.x != a.out,
           "causal_conv1d_silu: bad arguments (channels {}, kernel {})", a.channels, a.kernel);
  if (a.n == 0) return;
  const dim3 grid(static_cast<unsigned>((a.channels + k_threads - 1) / k_threads),
                  static_cast<unsigned>(a.n));
  launch_kernel(conv_kernel, grid, dim3(k_threads), 0, a);
  launch_kernel(conv_state_kernel, grid, dim3(k_threads), 0, a);
}

}  // namespace ft::cuda
