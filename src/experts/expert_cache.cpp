// ExpertCache: LRU slot assignment with per-step protection and thrash-resistant insertion,
// and the hybrid fetch split.
#include "experts/expert_cache.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "base/q_split.h"
#include "base/slot_rank.h"

namespace ft {

ExpertCache::ExpertCache(int64_t n_layers, int64_t n_experts, int64_t slots, int64_t window)
    : n_layers_(n_layers), n_experts_(n_experts), window_(window > 0 ? window : n_layers),
      slot_for_id_(n_layers * n_experts, -1), id_of_slot_(slots, -1), usage_(slots, 0),
      recency_(n_layers * n_experts, 0) {
  if (slots < n_experts)
    fail("the expert cache needs at least {} slots (one layer's experts), got {}", n_experts,
         slots);
}

void ExpertCache::reset() {
  std::fill(slot_for_id_.begin(), slot_for_id_.end(), -1);
  std::fill(id_of_slot_.begin(), id_of_slot_.end(), -1);
  std::fill(usage_.begin(), usage_.end(), 0);
}

void ExpertCache::drop_slots(int64_t end) {
  end = std::min(end, slots());
  for (int64_t s = 0; s < end; ++s) {
    if (id_of_slot_[s] >= 0) slot_for_id_[id_of_slot_[s]] = -1;
    id_of_slot_[s] = -1;
    usage_[s] = 0;
  }
}

EnsurePlan ExpertCache::ensure(int64_t layer, std::span<const int32_t> active, int64_t max_fetch) {
  FT_CHECK(layer >= 0 && layer < n_layers_, "layer {}", layer);
  ++step_;
  if (std::ssize(active) > k_probation_max_active) last_large_ = step_;  // no probation now
  EnsurePlan plan;
  plan.slot_of.assign(active.size(), -1);
  const int64_t base = layer * n_experts_;
  std::vector<char> owned(id_of_slot_.size(), 0);  // slots this step must keep
  std::vector<size_t> miss_idx;
  for (size_t i = 0; i < active.size(); ++i) {
    FT_CHECK(active[i] >= 0 && active[i] < n_experts_, "expert {}", active[i]);
    const int32_t s = slot_for_id_[base + active[i]];
    ++stats_.lookups;
    if (s >= 0) {
      ++stats_.hits;
      usage_[s] = step_;
      owned[s] = 1;
      plan.slot_of[i] = s;
    } else {
      ++stats_.misses;
      miss_idx.push_back(i);
    }
  }
  // Fetch priority: most recently active first, then lower id.
  std::sort(miss_idx.begin(), miss_idx.end(), [&](size_t a, size_t b) {
    const int64_t ra = recency_[base + active[a]], rb = recency_[base + active[b]];
    return ra != rb ? ra > rb : active[a] < active[b];
  });
  const size_t n_fetch = max_fetch < 0 ? miss_idx.size()
                                       : std::min<size_t>(miss_idx.size(), max_fetch);
  for (size_t m = 0; m < miss_idx.size(); ++m) {
    const size_t i = miss_idx[m];
    if (m >= n_fetch) {
      plan.cpu.push_back(active[i]);
      continue;
    }
    // Victim: the lowest rank (empty, probationary, least recently used) of the slots not
    // owned this step, the highest index on ties: a fresh or dropped cache fills from the top,
    // so the prefill buffers [0, 2E), which the next prefill overwrites, are the last free
    // slots taken.
    int32_t victim = -1;
    for (size_t s = 0; s < usage_.size(); ++s)
      if (!owned[s] && (victim < 0 || slot_rank(usage_[s]) <= slot_rank(usage_[victim])))
        victim = static_cast<int32_t>(s);
    FT_CHECK(victim >= 0, "no evictable slot: {} slots for {} active experts", usage_.size(),
             active.size());
    if (id_of_slot_[victim] >= 0) {
      slot_for_id_[id_of_slot_[victim]] = -1;
      ++stats_.evictions;
    }
    id_of_slot_[victim] = static_cast<int32_t>(base + active[i]);
    slot_for_id_[base + active[i]] = victim;
    // A recent victim (used or put on probation within the window, after the last large
    // step): LRU is cycling.
    const bool probation =
        insert_on_probation(usage_[victim], step_, window_, last_large_, thrash_);
    stats_.probation += probation;
    usage_[victim] = probation ? probation_usage(step_) : step_;
    owned[victim] = 1;
    plan.slot_of[i] = victim;
    plan.fetch.push_back(active[i]);
    plan.fetch_slot.push_back(victim);
  }
  for (int32_t e : active) recency_[base + e] = step_;
  return plan;
}

int64_t hybrid_fetch_count(int64_t misses, double f) {
  return hybrid_fetch_count_q16(misses, hybrid_q16(f));
}

int64_t hybrid_q16(double f) {
  return static_cast<int64_t>(std::llround(std::clamp(f, 0.0, 1.0) * k_q16_one));
}

}  // namespace ft
