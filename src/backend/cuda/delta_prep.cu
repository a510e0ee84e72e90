// delta_prep: the DeltaNet inputs after the conv, in place: q/k heads L2-normalised (q also
// scaled), beta = sigmoid(b), g = -exp(A_log) * softplus(a + dt_bias). One block per token, a
// warp per q or k head; the last warp does beta and g. Same arithmetic as
// model/delta_net_block.cpp.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft::cuda {

namespace {
constexpr int k_warps = 8;

__device__ __forceinline__ float softplus(float x) { return x > 20.f ? x : log1pf(expf(x)); }

// ---- kernels
__global__ void __launch_bounds__(32 * k_warps) delta_prep_kernel(const __grid_constant__ DeltaPrepArgs a) {
  pdl_wait();
  pdl_trigger();
  const int64_t t = blockIdx.x;
  const int lane = threadIdx.x;
  const int64_t units = 2 * a.n_k_heads;  // q heads, then k heads
  for (int64_t u = threadIdx.y; u <= units; u += k_warps) {
    if (u == units) {  // beta and g
      for (int64_t h = lane; h < a.n_v_heads; h += 32) {
        float& b = a.b[t * a.n_v_heads + h];
        float& g = a.a[t * a.n_v_heads + h];
        b = 1.f / (1.f + expf(-b));
        g = -expf(a.a_log[h]) * softplus(g + a.dt_bias[h]);
      }
      continue;
    }
    const bool is_q = u < a.n_k_heads;
    float* x = a.qkv + t * a.stride + (is_q ? u * a.k_dim : a.key_dim + (u - a.n_k_heads) * a.k_dim);
    float ss = 0.f;
    for (int64_t i = lane; i < a.k_dim; i += 32) ss += x[i] * x[i];
    const float inv = 1.f / sqrtf(warp_sum(ss) + 1e-6f);
    for (int64_t i = lane; i < a.k_dim; i += 32) {
      const float v = x[i] * inv;
      x[i] = is_q ? v * a.q_scale : v;
    }
  }
}
}  // namespace

// ---- launcher
void delta_prep(const DeltaPrepArgs& a) {
  FT_CHECK(a.n >= 0 && a.n_k_heads > 0 && a.k_dim > 0 && a.n_v_heads > 0 &&
               a.key_dim >= a.n_k_heads * a.k_dim && a.qkv && a.b && a.a && a.a_log && a.dt_bias,
           "delta_prep: bad arguments");
  if (a.n == 0) return;
  launch_kernel(delta_prep_kernel, dim3(static_cast<unsigned>(a.n)), dim3(32, k_warps), 0, a);
}

}  // namespace ft::cuda
