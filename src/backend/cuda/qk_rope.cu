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
// Units per token: n_heads q heads, then n_kv_heads k heads, then n_kv_heads v heads. A lane
// holds dims lane + 32 j. The norm weights, position, sequence and cos/sin rows are loaded
// before the dependency wait; after it, the head's values in one round of loads.
__global__ void __launch_bounds__(32 * k_warps) qk_rope_kernel(const __grid_constant__ QkRopeArgs a) {
  constexpr int P = k_max_head / 32, C = k_max_head / 64;  // dims / rotation pairs per lane
  __shared__ float buf[k_warps][k_max_head];
  const int64_t t = blockIdx.y;
  const int64_t unit = blockIdx.x * int64_t{k_warps} + threadIdx.y;
  const int64_t units = a.n_heads + 2 * a.n_kv_heads;
  const int lane = threadIdx.x;
  const int64_t hd = a.head_dim, kvd = a.n_kv_heads * hd;
  const bool valid = unit < units, is_q = unit < a.n_heads;
  const bool is_v = unit >= a.n_heads + a.n_kv_heads;
  const float* w = is_q ? a.q_norm : is_v ? nullptr : a.k_norm;
  float wr[P];
#pragma unroll
  for (int j = 0; j < P; ++j) {
    const int64_t d = lane + 32 * j;
    wr[j] = valid && w && d < hd ? w[d] : 0.f;  // immutable: loaded before the wait
  }
  // pos / seq are host copies made before a pass's first kernel (the runtime never writes them
  // from a kernel), so they and the cos/sin rows are read before the wait too.
  const int64_t pos = valid ? a.pos[t] : 0, sq = valid ? a.seq[t] : 0;
  const int64_t half = a.rot_dim / 2;
  float cs[C], sn[C];
#pragma unroll
  for (int j = 0; j < C; ++j) {
    const int64_t i = lane + 32 * j;
    const bool rot = valid && !is_v && i < half;
    cs[j] = rot ? a.cos[pos * half + i] : 0.f;
    sn[j] = rot ? a.sin[pos * half + i] : 0.f;
  }
  pdl_wait();
  pdl_trigger();
  if (!valid) return;
  const int64_t kvh = is_q ? 0 : (unit - a.n_heads) % a.n_kv_heads;
  float* v = is_q ? a.q + t * a.n_heads * hd + unit * hd : a.k + t * kvd + kvh * hd;
  const float* src = is_v ? a.v + t * kvd + kvh * hd : v;
  float val[P];
#pragma unroll
  for (int j = 0; j < P; ++j) {
    const int64_t d = lane + 32 * j;
    val[j] = d < hd ? src[d] : 0.f;
  }
  const bool bf16 = a.kv_dtype == DType::BF16;
  void* cache_row = nullptr;
  if (!is_q) {
    const int64_t at = sq * a.seq_stride + pos * kvd + kvh * hd;
    void* base = is_v ? a.v_cache : a.k_cache;
    cache_row = bf16 ? static_cast<void*>(static_cast<__nv_bfloat16*>(base) + at)
                     : static_cast<void*>(static_cast<float*>(base) + at);
  }
  if (is_v) {
#pragma unroll
    for (int j = 0; j < P; ++j)
      if (lane + 32 * j < hd) store_kv(cache_row, lane + 32 * j, val[j], bf16);
    return;
  }
  float* s = buf[threadIdx.y];
  if (w) {
    float ss = 0.f;
#pragma unroll
    for (int j = 0; j < P; ++j) ss += val[j] * val[j];
    const float inv = rsqrtf(warp_sum(ss) / static_cast<float>(hd) + a.eps);
#pragma unroll
    for (int j = 0; j < P; ++j)
      if (lane + 32 * j < hd) s[lane + 32 * j] = val[j] * inv * wr[j];
  } else {
#pragma unroll
    for (int j = 0; j < P; ++j)
      if (lane + 32 * j < hd) s[lane + 32 * j] = val[j];
  }
  __syncwarp();
#pragma unroll
  for (int j = 0; j < C; ++j) {
    const int64_t i = lane + 32 * j;
    if (i >= half) continue;
    const int64_t ia = a.interleaved ? 2 * i : i, ib = a.interleaved ? 2 * i + 1 : i + half;
    const float x1 = s[ia], x2 = s[ib];
    const float ra = x1 * cs[j] - x2 * sn[j], rb = x2 * cs[j] + x1 * sn[j];
    v[ia] = ra;
    v[ib] = rb;
    if (cache_row) store_kv(cache_row, ia, ra, bf16), store_kv(cache_row, ib, rb, bf16);
  }
#pragma unroll
  for (int j = 0; j < P; ++j) {
    const int64_t d = lane + 32 * j;
    if (d < a.rot_dim || d >= hd) continue;
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
