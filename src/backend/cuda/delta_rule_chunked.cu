// gated_delta_rule_chunked: the Gated DeltaNet rule over chunks of 64 tokens for prefill (the
// chunked form of ops/delta_net.cpp, same math): within a chunk, with gamma_t the cumulative
// log decay since the chunk start, u_t = beta_t (v_t - e^gamma_t S0^T k_t) - sum_{s<t} beta_t
// e^(gamma_t - gamma_s) (k_t.k_s) u_s (the lower-triangular solve, by forward substitution),
// out_t = e^gamma_t S0^T q_t + sum_{s<=t} e^(gamma_t - gamma_s) (q_t.k_s) u_s and S = e^gamma_L
// S0 + sum_s e^(gamma_L - gamma_s) k_s u_s^T. The columns of S are independent, so a block owns
// 32 of them for one value head and one step, with the chunk's K, Q, its 64x64 k.k / q.k
// matrices and its 128x32 state slice in shared memory; tokens of a chunk run in parallel and
// only the substitution is sequential (per warp, over its own 4 columns).
#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft::cuda {

namespace {
constexpr int k_chunk = 64;  // tokens per chunk (C)
constexpr int k_bc = 32;     // state columns per block
constexpr int k_threads = 256;
constexpr int k_max_steps = 32;  // steps per launch (larger batches launch again)

struct ChunkedParams {
  DeltaRuleArgs a;
  int32_t start[k_max_steps + 1];  // the steps' first tokens in the pass, then the end
  int32_t n_marks;                 // in-pass captures (StateMarks), ascending
  int32_t mark_at[k_max_state_marks], mark_slot[k_max_state_marks];
  float* mark_dst;
  int64_t mark_stride;
};

// Shared floats: K and Q rows [C, dk + 1] (odd stride: row-strided reads hit distinct banks),
// the state slice [dk, 32], U and O [C, 33], the decayed k.k and q.k [C, C + 1], gamma, beta.
__host__ __device__ constexpr int64_t smem_floats(int64_t dk) {
  return 2 * k_chunk * (dk + 1) + dk * k_bc + 2 * k_chunk * (k_bc + 1) +
         2 * k_chunk * (k_chunk + 1) + 2 * k_chunk;
}

// ---- kernels
// Block (column block, value head h, step z).
__global__ void __launch_bounds__(k_threads)
    delta_chunked_kernel(const __grid_constant__ ChunkedParams p) {
  extern __shared__ float sm[];
  const DeltaRuleArgs& a = p.a;
  const int64_t dk = a.k_dim, dv = a.v_dim, nv = a.n_v_heads, KS = dk + 1;
  float* Ks = sm;
  float* Qs = Ks + k_chunk * KS;
  float* S = Qs + k_chunk * KS;
  float* U = S + dk * k_bc;
  float* O = U + k_chunk * (k_bc + 1);
  float* M = O + k_chunk * (k_bc + 1);
  float* A = M + k_chunk * (k_chunk + 1);
  float* gam = A + k_chunk * (k_chunk + 1);
  float* bet = gam + k_chunk;
  constexpr int UB = k_bc + 1, MB = k_chunk + 1;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t h = blockIdx.y, kh = h / (nv / a.n_k_heads);
  const int64_t col0 = blockIdx.x * int64_t{k_bc};
  const int64_t t_begin = p.start[blockIdx.z], t_end = p.start[blockIdx.z + 1];
  pdl_wait();
  pdl_trigger();
  const int32_t seq = a.seq[t_begin];
  float* Sg = a.state + seq * a.seq_stride + h * dk * dv;  // [dk, dv]
  for (int64_t x = tid; x < dk * k_bc; x += k_threads) {
    const int64_t i = x / k_bc, j = x % k_bc;
    S[x] = col0 + j < dv ? Sg[i * dv + col0 + j] : 0.f;
  }
  const int j = lane;  // C, E, F: this thread's column
  const bool col_ok = col0 + j < dv;
  int mi = 0;  // the next mark of this step
  while (mi < p.n_marks && p.mark_at[mi] <= t_begin) ++mi;
  for (int64_t c0 = t_begin, c1; c0 < t_end; c0 = c1) {
    c1 = min(c0 + k_chunk, t_end);  // a chunk also ends at a mark
    if (mi < p.n_marks && p.mark_at[mi] < c1) c1 = p.mark_at[mi];
    const int L = static_cast<int>(c1 - c0);
    // Load the chunk's K and Q rows (zero past L), g and beta.
    for (int64_t x = tid; x < k_chunk * dk; x += k_threads) {
      const int64_t t = x / dk, i = x % dk;
      const bool in = t < L;
      Ks[t * KS + i] = in ? a.k[(c0 + t) * a.qkv_stride + kh * dk + i] : 0.f;
      Qs[t * KS + i] = in ? a.q[(c0 + t) * a.qkv_stride + kh * dk + i] : 0.f;
    }
    if (warp == 0) {  // gamma: inclusive scan of g over the chunk, two tokens per lane
      const int t0 = 2 * lane;
      const float g0 = t0 < L ? a.g[(c0 + t0) * nv + h] : 0.f;
      const float g1 = t0 + 1 < L ? a.g[(c0 + t0 + 1) * nv + h] : 0.f;
      float run = g0 + g1;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const float y = __shfl_up_sync(0xffffffffu, run, o);
        if (lane >= o) run += y;
      }
      gam[t0] = run - g1;
      gam[t0 + 1] = run;
      bet[t0] = t0 < L ? a.beta[(c0 + t0) * nv + h] : 0.f;
      bet[t0 + 1] = t0 + 1 < L ? a.beta[(c0 + t0 + 1) * nv + h] : 0.f;
    }
    __syncthreads();
    // M[t][s] = beta_t e^(gamma_t - gamma_s) k_t.k_s (s < t), A[t][s] = e^(gamma_t - gamma_s)
    // q_t.k_s (s <= t): each thread a 4x4 tile of (t, s); tiles above the diagonal are zero.
    {
      const int tr = tid / 16, tc = tid % 16;
      float kk[4][4] = {}, qk[4][4] = {};
      if (tc <= tr) {
        for (int64_t i = 0; i < dk; ++i) {
          float kt[4], qt[4], ks[4];
#pragma unroll
          for (int x = 0; x < 4; ++x) {
            kt[x] = Ks[(tr * 4 + x) * KS + i];
            qt[x] = Qs[(tr * 4 + x) * KS + i];
            ks[x] = Ks[(tc * 4 + x) * KS + i];
          }
#pragma unroll
          for (int x = 0; x < 4; ++x)
#pragma unroll
            for (int y = 0; y < 4; ++y) {
              kk[x][y] += kt[x] * ks[y];
              qk[x][y] += qt[x] * ks[y];
            }
        }
      }
#pragma unroll
      for (int x = 0; x < 4; ++x)
#pragma unroll
        for (int y = 0; y < 4; ++y) {
          const int t = tr * 4 + x, s = tc * 4 + y;
          const float e = s <= t && t < L ? expf(gam[t] - gam[s]) : 0.f;
          M[t * MB + s] = s < t ? bet[t] * e * kk[x][y] : 0.f;
          A[t * MB + s] = e * qk[x][y];
        }
    }
    // U = beta (v - e^gamma K S0), O = e^gamma Q S0: warp w has tokens 8w..8w+7, column j.
    {
      float ku[8] = {}, qo[8] = {};
      for (int64_t i = 0; i < dk; ++i) {
        const float s = S[i * k_bc + j];
#pragma unroll
        for (int x = 0; x < 8; ++x) {
          ku[x] += Ks[(warp * 8 + x) * KS + i] * s;
          qo[x] += Qs[(warp * 8 + x) * KS + i] * s;
        }
      }
#pragma unroll
      for (int x = 0; x < 8; ++x) {
        const int t = warp * 8 + x;
        const bool in = t < L && col_ok;
        const float e = expf(gam[t]);
        const float v = in ? a.v[(c0 + t) * a.qkv_stride + h * dv + col0 + j] : 0.f;
        U[t * UB + j] = in ? bet[t] * (v - e * ku[x]) : 0.f;
        O[t * UB + j] = e * qo[x];
      }
    }
    __syncthreads();
    // Forward substitution u_t -= sum_{s<t} M[t][s] u_s: warp w owns columns 4w..4w+3, 8
    // lanes per column split the sum over s.
    {
      const int c = warp * 4 + lane / 8, r = lane & 7;
      for (int t = 1; t < L; ++t) {
        float part = 0.f;
        for (int s = r; s < t; s += 8) part += M[t * MB + s] * U[s * UB + c];
        part += __shfl_xor_sync(0xffffffffu, part, 1);
        part += __shfl_xor_sync(0xffffffffu, part, 2);
        part += __shfl_xor_sync(0xffffffffu, part, 4);
        if (r == 0) U[t * UB + c] -= part;
        __syncwarp();
      }
    }
    __syncthreads();
    // out_t = O_t + sum_{s<=t} A[t][s] u_s.
    {
      float acc[8];
#pragma unroll
      for (int x = 0; x < 8; ++x) acc[x] = O[(warp * 8 + x) * UB + j];
      const int last = min(L, warp * 8 + 8);
      for (int s = 0; s < last; ++s) {
        const float u = U[s * UB + j];
#pragma unroll
        for (int x = 0; x < 8; ++x) acc[x] += A[(warp * 8 + x) * MB + s] * u;
      }
#pragma unroll
      for (int x = 0; x < 8; ++x) {
        const int t = warp * 8 + x;
        if (t < L && col_ok) a.out[((c0 + t) * nv + h) * dv + col0 + j] = acc[x];
      }
    }
    // S = e^gamma_L S + sum_s e^(gamma_L - gamma_s) k_s u_s^T: warp w has rows w, w + 8, ...
    {
      const float gl = gam[L - 1], el = expf(gl);
      for (int64_t i0 = warp; i0 < dk; i0 += 8 * 4) {
        float acc[4];
#pragma unroll
        for (int x = 0; x < 4; ++x) {
          const int64_t i = i0 + 8 * x;
          acc[x] = i < dk ? el * S[i * k_bc + j] : 0.f;
        }
        for (int s = 0; s < L; ++s) {
          const float wu = expf(gl - gam[s]) * U[s * UB + j];
#pragma unroll
          for (int x = 0; x < 4; ++x) {
            const int64_t i = i0 + 8 * x;
            if (i < dk) acc[x] += Ks[s * KS + i] * wu;
          }
        }
#pragma unroll
        for (int x = 0; x < 4; ++x) {
          const int64_t i = i0 + 8 * x;
          if (i < dk) S[i * k_bc + j] = acc[x];
        }
      }
    }
    __syncthreads();  // the next chunk overwrites K, Q, gamma; S is complete
    if (mi < p.n_marks && p.mark_at[mi] == c1) {  // capture the state after c1 - t_begin tokens
      float* D = p.mark_dst + p.mark_slot[mi] * p.mark_stride + h * dk * dv;
      for (int64_t x = tid; x < dk * k_bc; x += k_threads) {
        const int64_t i = x / k_bc, jj = x % k_bc;
        if (col0 + jj < dv) D[i * dv + col0 + jj] = S[x];
      }
      ++mi;
    }
  }
  for (int64_t x = tid; x < dk * k_bc; x += k_threads) {
    const int64_t i = x / k_bc, jj = x % k_bc;
    if (col0 + jj < dv) Sg[i * dv + col0 + jj] = S[x];
  }
}
}  // namespace

bool gated_delta_rule_chunked_supported(int64_t k_dim) {
  return k_dim > 0 && k_dim <= 128 &&
         smem_fits(delta_chunked_kernel, static_cast<size_t>(smem_floats(k_dim)) * sizeof(float));
}

// ---- launcher
void gated_delta_rule_chunked(const DeltaRuleArgs& a, const std::vector<int64_t>& starts,
                              const StateMarks& marks) {
  FT_CHECK(a.n >= 0 && a.n_k_heads > 0 && a.n_v_heads % a.n_k_heads == 0 && a.k_dim > 0 &&
               a.k_dim <= 128 && a.v_dim > 0 && a.q && a.k && a.v && a.g && a.beta && a.state &&
               a.seq && a.out,
           "gated_delta_rule_chunked: bad arguments (heads {} / {}, k_dim {})", a.n_v_heads,
           a.n_k_heads, a.k_dim);
  FT_CHECK(!starts.empty() && starts.front() == 0 && starts.back() == a.n,
           "gated_delta_rule_chunked: steps must cover the pass's {} tokens", a.n);
  const int32_t n_marks = static_cast<int32_t>(marks.at.size());
  FT_CHECK(n_marks <= k_max_state_marks && marks.slot.size() == marks.at.size() &&
               (n_marks == 0 || marks.dst),
           "gated_delta_rule_chunked: {} marks (at most {})", n_marks, k_max_state_marks);
  for (int32_t i = 0; i < n_marks; ++i)
    FT_CHECK(marks.at[i] > 0 && marks.at[i] < a.n && (i == 0 || marks.at[i] > marks.at[i - 1]),
             "gated_delta_rule_chunked: mark {} at {} of {}", i, marks.at[i], a.n);
  if (a.n == 0) return;
  const size_t smem = static_cast<size_t>(smem_floats(a.k_dim)) * sizeof(float);
  CUDA_CHECK(cudaFuncSetAttribute(delta_chunked_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(smem)));
  const size_t steps = starts.size() - 1;
  for (size_t s0 = 0; s0 < steps; s0 += k_max_steps) {
    const size_t m = std::min<size_t>(k_max_steps, steps - s0);
    ChunkedParams p{
        .a = a, .n_marks = n_marks, .mark_dst = marks.dst, .mark_stride = marks.dst_stride};
    for (int32_t i = 0; i < n_marks; ++i)
      p.mark_at[i] = marks.at[i], p.mark_slot[i] = marks.slot[i];
    for (size_t i = 0; i <= m; ++i) {
      FT_CHECK(i == 0 || starts[s0 + i] > starts[s0 + i - 1],
               "gated_delta_rule_chunked: empty step");
      p.start[i] = static_cast<int32_t>(starts[s0 + i]);
    }
    const dim3 grid(static_cast<unsigned>((a.v_dim + k_bc - 1) / k_bc),
                    static_cast<unsigned>(a.n_v_heads), static_cast<unsigned>(m));
    launch_kernel(delta_chunked_kernel, grid, dim3(k_threads), smem, p);
  }
}

}  // namespace ft::cuda
