// route: MoE router softmax + top-k (+ renormalisation) fused, one warp per token
// (route_token in route.cuh).
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/route.cuh"

namespace ft::cuda {

namespace {
constexpr int k_max_per_lane = k_route_max_per_lane;
constexpr int k_warps = 4;

// ---- kernels
__global__ void route_kernel(const float* __restrict__ logits, int64_t n, int n_experts, int top_k,
                             bool renormalize, int32_t* __restrict__ ids,
                             float* __restrict__ weights, RouteLocal local) {
  pdl_wait();
  pdl_trigger();
  const int64_t t = blockIdx.x * int64_t{k_warps} + threadIdx.y;
  if (t >= n) return;
  route_token(logits + t * n_experts, n_experts, top_k, renormalize, ids + t * top_k,
              weights + t * top_k, local.begin, local.count);
}
}  // namespace

// ---- launcher
void route_topk_softmax(const float* logits, int64_t n, int64_t n_experts, int64_t top_k,
                        bool renormalize, int32_t* ids, float* weights, RouteLocal local) {
  FT_CHECK(n_experts > 0 && n_experts <= 32 * k_max_per_lane, "route: {} experts (max {})",
           n_experts, 32 * k_max_per_lane);
  FT_CHECK(top_k > 0 && top_k <= 32 && top_k <= n_experts, "route: top_k {} of {} experts", top_k,
           n_experts);
  FT_CHECK(local.begin >= 0 && local.count >= 0 && local.begin + local.count <= n_experts,
           "route: local experts {}+{} of {}", local.begin, local.count, n_experts);
  if (n == 0) return;
  const dim3 block(32, k_warps);
  launch_kernel(route_kernel, dim3(static_cast<unsigned>((n + k_warps - 1) / k_warps)), block, 0,
                logits, n, static_cast<int>(n_experts), static_cast<int>(top_k), renormalize, ids,
                weights, local);
}

}  // namespace ft::cuda
