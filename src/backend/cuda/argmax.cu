// argmax_rows: the index of each row's largest value, as the host's argmax (engine/sampler.cpp):
// the lowest index on ties, NaN never chosen unless it is the row's first value (then 0). A
// greedy decode step reads back one int per token instead of its logits row (~600 KB at a
// 152k vocabulary) and skips the host's scan.
#include <cstdint>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft::cuda {

namespace {
constexpr int k_threads = 1024;
constexpr int k_batch = 4;  // float4 loads a thread has in flight

struct Best {
  float v;
  int32_t i;  // INT32_MAX: nothing seen (every value NaN)
};

// a before b: larger, or equal and lower index (NaN never reaches a Best).
__device__ __forceinline__ bool better(Best a, Best b) {
  return a.v > b.v || (a.v == b.v && a.i < b.i);
}

// The running best takes value v at index i (indices ascending within a thread): -inf counts
// when nothing was seen yet, so a row of -inf answers its first index.
__device__ __forceinline__ void take(Best& b, float v, int32_t i) {
  if (v > b.v || (v == b.v && b.i == INT32_MAX)) b = {v, i};
}

__device__ __forceinline__ Best warp_best(Best b) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const Best other{__shfl_xor_sync(0xffffffffu, b.v, o), __shfl_xor_sync(0xffffffffu, b.i, o)};
    if (better(other, b)) b = other;
  }
  return b;
}

// ---- kernels
// A block per row: float4 loads when the row is 16-byte aligned, k_batch in flight per thread;
// a thread's values arrive in ascending index order within each of its vectors and batches.
__global__ void __launch_bounds__(k_threads)
    argmax_kernel(const float* __restrict__ x, int64_t cols, int32_t* __restrict__ out) {
  __shared__ Best part[k_threads / 32];
  pdl_wait();
  pdl_trigger();
  const float* row = x + blockIdx.x * cols;
  Best b{-INFINITY, INT32_MAX};
  const int64_t head = (reinterpret_cast<uintptr_t>(row) % 16) ? cols : 0;  // unaligned: scalar
  const int64_t n4 = (cols - head) / 4;
  const float4* r4 = reinterpret_cast<const float4*>(row);
  for (int64_t j0 = threadIdx.x; j0 < n4; j0 += int64_t{k_threads} * k_batch) {
    float4 v[k_batch];
#pragma unroll
    for (int u = 0; u < k_batch; ++u) {
      const int64_t j = j0 + int64_t{u} * k_threads;
      v[u] = j < n4 ? __ldcg(r4 + j) : make_float4(NAN, NAN, NAN, NAN);
    }
#pragma unroll
    for (int u = 0; u < k_batch; ++u) {
      const auto i = static_cast<int32_t>(4 * (j0 + int64_t{u} * k_threads));
      take(b, v[u].x, i), take(b, v[u].y, i + 1), take(b, v[u].z, i + 2), take(b, v[u].w, i + 3);
    }
  }
  for (int64_t i = 4 * n4 + threadIdx.x; i < cols; i += k_threads)
    take(b, __ldcg(row + i), static_cast<int32_t>(i));
  b = warp_best(b);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) part[warp] = b;
  __syncthreads();
  if (warp != 0) return;
  b = part[lane];
  b = warp_best(b);
  if (lane == 0) out[blockIdx.x] = isnan(row[0]) || b.i == INT32_MAX ? 0 : b.i;
}
}  // namespace

// ---- launcher
void argmax_rows(const float* x, int64_t rows, int64_t cols, int32_t* out) {
  FT_CHECK(rows >= 0 && cols > 0 && cols <= INT32_MAX, "argmax_rows: bad shape [{}, {}]", rows,
           cols);
  if (rows == 0) return;
  launch_kernel(argmax_kernel, dim3(static_cast<unsigned>(rows)), dim3(k_threads), 0, x, cols, out);
}

}  // namespace ft::cuda
