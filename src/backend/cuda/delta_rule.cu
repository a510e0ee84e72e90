// gated_delta_rule: the Gated DeltaNet recurrence per step and value head. The columns of S
// [k_dim, v_dim] evolve independently (column j needs only (S^T k)_j, (S^T q)_j and k.q), so a
// block of 128 threads owns 32 columns, 4 threads per column each holding k_dim / 4 rows in
// registers; the state is read once and written once per step, tokens run in order. Same math
// as ops/delta_net.cpp's recurrent form.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft::cuda {

namespace {
constexpr int k_threads = 128;
constexpr int k_cols = k_threads / 4;  // columns per block

// ---- kernels
// Block (column block, value head h, token t); only blocks whose t starts a step run, over the
// step's tokens. R: state rows per thread (k_dim <= 4 R).
template <int R>
__global__ void __launch_bounds__(k_threads) delta_rule_kernel(const __grid_constant__ DeltaRuleArgs a) {
  pdl_wait();
  pdl_trigger();
  const int64_t t0 = blockIdx.z;
  const int32_t s = a.seq[t0];
  if (t0 > 0 && a.seq[t0 - 1] == s) return;
  const int64_t h = blockIdx.y, kh = h / (a.n_v_heads / a.n_k_heads);
  const int64_t dk = a.k_dim, dv = a.v_dim, nv = a.n_v_heads;
  const int slice = threadIdx.x & 3;
  const int64_t col = blockIdx.x * int64_t{k_cols} + (threadIdx.x >> 2);
  const bool active = col < dv;
  float* S = a.state + s * a.seq_stride + h * dk * dv;
  float st[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t i = slice * R + r;
    st[r] = active && i < dk ? S[i * dv + col] : 0.f;
  }
  for (int64_t t = t0; t < a.n && a.seq[t] == s; ++t) {
    const float* q = a.q + t * a.qkv_stride + kh * dk;
    const float* k = a.k + t * a.qkv_stride + kh * dk;
    float kr[R];
    float sk = 0.f, sq = 0.f, kq = 0.f;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int64_t i = slice * R + r;
      kr[r] = i < dk ? k[i] : 0.f;
      const float qq = i < dk ? q[i] : 0.f;
      sk += st[r] * kr[r];
      sq += st[r] * qq;
      kq += kr[r] * qq;
    }
#pragma unroll
    for (int o = 1; o <= 2; o <<= 1) {
      sk += __shfl_xor_sync(0xffffffffu, sk, o);
      sq += __shfl_xor_sync(0xffffffffu, sq, o);
      kq += __shfl_xor_sync(0xffffffffu, kq, o);
    }
    const float decay = expf(a.g[t * nv + h]), beta = a.beta[t * nv + h];
    const float v = active ? a.v[t * a.qkv_stride + h * dv + col] : 0.f;
    const float delta = beta * (v - decay * sk);
    if (active && slice == 0) a.out[(t * nv + h) * dv + col] = decay * sq + kq * delta;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      st[r] += (decay - 1.f) * st[r];
      st[r] += kr[r] * delta;
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t i = slice * R + r;
    if (active && i < dk) S[i * dv + col] = st[r];
  }
}

template <int R>
void launch(const DeltaRuleArgs& a) {
  const dim3 grid(static_cast<unsigned>((a.v_dim + k_cols - 1) / k_cols),
                  static_cast<unsigned>(a.n_v_heads), static_cast<unsigned>(a.n));
  launch_kernel(delta_rule_kernel<R>, grid, dim3(k_threads), 0, a);
}
}  // namespace

// ---- launcher
void gated_delta_rule(const DeltaRuleArgs& a) {
  FT_CHECK(a.n >= 0 && a.n_k_heads > 0 && a.n_v_heads % a.n_k_heads == 0 && a.k_dim > 0 &&
               a.k_dim <= 128 && a.v_dim > 0 && a.q && a.k && a.v && a.g && a.beta && a.state &&
               a.seq && a.out,
           "gated_delta_rule: bad arguments (heads {} / {}, k_dim {})", a.n_v_heads, a.n_k_heads,
           a.k_dim);
  if (a.n == 0) return;
  if (a.k_dim <= 16)
    launch<4>(a);
  else if (a.k_dim <= 32)
    launch<8>(a);
  else if (a.k_dim <= 64)
    launch<16>(a);
  else
    launch<32>(a);
}

}  // namespace ft::cuda
