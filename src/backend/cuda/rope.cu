// rope: rotary embedding in place, one thread per (token, head, pair), from cos/sin tables
// computed on the host exactly as model/rope.cpp does (so GPU and CPU rotate identically).
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft::cuda {

namespace {
// ---- kernels
__global__ void rope_kernel(const __grid_constant__ RopeArgs a) {
  const int64_t half = a.rot_dim / 2;
  const int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (idx >= a.n * a.n_heads * half) return;
  const int64_t i = idx % half, th = idx / half;  // th = t * n_heads + h
  const int64_t t = th / a.n_heads;
  const int64_t pos = a.pos0 + t;
  const float c = a.cos[pos * half + i], s = a.sin[pos * half + i];
  float* v = a.x + th * a.head_dim;
  const int64_t ia = a.interleaved ? 2 * i : i, ib = a.interleaved ? 2 * i + 1 : i + half;
  const float x1 = v[ia], x2 = v[ib];
  v[ia] = x1 * c - x2 * s;
  v[ib] = x2 * c + x1 * s;
}
}  // namespace

// ---- launcher
void rope(const RopeArgs& a) {
  FT_CHECK(a.n >= 0 && a.n_heads > 0 && a.rot_dim > 0 && a.rot_dim % 2 == 0 &&
               a.rot_dim <= a.head_dim && a.pos0 >= 0 && a.cos && a.sin,
           "rope: bad arguments (rot_dim {}, head_dim {})", a.rot_dim, a.head_dim);
  const int64_t total = a.n * a.n_heads * (a.rot_dim / 2);
  if (total == 0) return;
  rope_kernel<<<static_cast<unsigned>((total + 255) / 256), 256, 0, stream()>>>(a);
  CUDA_CHECK_LAUNCH();
}

}  // namespace ft::cuda
