// The q* split rule in Q16 fixed point, shared by the host expert cache
// (experts/expert_cache.cpp) and the device bookkeeping (backend/cuda/slot_cache.cu) so both
// make the same decision: of `misses` experts, fetch F over PCIe and leave the rest to the CPU,
// F in {floor(misses * q / 2^16), +1}, whichever makes max(F (2^16 - q), (misses - F) q) -- the
// slower of the fetch and the CPU -- smaller. q = round(f 2^16), f = B_pcie / (B_pcie + B_cpu).
#pragma once
#include <cstdint>

namespace ft {

constexpr int64_t k_q16_one = int64_t{1} << 16;

constexpr int64_t hybrid_fetch_count_q16(int64_t misses, int64_t q) {
  if (misses <= 0) return 0;
  const int64_t lo = (misses * q) >> 16;
  const int64_t c0 = (lo * (k_q16_one - q)) > ((misses - lo) * q) ? lo * (k_q16_one - q)
                                                                    : (misses - lo) * q;
  const int64_t hi = lo + 1;
  const int64_t c1 = (hi * (k_q16_one - q)) > ((misses - hi) * q) ? hi * (k_q16_one - q)
                                                                    : (misses - hi) * q;
  const int64_t best = hi <= misses && c1 < c0 ? hi : lo;
  return best < misses ? best : misses;
}

}  // namespace ft
