// L2 prefetch of a later launch's weights (L2Prefetch, cuda_ops.h) from inside a decode kernel
// that leaves HBM idle or underused, so the reader finds them in L2.
#pragma once
#include <stdint.h>

#include "backend/cuda/cuda_ops.h"

namespace ft::cuda {

// Block `part` of `parts` prefetches its share of every range of pf (thread (0, 0) issues one
// cp.async.bulk.prefetch.L2 per range: no registers held, the copy engine walks the bytes).
// Shares are whole 256-byte pieces inside the range's 16-byte-aligned interior. sm_90+ only.
__device__ __forceinline__ void l2_prefetch_share(const L2Prefetch& pf, int64_t part,
                                                  int64_t parts) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (threadIdx.x != 0 || threadIdx.y != 0 || threadIdx.z != 0) return;
#pragma unroll
  for (int i = 0; i < L2Prefetch::k_ranges; ++i) {
    if (!pf.p[i]) continue;
    const uint64_t b = reinterpret_cast<uint64_t>(pf.p[i]);
    const uint64_t lo = (b + 15) & ~uint64_t{15}, hi = (b + pf.bytes[i]) & ~uint64_t{15};
    if (hi <= lo) continue;
    const uint64_t share = ((hi - lo + parts - 1) / parts + 255) & ~uint64_t{255};
    const uint64_t s = lo + share * part;
    const uint64_t e = min(hi, s + min(share, uint64_t{1} << 30));
    if (s < e)
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(s),
                   "r"(static_cast<uint32_t>(e - s))
                   : "memory");
  }
#endif
}

}  // namespace ft::cuda
