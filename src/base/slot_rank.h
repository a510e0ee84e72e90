// The expert slot cache's victim order and thrash rule, shared by the host expert cache
// (experts/expert_cache.cpp) and the device bookkeeping (backend/cuda/slot_cache.cuh) so both
// make the same decisions. A slot's usage: 0 empty, > 0 the step it was last used, -1 an
// admission copy in flight (device HYBRID only), < -1 on probation since step -(usage + 2).
#pragma once
#include <cstdint>

namespace ft {

// Every k_promote_every-th fetch that finds a recent victim is inserted as most recently used
// instead of on probation, so the kept set follows a shifting routing.
constexpr int64_t k_promote_every = 32;

// Probation is for decode's passes, which cycle through the same layers token after token. A
// step of more distinct experts (an extend or a prefill through the cache: up to 128 at
// Qwen3's 16 tokens x top-8) touches mostly one-off experts, and keeping the pass's first
// layers instead of its last would cost the decode that follows its warm cache: such a step
// inserts as LRU does, and a slot last used at or before it is no sign of cycling either
// (`after`: the last such step), so the decode right after a long pass is plain LRU too.
constexpr int64_t k_probation_max_active = 32;

constexpr int64_t probation_usage(int64_t step) { return -(step + 2); }

// Not used by this step's experts and not awaiting an admission copy.
constexpr bool slot_evictable(int64_t usage, int64_t step) {
  return usage == 0 || (usage > 0 && usage != step) ||
         (usage < -1 && usage != probation_usage(step));
}

// Victims go lowest rank first (then the highest slot index): empty, probationary, least
// recently used.
constexpr int64_t slot_rank(int64_t usage) { return usage == 0 ? 0 : usage < 0 ? 1 : usage + 1; }

// A victim used (or put on probation) within the last `window` steps and after step `after`:
// LRU is cycling.
constexpr bool slot_recent(int64_t usage, int64_t step, int64_t window, int64_t after) {
  const int64_t used = usage < -1 ? -(usage + 2) : usage;
  return usage != 0 && usage != -1 && used > step - window && used > after;
}

// Whether a fetch whose victim slot had `usage` goes in on probation: the victim is recent,
// and this is not every k_promote_every-th such fetch (`thrash` counts them; T: the host's
// int64_t or the device's shared long long).
template <class T>
constexpr bool insert_on_probation(int64_t usage, int64_t step, int64_t window, int64_t after,
                                   T& thrash) {
  return slot_recent(usage, step, window, after) &&
         thrash++ % k_promote_every != k_promote_every - 1;
}

}  // namespace ft
