// qk_rope_store: per-head q/k rmsnorm + rotary embedding + K/V cache store in one launch, one
// warp per (token, head); the head is staged in shared memory so rotation pairs can cross
// lanes. Same arithmetic as rmsnorm.cu and rope.cu, in the same order (qk_rope.cuh, shared with
// attention_decode.cu's fused decode path).
#include <cuda_bf16.h>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/qk_rope.cuh"

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
// Units per token: n_heads q heads, then n_kv_heads k heads, then n_kv_heads v heads. The norm
// weights, position, sequence and cos/sin rows are loaded before the dependency wait; after it,
// the head's values in one round of loads (qk_rope.cuh does the norm and the rotation).
__global__ void __launch_bounds__(32 * k_warps)
    qk_rope_kernel(const __grid_constant__ QkRopeArgs a) {
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
  head_norm_weights(valid ? w : nullptr, hd, wr);  // immutable: loaded before the wait
  // pos / seq are host copies made before a pass's first kernel (the runtime never writes them
  // from a kernel), so they and the cos/sin rows are read before the wait too.
  const int64_t pos = valid ? a.pos[t] : 0, sq = valid ? a.seq[t] : 0;
  float cs[C], sn[C];
  rope_cos_sin(a.cos, a.sin, pos, a.rot_dim, valid && !is_v, cs, sn);
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
  head_norm_rope(val, wr, w != nullptr, a.eps, hd, a.rot_dim, a.interleaved, cs, sn,
                 buf[threadIdx.y], [&](int64_t d, float x) {
                   v[d] = x;
                   if (cache_row) store_kv(cache_row, d, x, bf16);
                 });
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
