// route_token: softmax + top-k (+ renormalisation) of one token's router logits by one warp,
// shared by route.cu's kernel and the router GEMV's fused tail (matmul.cu). Expert e lives in
// lane e % 32, register slot e / 32 (PER slots per lane, compile time: a round of the top-k
// scans only the slots that can hold experts); top-k is k rounds of a warp argmax, each two
// redux.sync (sm_80+): the max of order-preserving uint keys of the probabilities, then the
// lowest expert index among the lanes holding it (ties -> lowest index, as the CPU).
#pragma once
#include "backend/cuda/common.cuh"

namespace ft::cuda {

constexpr int k_route_max_per_lane = 16;  // n_experts <= 512

// Order-preserving uint of a float (a < b <=> key(a) < key(b), -0 below +0): for redux.sync.
__device__ __forceinline__ unsigned float_key(float f) {
  const unsigned u = __float_as_uint(f);
  return u & 0x80000000u ? ~u : u | 0x80000000u;
}
__device__ __forceinline__ float key_float(unsigned k) {
  return __uint_as_float(k & 0x80000000u ? k & 0x7fffffffu : ~k);
}

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
  unsigned mk = 0;  // below every float's key
#pragma unroll
  for (int j = 0; j < k_max_per_lane; ++j) {
    const int e = lane + 32 * j;
    p[j] = e < n_experts ? __ldcg(l + e) : -INFINITY;  // L2: may come from other blocks
    mk = max(mk, float_key(p[j]));
  }
  const float mx = key_float(__reduce_max_sync(0xffffffffu, mk));  // the max, exactly
  float sum = 0.f;
#pragma unroll
  for (int j = 0; j < k_max_per_lane; ++j) {
    const int e = lane + 32 * j;
    p[j] = e < n_experts ? expf(p[j] - mx) : -1.f;  // -1: not an expert
    if (e < n_experts) sum += p[j];
  }
  sum = warp_sum(sum);
  // Keys of the probabilities (p >= 0: its bits + 1, monotone; 0: not an expert / taken).
  unsigned key[k_max_per_lane];
#pragma unroll
  for (int j = 0; j < k_max_per_lane; ++j)
    key[j] = p[j] >= 0.f ? __float_as_uint(p[j] / sum) + 1u : 0u;  // a division, as the CPU
  // Round k's winner is known to every lane (two redux.sync); lane k keeps it, and the
  // renormalising sum runs in top-k order in every lane, as the CPU adds. One store per lane at
  // the end: no global write is read back.
  int32_t my_id = -1;
  float my_w = 0.f, s = 0.f;
  for (int k = 0; k < top_k; ++k) {
    // This lane's best (first slot wins ties: j ascending means e ascending).
    unsigned bk = 0;
    int bj = 0;
#pragma unroll
    for (int j = 0; j < k_max_per_lane; ++j)
      if (key[j] > bk) bk = key[j], bj = j;
    const unsigned top = __reduce_max_sync(0xffffffffu, bk);
    // The lowest expert index among the lanes whose best is the max.
    const int bi = static_cast<int>(__reduce_min_sync(
        0xffffffffu, bk == top ? static_cast<unsigned>(lane + 32 * bj) : 0xffffffffu));
    const float bv = __uint_as_float(top - 1u);
    if ((bi & 31) == lane) {
#pragma unroll
      for (int j = 0; j < k_max_per_lane; ++j)
        if (j == (bi >> 5)) key[j] = 0u;
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
