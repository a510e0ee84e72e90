// L2 prefetch of a later launch's weights (L2Prefetch, cuda_ops.h) from inside a decode kernel
// that leaves HBM idle, so the reader finds them in L2.
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>

#include "backend/cuda/cuda_ops.h"

namespace ft::cuda {

// Bytes one bulk prefetch covers at most (its size operand is 32-bit).
constexpr uint64_t k_l2_prefetch_max = uint64_t{1} << 30;

// Part `part` of `parts` of the range [b, b + bytes): [s, e), empty when e <= s. The parts
// tile the range's 16-byte-aligned interior in order, each a whole number of 256-byte pieces
// (the last one shorter), so every address and size is 16-byte aligned and nothing outside the
// range is touched; a part longer than k_l2_prefetch_max is cut short (a hint may stop early).
// Host-callable: l2_prefetch_test checks the tiling.
struct L2Share {
  uint64_t s, e;
};
__host__ __device__ inline L2Share l2_share(uint64_t b, int64_t bytes, int64_t part,
                                            int64_t parts) {
  const uint64_t lo = (b + 15) & ~uint64_t{15};
  const uint64_t hi = (b + static_cast<uint64_t>(bytes)) & ~uint64_t{15};
  if (bytes <= 0 || parts <= 0 || hi <= lo) return {0, 0};
  const uint64_t n = static_cast<uint64_t>(parts);
  const uint64_t share = ((hi - lo + n - 1) / n + 255) & ~uint64_t{255};
  const uint64_t s = lo + share * static_cast<uint64_t>(part);
  if (s >= hi) return {0, 0};
  const uint64_t e = hi - s < share ? hi : s + share;
  return {s, e - s > k_l2_prefetch_max ? s + k_l2_prefetch_max : e};
}

// Block `part` of `parts` prefetches its share of every range of pf: thread (0, 0, 0) issues one
// cp.async.bulk.prefetch.L2 per range (no registers held, the copy engine walks the bytes).
// sm_90+ only.
__device__ __forceinline__ void l2_prefetch_share(const L2Prefetch& pf, int64_t part,
                                                  int64_t parts) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (threadIdx.x != 0 || threadIdx.y != 0 || threadIdx.z != 0) return;
#pragma unroll
  for (int i = 0; i < L2Prefetch::k_ranges; ++i) {
    if (!pf.p[i]) continue;
    const L2Share sh = l2_share(reinterpret_cast<uint64_t>(pf.p[i]), pf.bytes[i], part, parts);
    if (sh.s < sh.e)
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(sh.s),
                   "r"(static_cast<uint32_t>(sh.e - sh.s))
                   : "memory");
  }
#endif
}

}  // namespace ft::cuda
