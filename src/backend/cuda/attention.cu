// attention: causal GQA over the KV cache with online softmax, fp32 throughout.
// Per-token kernel (decode): one block per (token, head), each token at its own position and
// sequence when pos/seq arrays are given; each warp scores k_dec_keys keys per iteration
// (their loads in flight together) and keeps a running max, sum and lane-strided head_dim
// accumulator; the warps' partial results are merged through shared memory.
// Tiled kernel (prefill): one block per (k_q_tile queries, head); K/V tiles of k_k_tile keys
// are staged in shared memory once for all the block's queries; a warp owns k_q_per_warp
// queries, lane j scores key j of the tile, and p_j is broadcast by shuffle into the
// lane-strided accumulators.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft::cuda {

namespace {
constexpr int k_warps = 4;

constexpr int k_dec_warps = 16;  // per-token kernel: warps per (token, head)
// Keys a warp scores per iteration (their K and V loads in flight together), by head dims
// per lane: as many as fit the registers of a 512-thread block.
template <int DPL>
constexpr int k_dec_keys = DPL <= 4 ? 8 : 4;

// ---- kernels
// DPL: head dims per lane (head_dim <= 32 * DPL).
template <int DPL>
__global__ void __launch_bounds__(32 * k_dec_warps)
    attention_kernel(const __grid_constant__ AttentionArgs a) {
  pdl_wait();
  pdl_trigger();
  const int64_t h = blockIdx.x, t = blockIdx.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t hd = a.head_dim, g = h / (a.n_heads / a.n_kv_heads);
  const int64_t kv_dim = a.n_kv_heads * hd, q_dim = a.n_heads * hd;
  const int64_t len = (a.pos ? a.pos[t] : a.pos0 + t) + 1;  // causal: keys 0..pos inclusive
  const int64_t cache0 = a.seq ? a.seq[t] * a.seq_stride : 0;
  const float* q = a.q + t * q_dim + h * hd;
  float qr[DPL], acc[DPL];
#pragma unroll
  for (int j = 0; j < DPL; ++j) {
    const int64_t d = lane + 32 * j;
    qr[j] = d < hd ? q[d] : 0.f;
    acc[j] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  const float* kb = static_cast<const float*>(a.k_cache) + cache0 + g * hd;
  const float* vb = static_cast<const float*>(a.v_cache) + cache0 + g * hd;
  for (int64_t key0 = int64_t{warp} * k_dec_keys<DPL>; key0 < len;
       key0 += int64_t{k_dec_warps} * k_dec_keys<DPL>) {
    float s[k_dec_keys<DPL>], vr[k_dec_keys<DPL>][DPL];  // V rows loaded with K: one round trip
#pragma unroll
    for (int u = 0; u < k_dec_keys<DPL>; ++u) {
      s[u] = 0.f;
      const bool in = key0 + u < len;
      const float* k = kb + (key0 + u) * kv_dim;
      const float* v = vb + (key0 + u) * kv_dim;
#pragma unroll
      for (int j = 0; j < DPL; ++j) {
        const int64_t d = lane + 32 * j;
        const bool ok = in && d < hd;
        vr[u][j] = ok ? v[d] : 0.f;
        if (ok) s[u] += qr[j] * k[d];
      }
    }
    float m_new = m;
#pragma unroll
    for (int u = 0; u < k_dec_keys<DPL>; ++u) {
      s[u] = warp_sum(s[u]) * a.scale;
      if (key0 + u < len) m_new = fmaxf(m_new, s[u]);
    }
    const float corr = expf(m - m_new);
    float p[k_dec_keys<DPL>];
    l *= corr;
#pragma unroll
    for (int u = 0; u < k_dec_keys<DPL>; ++u) {
      p[u] = key0 + u < len ? expf(s[u] - m_new) : 0.f;
      l += p[u];
    }
#pragma unroll
    for (int j = 0; j < DPL; ++j) {
      float o = acc[j] * corr;
#pragma unroll
      for (int u = 0; u < k_dec_keys<DPL>; ++u) o += p[u] * vr[u][j];
      acc[j] = o;
    }
    m = m_new;
  }
  __shared__ float s_m[k_dec_warps], s_l[k_dec_warps], s_acc[k_dec_warps][32 * DPL];
  if (lane == 0) s_m[warp] = m, s_l[warp] = l;
#pragma unroll
  for (int j = 0; j < DPL; ++j) s_acc[warp][lane + 32 * j] = acc[j];
  __syncthreads();
  if (warp != 0) return;
  float mx = -INFINITY;
#pragma unroll
  for (int w = 0; w < k_dec_warps; ++w) mx = fmaxf(mx, s_m[w]);
  float f[k_dec_warps], sum = 0.f;
#pragma unroll
  for (int w = 0; w < k_dec_warps; ++w) {
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
    for (int w = 0; w < k_dec_warps; ++w) o += s_acc[w][d] * f[w];
    out[d] = o * inv;
  }
}
constexpr int k_q_per_warp = 4, k_q_tile = k_warps * k_q_per_warp, k_k_tile = 32;

// Shared memory: q [k_q_tile][hd], k [k_k_tile][hd + 1] (padded: lane j reads row j), v
// [k_k_tile][hd].
size_t tiled_smem_bytes(int64_t hd) {
  return sizeof(float) * (k_q_tile * hd + k_k_tile * (hd + 1) + k_k_tile * hd);
}

template <int DPL>
__global__ void __launch_bounds__(32 * k_warps)
    attention_tiled_kernel(const __grid_constant__ AttentionArgs a) {
  extern __shared__ float smem[];
  const int64_t hd = a.head_dim, h = blockIdx.y, g = h / (a.n_heads / a.n_kv_heads);
  const int64_t kv_dim = a.n_kv_heads * hd, q_dim = a.n_heads * hd;
  const int64_t t0 = blockIdx.x * int64_t{k_q_tile};
  const int64_t t_end = min(t0 + k_q_tile, a.n_tokens);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float* q_s = smem;
  float* k_s = q_s + k_q_tile * hd;
  float* v_s = k_s + k_k_tile * (hd + 1);
  for (int64_t i = threadIdx.x; i < k_q_tile * hd; i += blockDim.x) {
    const int64_t t = t0 + i / hd;
    q_s[i] = t < a.n_tokens ? a.q[t * q_dim + h * hd + i % hd] : 0.f;
  }
  float m[k_q_per_warp], l[k_q_per_warp], acc[k_q_per_warp][DPL];
#pragma unroll
  for (int qi = 0; qi < k_q_per_warp; ++qi) {
    m[qi] = -INFINITY, l[qi] = 0.f;
#pragma unroll
    for (int j = 0; j < DPL; ++j) acc[qi][j] = 0.f;
  }
  const int64_t n_keys = a.pos0 + t_end;  // keys 0..pos of the block's last query
  for (int64_t kt = 0; kt < n_keys; kt += k_k_tile) {
    __syncthreads();  // the previous tile is consumed
    for (int64_t i = threadIdx.x; i < k_k_tile * hd; i += blockDim.x) {
      const int64_t j = i / hd, d = i % hd, key = kt + j;
      const bool in = key < n_keys;
      k_s[j * (hd + 1) + d] = in ? static_cast<const float*>(a.k_cache)[key * kv_dim + g * hd + d] : 0.f;
      v_s[j * hd + d] = in ? static_cast<const float*>(a.v_cache)[key * kv_dim + g * hd + d] : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int qi = 0; qi < k_q_per_warp; ++qi) {
      const int qrow = warp * k_q_per_warp + qi;
      const int64_t t = t0 + qrow, pos = a.pos0 + t;
      if (t >= a.n_tokens || kt > pos) continue;  // warp-uniform
      const int64_t key = kt + lane;
      float s = -INFINITY;
      if (key <= pos) {
        const float* qv = q_s + qrow * hd;
        const float* kv = k_s + lane * (hd + 1);
        float dot = 0.f;
        for (int64_t d = 0; d < hd; ++d) dot += qv[d] * kv[d];
        s = dot * a.scale;
      }
      float tile_max = s;
#pragma unroll
      for (int o = 16; o > 0; o >>= 1)
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, o));
      const float m_new = fmaxf(m[qi], tile_max);  // finite: key kt <= pos is in the tile
      const float corr = expf(m[qi] - m_new);
      const float p = key <= pos ? expf(s - m_new) : 0.f;
      l[qi] = l[qi] * corr + warp_sum(p);
      m[qi] = m_new;
#pragma unroll
      for (int j = 0; j < DPL; ++j) acc[qi][j] *= corr;
      for (int jj = 0; jj < k_k_tile; ++jj) {
        const float pj = __shfl_sync(0xffffffffu, p, jj);
        const float* vr = v_s + jj * hd;
#pragma unroll
        for (int j = 0; j < DPL; ++j) {
          const int64_t d = lane + 32 * j;
          if (d < hd) acc[qi][j] += pj * vr[d];
        }
      }
    }
  }
#pragma unroll
  for (int qi = 0; qi < k_q_per_warp; ++qi) {
    const int64_t t = t0 + warp * k_q_per_warp + qi;
    if (t >= a.n_tokens) continue;
    const float inv = 1.f / l[qi];
    float* out = a.out + t * q_dim + h * hd;
#pragma unroll
    for (int j = 0; j < DPL; ++j) {
      const int64_t d = lane + 32 * j;
      if (d < hd) out[d] = acc[qi][j] * inv;
    }
  }
}

template <int DPL>
void launch_tiled(const AttentionArgs& a) {
  const size_t smem = tiled_smem_bytes(a.head_dim);
  if (smem > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(attention_tiled_kernel<DPL>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(smem)));
  const dim3 grid(static_cast<unsigned>((a.n_tokens + k_q_tile - 1) / k_q_tile),
                  static_cast<unsigned>(a.n_heads));
  attention_tiled_kernel<DPL><<<grid, 32 * k_warps, smem, stream()>>>(a);
}

template <int DPL>
void launch_per_token(const AttentionArgs& a) {
  const dim3 grid(static_cast<unsigned>(a.n_heads), static_cast<unsigned>(a.n_tokens));
  launch_kernel(attention_kernel<DPL>, grid, dim3(32 * k_dec_warps), 0, a);
}

template <int DPL>
void launch(const AttentionArgs& a) {
  const bool tensor = a.kernel == AttentionKernel::TENSOR ||
                      (a.kernel == AttentionKernel::AUTO && a.n_tokens >= k_attention_tensor_min &&
                       attention_tensor_supported(a.head_dim) && !a.pos && !a.seq &&
                       reinterpret_cast<uintptr_t>(a.q) % 16 == 0);
  if (tensor) return attention_tensor(a);
  const bool tiled = a.kernel == AttentionKernel::TILED ||
                     (a.kernel == AttentionKernel::AUTO && a.n_tokens > k_gemv_max_tokens);
  FT_CHECK(!tiled || (!a.pos && !a.seq), "attention: per-token positions need PER_TOKEN");
  if (tiled)
    launch_tiled<DPL>(a);
  else
    launch_per_token<DPL>(a);
}
}  // namespace

// ---- launcher
void attention(const AttentionArgs& a) {
  FT_CHECK(a.n_tokens >= 0 && a.pos0 >= 0 && a.n_heads > 0 && a.n_kv_heads > 0 &&
               a.n_heads % a.n_kv_heads == 0 && a.head_dim > 0 && a.head_dim <= 256,
           "attention: bad shape (heads {}, kv heads {}, head_dim {})", a.n_heads, a.n_kv_heads,
           a.head_dim);
  if (a.n_tokens == 0) return;
  if (a.rope.k) return attention_decode(a);  // qk_rope_store fused: the decode kernel only
  // BF16 caches, sinks, a window or a split: attention_decode.cu (decode-sized passes; f32 or
  // head dims FLASH lacks) or attention_flash.cu.
  const bool bf16 = a.kv_dtype == DType::BF16;
  if (bf16 || a.sinks || a.window > 0 || a.split.max_splits > 0) {
    const bool decode = a.kernel == AttentionKernel::PER_TOKEN ||
                        (a.kernel == AttentionKernel::AUTO && a.n_tokens <= k_gemv_max_tokens);
    if (decode || !bf16 || !attention_flash_supported(a.head_dim)) return attention_decode(a);
    return attention_flash(a);
  }
  FT_CHECK(a.kv_dtype == DType::F32, "attention: caches must be F32 or BF16");
  if (a.head_dim <= 32)
    launch<1>(a);
  else if (a.head_dim <= 64)
    launch<2>(a);
  else if (a.head_dim <= 128)
    launch<4>(a);
  else
    launch<8>(a);
  CUDA_CHECK_LAUNCH();
}

}  // namespace ft::cuda
