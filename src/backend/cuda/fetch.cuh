// copy_fetched: the body of the miss copy (fetch.cu) — experts fetch[0..n) of one layer from
// mapped pinned host memory into their VRAM slots over PCIe (zero-copy reads, 16-byte vectors
// when U is uint4, several loads in flight per thread) — for any grid that calls it: the copy
// kernel, and the experts' gate/up kernel when it fetches its layer's misses itself (then
// grid_sync before any block reads a slot).
#pragma once

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft::cuda {

constexpr int k_fetch_unroll = 4;

// Thread `thread` of `threads` copies its units. Per fetched expert the three matrices' units
// run back to back: gate [0, n0), up [n0, n0 + n1), down after (per-matrix sizes: mixed
// formats).
template <typename U>
__device__ __forceinline__ void copy_fetched(const FetchArgs& a, int n_fetch, int64_t thread,
                                             int64_t threads) {
  int64_t n[3], st[3];
#pragma unroll
  for (int m = 0; m < 3; ++m) {
    const size_t b = a.bytes[m] ? a.bytes[m] : a.matrix_bytes;
    n[m] = static_cast<int64_t>(b / sizeof(U));
    st[m] = static_cast<int64_t>(a.dst_stride[m] ? a.dst_stride[m] : b);
  }
  const int64_t per = n[0] + n[1] + n[2];  // units per expert
  const int64_t total = int64_t{n_fetch} * per;
  for (int64_t u0 = thread; u0 < total; u0 += threads * k_fetch_unroll) {
    U v[k_fetch_unroll];
    U* dst[k_fetch_unroll];
#pragma unroll
    for (int j = 0; j < k_fetch_unroll; ++j) {
      const int64_t u = u0 + j * threads;
      dst[j] = nullptr;
      if (u >= total) continue;
      const int64_t f = u / per, r = u % per;
      const int m = r < n[0] ? 0 : r < n[0] + n[1] ? 1 : 2;
      const int64_t i = r - (m > 0 ? n[0] : 0) - (m > 1 ? n[1] : 0);
      const int64_t e = a.fetch[f], slot = a.fetch_slot[f];
      const char* src = m == 0 ? a.gate_src : m == 1 ? a.up_src : a.down_src;
      char* d = m == 0 ? a.gate_dst : m == 1 ? a.up_dst : a.down_dst;
      v[j] = reinterpret_cast<const U*>(src + e * n[m] * int64_t{sizeof(U)})[i];
      dst[j] = reinterpret_cast<U*>(d + slot * st[m]) + i;
    }
#pragma unroll
    for (int j = 0; j < k_fetch_unroll; ++j)
      if (dst[j]) *dst[j] = v[j];
  }
}

// Every block of a grid that is resident at once (a one-wave grid) meets here, once all of
// them arrive; every global write before it is visible to every block after it. bar[0] counts
// the arrivals, bar[1] is the generation; the last block to arrive zeroes the count and bumps
// the generation, so the words serve the next grid of any size. A wait past ~10 s traps (a
// launch error for the step) rather than hang the device.
__device__ __forceinline__ void grid_sync(uint32_t* bar) {
  __syncthreads();
  if (threadIdx.x == 0 && threadIdx.y == 0) {
    const uint32_t gen = *reinterpret_cast<volatile uint32_t*>(bar + 1);  // before arriving
    __threadfence();  // the block's writes (ordered by the barrier above) before the arrival
    if (atomicAdd(bar, 1u) == gridDim.x * gridDim.y * gridDim.z - 1) {
      bar[0] = 0;
      __threadfence();
      atomicAdd(bar + 1, 1u);
    } else {
      uint32_t now = gen;
      for (long long spin = 0; now == gen; ++spin) {
        if (spin > (1ll << 27)) __trap();
        __nanosleep(64);
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(now) : "l"(bar + 1) : "memory");
      }
    }
    __threadfence();
  }
  __syncthreads();
}

// Whether copy_fetched<uint4> copies a's experts: every matrix and stride a multiple of 16
// bytes (else byte copies). Such stacks must start 16-byte aligned (fails otherwise).
inline bool fetch_vectorizable(const FetchArgs& a) {
  bool vec = a.matrix_bytes % 16 == 0;
  for (int m = 0; m < 3; ++m) vec = vec && a.bytes[m] % 16 == 0 && a.dst_stride[m] % 16 == 0;
  for (const void* p : {static_cast<const void*>(a.gate_src), static_cast<const void*>(a.up_src),
                        static_cast<const void*>(a.down_src), static_cast<const void*>(a.gate_dst),
                        static_cast<const void*>(a.up_dst), static_cast<const void*>(a.down_dst)})
    FT_CHECK(!vec || reinterpret_cast<uintptr_t>(p) % 16 == 0, "fetch_experts: unaligned stack");
  return vec;
}

}  // namespace ft::cuda
