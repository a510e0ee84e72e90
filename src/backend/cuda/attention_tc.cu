// attention (tensor cores): flash-style causal GQA prefill on TF32 tensor cores (WMMA) with a
// 3-pass split (a = hi + lo, a*b ~ hi*hi + hi*lo + lo*hi) so scores and outputs keep fp32-like
// accuracy. A block takes 64 queries of one head (4 warps x 16 rows); 64-key K/V tiles are
// staged in shared memory; each warp keeps its rows' running max/sum and its output tile in
// shared memory, rescaling rows there between the S = QK^T and O += PV products.
#include <mma.h>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft::cuda {

namespace {
using namespace nvcuda;

constexpr int k_tc_warps = 4, k_bq = 16 * k_tc_warps, k_bk = 64, k_sp = k_bk + 4;

using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major>;
using FragBc = wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::col_major>;
using FragBr = wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 8, float>;

template <typename F>
__device__ __forceinline__ void split(const F& f, F& hi, F& lo) {
#pragma unroll
  for (int i = 0; i < f.num_elements; ++i) {
    const float h = wmma::__float_to_tf32(f.x[i]);
    hi.x[i] = h;
    lo.x[i] = wmma::__float_to_tf32(f.x[i] - h);
  }
}

template <int HD>
constexpr int hdp() {
  return HD + 4;
}

template <int HD>
size_t tc_smem_bytes() {
  return sizeof(float) * (3 * k_bq * hdp<HD>() + k_bq * k_sp + k_bq * hdp<HD>());
}

// ---- kernels
template <int HD>
__global__ void __launch_bounds__(32 * k_tc_warps)
    attention_tc_kernel(const __grid_constant__ AttentionArgs a) {
  constexpr int P = hdp<HD>();
  extern __shared__ float4 smem4[];
  float* qs = reinterpret_cast<float*>(smem4);  // [k_bq][P]
  float* ks = qs + k_bq * P;                    // [k_bk][P]
  float* vs = ks + k_bk * P;                    // [k_bk][P]
  float* ss = vs + k_bk * P;                    // [k_bq][k_sp]
  float* os = ss + k_bq * k_sp;                 // [k_bq][P]
  const int64_t h = blockIdx.y, g = h / (a.n_heads / a.n_kv_heads);
  const int64_t kv_dim = a.n_kv_heads * HD, q_dim = a.n_heads * HD;
  const int64_t t0 = blockIdx.x * int64_t{k_bq};
  const int64_t t_end = min(t0 + k_bq, a.n_tokens);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  constexpr int V4 = HD / 4;
  for (int i = tid; i < k_bq * V4; i += 32 * k_tc_warps) {
    const int r = i / V4, c = (i % V4) * 4;
    const int64_t t = t0 + r;
    const float4 v = t < a.n_tokens ? *reinterpret_cast<const float4*>(a.q + t * q_dim + h * HD + c)
                                    : make_float4(0.f, 0.f, 0.f, 0.f);
    *reinterpret_cast<float4*>(qs + r * P + c) = v;
    *reinterpret_cast<float4*>(os + r * P + c) = make_float4(0.f, 0.f, 0.f, 0.f);
  }
  // This lane's row (of the warp's 16) and half of the columns.
  const int row = warp * 16 + (lane >> 1), half = lane & 1;
  const int64_t qpos = a.pos0 + t0 + row;
  float m = -INFINITY, l = 0.f;
  float* srow = ss + row * k_sp;
  float* orow = os + row * P;
  const float* qw = qs + warp * 16 * P;
  float* sw = ss + warp * 16 * k_sp;
  float* ow = os + warp * 16 * P;
  const int64_t n_keys = a.pos0 + t_end;
  for (int64_t kt = 0; kt < n_keys; kt += k_bk) {
    __syncthreads();  // the previous K/V tile is consumed (and Q/O are staged)
    for (int i = tid; i < k_bk * V4; i += 32 * k_tc_warps) {
      const int r = i / V4, c = (i % V4) * 4;
      const int64_t key = kt + r;
      float4 kv = make_float4(0.f, 0.f, 0.f, 0.f), vv = kv;
      if (key < n_keys) {
        kv = *reinterpret_cast<const float4*>(static_cast<const float*>(a.k_cache) + key * kv_dim +
                                              g * HD + c);
        vv = *reinterpret_cast<const float4*>(static_cast<const float*>(a.v_cache) + key * kv_dim +
                                              g * HD + c);
      }
      *reinterpret_cast<float4*>(ks + r * P + c) = kv;
      *reinterpret_cast<float4*>(vs + r * P + c) = vv;
    }
    __syncthreads();
    if (kt > a.pos0 + t0 + warp * 16 + 15) continue;  // every key after this warp's rows
    // S = Q K^T for the warp's 16 rows x 64 keys.
    FragC sc[k_bk / 16];
#pragma unroll
    for (int j = 0; j < k_bk / 16; ++j) wmma::fill_fragment(sc[j], 0.f);
#pragma unroll 2
    for (int d = 0; d < HD; d += 8) {
      FragA qa, qh, ql;
      wmma::load_matrix_sync(qa, qw + d, P);
      split(qa, qh, ql);
#pragma unroll
      for (int j = 0; j < k_bk / 16; ++j) {
        FragBc kb, kh, kl;
        wmma::load_matrix_sync(kb, ks + j * 16 * P + d, P);
        split(kb, kh, kl);
        wmma::mma_sync(sc[j], ql, kh, sc[j]);
        wmma::mma_sync(sc[j], qh, kl, sc[j]);
        wmma::mma_sync(sc[j], qh, kh, sc[j]);
      }
    }
#pragma unroll
    for (int j = 0; j < k_bk / 16; ++j)
      wmma::store_matrix_sync(sw + j * 16, sc[j], k_sp, wmma::mem_row_major);
    __syncwarp();
    // Online softmax on this lane's half row; P replaces S, O rows are rescaled.
    float mx = -INFINITY;
    for (int c = half * 32; c < half * 32 + 32; ++c) {
      const int64_t key = kt + c;
      const float s = key <= qpos && key < n_keys ? srow[c] * a.scale : -INFINITY;
      srow[c] = s;
      mx = fmaxf(mx, s);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    const float m_new = fmaxf(m, mx);
    const float corr = m_new == -INFINITY ? 1.f : expf(m - m_new);
    float sum = 0.f;
    for (int c = half * 32; c < half * 32 + 32; ++c) {
      const float p = srow[c] == -INFINITY ? 0.f : expf(srow[c] - m_new);
      srow[c] = p;
      sum += p;
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    l = l * corr + sum;
    m = m_new;
    for (int c = half * (HD / 2); c < (half + 1) * (HD / 2); ++c) orow[c] *= corr;
    __syncwarp();
    // O += P V.
#pragma unroll 1
    for (int dc = 0; dc < HD; dc += 16) {
      FragC oc;
      wmma::load_matrix_sync(oc, ow + dc, P, wmma::mem_row_major);
#pragma unroll 2
      for (int kk = 0; kk < k_bk; kk += 8) {
        FragA pa, ph, pl;
        FragBr vb, vh, vl;
        wmma::load_matrix_sync(pa, sw + kk, k_sp);
        wmma::load_matrix_sync(vb, vs + kk * P + dc, P);
        split(pa, ph, pl);
        split(vb, vh, vl);
        wmma::mma_sync(oc, pl, vh, oc);
        wmma::mma_sync(oc, ph, vl, oc);
        wmma::mma_sync(oc, ph, vh, oc);
      }
      wmma::store_matrix_sync(ow + dc, oc, P, wmma::mem_row_major);
    }
    __syncwarp();
  }
  const int64_t t = t0 + row;
  if (t < a.n_tokens) {
    const float inv = 1.f / l;
    float* out = a.out + t * q_dim + h * HD;
    for (int c = half * (HD / 2); c < (half + 1) * (HD / 2); ++c) out[c] = orow[c] * inv;
  }
}

template <int HD>
void launch_tc(const AttentionArgs& a) {
  const size_t smem = tc_smem_bytes<HD>();
  CUDA_CHECK(cudaFuncSetAttribute(attention_tc_kernel<HD>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(smem)));
  const dim3 grid(static_cast<unsigned>((a.n_tokens + k_bq - 1) / k_bq),
                  static_cast<unsigned>(a.n_heads));
  attention_tc_kernel<HD><<<grid, 32 * k_tc_warps, smem, stream()>>>(a);
  CUDA_CHECK_LAUNCH();
}
}  // namespace

// Head dims 64 and 128 whose tiles fit the device's shared memory (149 KiB at 128: not on
// consumer GPUs' 99 KiB a block, which then take the tiled kernel).
bool attention_tensor_supported(int64_t head_dim) {
  if (head_dim == 64) return smem_fits(attention_tc_kernel<64>, tc_smem_bytes<64>());
  if (head_dim == 128) return smem_fits(attention_tc_kernel<128>, tc_smem_bytes<128>());
  return false;
}

// ---- launcher (called by attention() for AttentionKernel::TENSOR)
void attention_tensor(const AttentionArgs& a) {
  FT_CHECK(attention_tensor_supported(a.head_dim) && !a.pos && !a.seq,
           "attention: the tensor-core kernel needs head_dim 64 or 128 that fit shared memory (got "
           "{})",
           a.head_dim);
  FT_CHECK(reinterpret_cast<uintptr_t>(a.q) % 16 == 0 &&
               reinterpret_cast<uintptr_t>(a.k_cache) % 16 == 0 &&
               reinterpret_cast<uintptr_t>(a.v_cache) % 16 == 0,
           "attention: unaligned q/k/v for the tensor-core kernel");
  if (a.n_tokens == 0) return;
  if (a.head_dim == 64)
    launch_tc<64>(a);
  else
    launch_tc<128>(a);
}

}  // namespace ft::cuda
