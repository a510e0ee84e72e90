// The q* split rule in Q16 fixed point, shared by the host expert cache
// (experts/expert_cache.cpp) and the device bookkeeping (backend/cuda/slot_cache.cu) so both
// make the same decision: of `misses` experts, fetch F over PCIe and leave the rest to the CPU,
// F in {floor(misses * q / 2^16), +1}, whichever makes max(F (2^16 - q), (misses - F) q) -- the
// slower of the fetch and the CPU -- smaller. q = round(f 2^16), f = B_pcie / (B_pcie + B_cpu).
#pragma once
#include <cstdint>

namespace ft {

constexpr int64_t k_q16_one = int64_t{1} << 16;

// The slower side of fetching F of `misses` and leaving the rest to the CPU (scaled by 2^16).
constexpr int64_t hybrid_split_cost_q16(int64_t F, int64_t misses, int64_t q) {
  const int64_t fetch = F * (k_q16_one - q), cpu = (misses - F) * q;
  return fetch > cpu ? fetch : cpu;
}

constexpr int64_t hybrid_fetch_count_q16(int64_t misses, int64_t q) {
  if (misses <= 0) return 0;
  const int64_t lo = (misses * q) >> 16, hi = lo + 1;
  const bool up =
      hi <= misses && hybrid_split_cost_q16(hi, misses, q) < hybrid_split_cost_q16(lo, misses, q);
  const int64_t best = up ? hi : lo;
  return best < misses ? best : misses;
}

}  // namespace ft
