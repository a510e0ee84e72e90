// One head's per-head q/k rmsnorm + rotary embedding by one warp, shared by qk_rope.cu and the
// fused decode path of attention_decode.cu, so both compute the same values bit for bit. A lane
// holds dims lane + 32 j (P per lane) and rotation pairs lane + 32 j (C per lane).
#pragma once
#include "backend/cuda/common.cuh"

namespace ft::cuda {

// The head's norm weights w[0..hd) per lane (0 past hd, or all 0 when w is null). Immutable:
// callers load them before their dependency wait.
template <int P>
__device__ __forceinline__ void head_norm_weights(const float* w, int64_t hd, float (&wr)[P]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int j = 0; j < P; ++j) {
    const int64_t d = lane + 32 * j;
    wr[j] = w && d < hd ? w[d] : 0.f;
  }
}

// cos / sin of this lane's rotation pairs at position pos (0 when !on or past rot_dim / 2).
template <int C>
__device__ __forceinline__ void rope_cos_sin(const float* cos, const float* sin, int64_t pos,
                                             int64_t rot_dim, bool on, float (&cs)[C],
                                             float (&sn)[C]) {
  const int lane = threadIdx.x & 31;
  const int64_t half = rot_dim / 2;
#pragma unroll
  for (int j = 0; j < C; ++j) {
    const int64_t i = lane + 32 * j;
    const bool rot = on && i < half;
    cs[j] = rot ? cos[pos * half + i] : 0.f;
    sn[j] = rot ? sin[pos * half + i] : 0.f;
  }
}

// val (the head, 0 past hd): times rsqrt(mean square + eps) and wr when `norm` (as rmsnorm.cu),
// staged in s[0..hd) (this warp's shared memory), then the first rot_dim dims rotated (pairs
// (2i, 2i+1) when interleaved, else (i, i + rot_dim / 2), as rope.cu). out(d, x) receives every
// dim d < hd once. Explicit fmaf: the result does not depend on the compiler's contraction.
template <int P, int C, typename Out>
__device__ __forceinline__ void head_norm_rope(const float (&val)[P], const float (&wr)[P],
                                               bool norm, float eps, int64_t hd, int64_t rot_dim,
                                               bool interleaved, const float (&cs)[C],
                                               const float (&sn)[C], float* s, Out&& out) {
  const int lane = threadIdx.x & 31;
  if (norm) {
    float ss = 0.f;
#pragma unroll
    for (int j = 0; j < P; ++j) ss = fmaf(val[j], val[j], ss);
    const float inv = rsqrtf(warp_sum(ss) / static_cast<float>(hd) + eps);
#pragma unroll
    for (int j = 0; j < P; ++j)
      if (lane + 32 * j < hd) s[lane + 32 * j] = val[j] * inv * wr[j];
  } else {
#pragma unroll
    for (int j = 0; j < P; ++j)
      if (lane + 32 * j < hd) s[lane + 32 * j] = val[j];
  }
  __syncwarp();
  const int64_t half = rot_dim / 2;
#pragma unroll
  for (int j = 0; j < C; ++j) {
    const int64_t i = lane + 32 * j;
    if (i >= half) continue;
    const int64_t ia = interleaved ? 2 * i : i, ib = interleaved ? 2 * i + 1 : i + half;
    const float x1 = s[ia], x2 = s[ib];
    out(ia, fmaf(x1, cs[j], -(x2 * sn[j])));
    out(ib, fmaf(x2, cs[j], x1 * sn[j]));
  }
#pragma unroll
  for (int j = 0; j < P; ++j) {
    const int64_t d = lane + 32 * j;
    if (d >= rot_dim && d < hd) out(d, s[d]);
  }
}

}  // namespace ft::cuda
