// qk_rope_store: per-head q/k rmsnorm + rotary embedding + K/V cache store in one launch, one
// warp per (token, head); the head is staged in shared memory so rotation pairs can cross
// lanes. Same arithmetic as rmsnorm.cu and rope.cu, in the same order.
#include <cuda_bf16.h>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft::cuda {

namespace {
constexpr int k_warps = 8;
constexpr int k_max_head = 256;

// Element d of a cache row of f32 or bf16 (round to nearest even).
__device__ __forceinline__ void store_kv(void* row, int64_t d, float x, bool bf16) {
  if (bf16)
    static_cast<__nv_bfloat16*>(row)[d] = __float2bfloat16_rn(x);
  else
    static_cast<float*>(row)[d] = x;
}

// ---- kernels
// Units per token: n_heads q heads, then n_kv_heads k heads, then n_kv_heads v heads.
__global__ void __launch_bounds__(32 * k_warps) qk_rope_kernel(const __grid_constant__ QkRopeArgs a) {
  __shared__ float buf[k_warps][k_max_head];
  pdl_wait();
  pdl_trigger();
  const int64_t t = blockIdx.y;
  const int64_t unit = blockIdx.x * int64_t{k_warps} + threadIdx.y;
  const int64_t units = a.n_heads + 2 * a.n_kv_heads;
  if (unit >= units) return;
  const int lane = threadIdx.x;
  const int64_t hd = a.head_dim, kvd = a.n_kv_heads * hd, pos = a.pos[t];
  void* cache_row = nullptr;
  const bool bf16 = a.kv_dtype == DType::BF16;
  if (unit >= a.n_heads) {
    const int64_t kvh = (unit - a.n_heads) % a.n_kv_heads;
    const bool is_v = unit >= a.n_heads + a.n_kv_heads;
    const int64_t at = a.seq[t] * a.seq_stride + pos * kvd + kvh * hd;
    cache_row = bf16 ? static_cast<void*>(static_cast<__nv_bfloat16*>(is_v ? a.v_cache : a.k_cache) + at)
                     : static_cast<void*>(static_cast<float*>(is_v ? a.v_cache : a.k_cache) + at);
    if (is_v) {
      const float* src = a.v + t * kvd + kvh * hd;
      for (int64_t d = lane; d < hd; d += 32) store_kv(cache_row, d, src[d], bf16);
      return;
    }
  }
  const bool is_q = unit < a.n_heads;
  float* v = is_q ? a.q + t * a.n_heads * hd + unit * hd : a.k + t * kvd + (unit - a.n_heads) * hd;
  const float* w = is_q ? a.q_norm : a.k_norm;
  float* s = buf[threadIdx.y];
  if (w) {
    float ss = 0.f;
    for (int64_t d = lane; d < hd; d += 32) ss += v[d] * v[d];
    const float inv = rsqrtf(warp_sum(ss) / static_cast<float>(hd) + a.eps);
    for (int64_t d = lane; d < hd; d += 32) s[d] = v[d] * inv * w[d];
  } else {
    for (int64_t d = lane; d < hd; d += 32) s[d] = v[d];
  }
  __syncwarp();
  const int64_t half = a.rot_dim / 2;
  for (int64_t i = lane; i < half; i += 32) {
    const float c = a.cos[pos * half + i], sn = a.sin[pos * half + i];
    const int64_t ia = a.interleaved ? 2 * i : i, ib = a.interleaved ? 2 * i + 1 : i + half;
    const float x1 = s[ia], x2 = s[ib];
    v[ia] = x1 * c - x2 * sn;
    v[ib] = x2 * c + x1 * sn;
    if (cache_row) store_kv(cache_row, ia, v[ia], bf16), store_kv(cache_row, ib, v[ib], bf16);
  }
  for (int64_t d = a.rot_dim + lane; d < hd; d += 32) {
    v[d] = s[d];
    if (cache_row) store_kv(cache_row, d, s[d], bf16);
  }
}
}  // namespace

// ---- launcher
void qk_rope_store(const QkRopeArgs& a) {
  FT_CHECK(a.n >= 0 && a.n_heads > 0 && a.n_kv_heads > 0 && a.head_dim > 0 &&
               a.head_dim <= k_max_head && a.rot_dim > 0 && a.rot_dim % 2 == 0 &&
               a.rot_dim <= a.head_dim && a.cos && a.sin && a.pos && a.seq && a.k_cache &&
               a.v_cache && (a.kv_dtype == DType::F32 || a.kv_dtype == DType::BF16),
           "qk_rope_store: bad arguments (head_dim {}, rot_dim {})", a.head_dim, a.rot_dim);
  if (a.n == 0) return;
  const int64_t units = a.n_heads + 2 * a.n_kv_heads;
  const dim3 grid(static_cast<unsigned>((units + k_warps - 1) / k_warps),
                  static_cast<unsigned>(a.n));
  launch_kernel(qk_rope_kernel, grid, dim3(32, k_warps), 0, a);
}

}  // namespace ft::cuda
