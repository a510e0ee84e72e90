// route: MoE router softmax + top-k (+ renormalisation) fused, one warp per token. Expert e
// lives in lane e % 32, register slot e / 32; top-k is k rounds of a warp argmax.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft::cuda {

namespace {
constexpr int k_max_per_lane = 16;  // n_experts <= 512
constexpr int k_warps = 4;

// ---- kernels
__global__ void route_kernel(const float* __restrict__ logits, int64_t n, int n_experts, int top_k,
                             bool renormalize, int32_t* __restrict__ ids,
                             float* __restrict__ weights) {
  const int64_t t = blockIdx.x * int64_t{k_warps} + threadIdx.y;
  if (t >= n) return;
  const int lane = threadIdx.x;
  const float* l = logits + t * n_experts;
  float p[k_max_per_lane];
  float mx = -INFINITY;
#pragma unroll
  for (int j = 0; j < k_max_per_lane; ++j) {
    const int e = lane + 32 * j;
    p[j] = e < n_experts ? l[e] : -INFINITY;
    mx = fmaxf(mx, p[j]);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  float sum = 0.f;
#pragma unroll
  for (int j = 0; j < k_max_per_lane; ++j) {
    const int e = lane + 32 * j;
    p[j] = e < n_experts ? expf(p[j] - mx) : -1.f;  // -1: not an expert / already taken
    if (e < n_experts) sum += p[j];
  }
  sum = warp_sum(sum);
#pragma unroll
  for (int j = 0; j < k_max_per_lane; ++j)
    if (p[j] >= 0.f) p[j] /= sum;  // a division, as the CPU does: same ranking of near-ties
  for (int k = 0; k < top_k; ++k) {
    // This lane's best (first index wins ties: j ascending means e ascending).
    float bv = -1.f;
    int bi = 0x7fffffff;
#pragma unroll
    for (int j = 0; j < k_max_per_lane; ++j)
      if (p[j] > bv) bv = p[j], bi = lane + 32 * j;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
      if (ov > bv || (ov == bv && oi < bi)) bv = ov, bi = oi;
    }
    if ((bi & 31) == lane) {
#pragma unroll
      for (int j = 0; j < k_max_per_lane; ++j)
        if (j == (bi >> 5)) p[j] = -1.f;
    }
    if (lane == 0) {
      ids[t * top_k + k] = bi;
      weights[t * top_k + k] = bv;
    }
  }
  if (renormalize && lane == 0) {  // same order as the CPU: s = sum in top-k order
    float s = 0.f;
    for (int k = 0; k < top_k; ++k) s += weights[t * top_k + k];
    for (int k = 0; k < top_k; ++k) weights[t * top_k + k] /= s;
  }
}
}  // namespace

// ---- launcher
void route_topk_softmax(const float* logits, int64_t n, int64_t n_experts, int64_t top_k,
                        bool renormalize, int32_t* ids, float* weights) {
  FT_CHECK(n_experts > 0 && n_experts <= 32 * k_max_per_lane, "route: {} experts (max {})",
           n_experts, 32 * k_max_per_lane);
  FT_CHECK(top_k > 0 && top_k <= 32 && top_k <= n_experts, "route: top_k {} of {} experts", top_k,
           n_experts);
  if (n == 0) return;
  const dim3 block(32, k_warps);
  route_kernel<<<static_cast<unsigned>((n + k_warps - 1) / k_warps), block, 0, stream()>>>(
      logits, n, static_cast<int>(n_experts), static_cast<int>(top_k), renormalize, ids, weights);
  CUDA_CHECK_LAUNCH();
}

}  // namespace ft::cuda
