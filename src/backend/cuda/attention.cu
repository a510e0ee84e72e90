// attention: causal GQA over the KV cache, one block per (token, head). Each warp takes every
// k_warps-th key with an online softmax (running max, sum, and a lane-strided accumulator of
// head_dim), then the warps' partial results are merged through shared memory. The same
// kernel serves decode and prefill (a tiled flash-style prefill kernel is the next step).
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft::cuda {

namespace {
constexpr int k_warps = 4;

// ---- kernels
// DPL: head dims per lane (head_dim <= 32 * DPL).
template <int DPL>
__global__ void __launch_bounds__(32 * k_warps)
    attention_kernel(const __grid_constant__ AttentionArgs a) {
  const int64_t h = blockIdx.x, t = blockIdx.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t hd = a.head_dim, g = h / (a.n_heads / a.n_kv_heads);
  const int64_t kv_dim = a.n_kv_heads * hd, q_dim = a.n_heads * hd;
  const int64_t len = a.pos0 + t + 1;  // causal: keys 0..pos inclusive
  const float* q = a.q + t * q_dim + h * hd;
  float qr[DPL], acc[DPL];
#pragma unroll
  for (int j = 0; j < DPL; ++j) {
    const int64_t d = lane + 32 * j;
    qr[j] = d < hd ? q[d] : 0.f;
    acc[j] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  for (int64_t key = warp; key < len; key += k_warps) {
    const float* k = a.k_cache + key * kv_dim + g * hd;
    const float* v = a.v_cache + key * kv_dim + g * hd;
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < DPL; ++j) {
      const int64_t d = lane + 32 * j;
      if (d < hd) s += qr[j] * k[d];
    }
    s = warp_sum(s) * a.scale;
    const float m_new = fmaxf(m, s);
    const float corr = expf(m - m_new), p = expf(s - m_new);
    l = l * corr + p;
#pragma unroll
    for (int j = 0; j < DPL; ++j) {
      const int64_t d = lane + 32 * j;
      acc[j] = acc[j] * corr + (d < hd ? p * v[d] : 0.f);
    }
    m = m_new;
  }
  __shared__ float s_m[k_warps], s_l[k_warps], s_acc[k_warps][32 * DPL];
  if (lane == 0) s_m[warp] = m, s_l[warp] = l;
#pragma unroll
  for (int j = 0; j < DPL; ++j) s_acc[warp][lane + 32 * j] = acc[j];
  __syncthreads();
  if (warp != 0) return;
  float mx = -INFINITY;
#pragma unroll
  for (int w = 0; w < k_warps; ++w) mx = fmaxf(mx, s_m[w]);
  float f[k_warps], sum = 0.f;
#pragma unroll
  for (int w = 0; w < k_warps; ++w) {
    f[w] = s_m[w] == -INFINITY ? 0.f : expf(s_m[w] - mx);  // a warp that saw no key
    sum += s_l[w] * f[w];
  }
  const float inv = 1.f / sum;
  float* out = a.out + t * q_dim + h * hd;
#pragma unroll
  for (int j = 0; j < DPL; ++j) {
    const int64_t d = lane + 32 * j;
    if (d >= hd) continue;
    float o = 0.f;
#pragma unroll
    for (int w = 0; w < k_warps; ++w) o += s_acc[w][d] * f[w];
    out[d] = o * inv;
  }
}
}  // namespace

// ---- launcher
void attention(const AttentionArgs& a) {
  FT_CHECK(a.n_tokens >= 0 && a.pos0 >= 0 && a.n_heads > 0 && a.n_kv_heads > 0 &&
               a.n_heads % a.n_kv_heads == 0 && a.head_dim > 0 && a.head_dim <= 256,
           "attention: bad shape (heads {}, kv heads {}, head_dim {})", a.n_heads, a.n_kv_heads,
           a.head_dim);
  if (a.n_tokens == 0) return;
  const dim3 grid(static_cast<unsigned>(a.n_heads), static_cast<unsigned>(a.n_tokens));
  const int threads = 32 * k_warps;
  if (a.head_dim <= 32)
    attention_kernel<1><<<grid, threads>>>(a);
  else if (a.head_dim <= 64)
    attention_kernel<2><<<grid, threads>>>(a);
  else if (a.head_dim <= 128)
    attention_kernel<4><<<grid, threads>>>(a);
  else
    attention_kernel<8><<<grid, threads>>>(a);
  CUDA_CHECK_LAUNCH();
}

}  // namespace ft::cuda
