// route_token: softmax + top-k (+ renormalisation) of one token's router logits by one warp,
// shared by route.cu's kernel and the router GEMV's fused tail (matmul.cu). Expert e lives in
// lane e % 32, register slot e / 32 (PER slots per lane, compile time: a round of the top-k
// scans only the slots that can hold experts); top-k is k rounds of a warp argmax.
#pragma once
#include "backend/cuda/common.cuh"

namespace ft::cuda {

constexpr int k_route_max_per_lane = 16;  // n_experts <= 512

// ids[0..top_k) / weights[0..top_k) of logits l[0..n_experts), called by all 32 lanes of a warp;
// n_experts <= 32 * PER. local_n > 0 (tensor-parallel whole-expert shards): ids in
// [local0, local0 + local_n) are written as id - local0, the others as -1 (after renormalising).
template <int PER>
__device__ __forceinline__ void route_token_per(const float* l, int n_experts, int top_k,
                                                bool renormalize, int32_t* ids, float* weights,
                                                int local0, int local_n) {
  constexpr int k_max_per_lane = PER;
  const int lane = threadIdx.x & 31;
  float p[k_max_per_lane];
  float mx = -INFINITY;
#pragma unroll
  for (int j = 0; j < k_max_per_lane; ++j) {
    const int e = lane + 32 * j;
    p[j] = e < n_experts ? __ldcg(l + e) : -INFINITY;  // L2: may come from other blocks
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
  // Round k's winner is known to every lane (xor butterfly); lane k keeps it, and the
  // renormalising sum runs in top-k order in every lane, as the CPU adds. One store per lane at
  // the end: no global write is read back.
  int32_t my_id = -1;
  float my_w = 0.f, s = 0.f;
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
    if (lane == k) my_id = bi, my_w = bv;
    s += bv;
  }
  if (lane < top_k) {
    if (renormalize) my_w /= s;
    if (local_n > 0) {
      const int e = my_id - local0;
      my_id = e >= 0 && e < local_n ? e : -1;
    }
    ids[lane] = my_id;
    weights[lane] = my_w;
  }
}

// route_token_per with the fewest slots per lane that hold n_experts (a uniform branch).
__device__ __forceinline__ void route_token(const float* l, int n_experts, int top_k,
                                            bool renormalize, int32_t* ids, float* weights,
                                            int local0 = 0, int local_n = 0) {
  if (n_experts <= 32 * 4)
    route_token_per<4>(l, n_experts, top_k, renormalize, ids, weights, local0, local_n);
  else if (n_experts <= 32 * 8)
    route_token_per<8>(l, n_experts, top_k, renormalize, ids, weights, local0, local_n);
  else
    route_token_per<k_route_max_per_lane>(l, n_experts, top_k, renormalize, ids, weights, local0,
                                          local_n);
}

}  // namespace ft::cuda
