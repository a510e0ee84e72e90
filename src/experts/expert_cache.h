// The expert slot cache policy: one pool of S slots shared by every MoE layer (flat id =
// layer * E + expert), timestamp LRU, the current step's experts protected from eviction.
// This is the host reference; the GPU bookkeeping kernels must make the same decisions.
//
// Thrash resistance: when the LRU victim was itself used within the last `window` steps (one
// step per MoE layer of a pass: a decode token's experts do not all fit), plain LRU would
// evict every expert before its next use and miss on everything. Such a fetch is inserted on
// probation instead (bimodal insertion): protected for its own step, then the first victim,
// so the next misses reuse its slot and the rest of the cache stays put and keeps hitting.
// Every k_promote_every-th of them is inserted as most recently used, so the kept set follows
// a shifting routing, and a probationary expert that hits becomes an ordinary one. Steps of
// more than k_probation_max_active distinct experts (extends, prefill through the cache)
// insert as LRU does, and slots last used at or before such a step count as old; when a pass's
// experts fit (slots > window * ids per step) the victim is never recent: plain LRU.
// base/slot_rank.h holds the rule, shared with the device.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace ft {

struct ExpertCacheStats {
  int64_t lookups = 0, hits = 0, misses = 0, evictions = 0;
  int64_t probation = 0;  // fetches inserted on probation (thrash resistance)
  double hit_rate() const { return lookups ? static_cast<double>(hits) / lookups : 0.0; }
};

// One decision for a layer's step: where each active expert lives and what must be copied.
struct EnsurePlan {
  std::vector<int32_t> slot_of;   // per active expert (input order): its slot, or -1 (CPU)
  std::vector<int32_t> fetch;     // experts to copy host -> slot (subset of the misses)
  std::vector<int32_t> fetch_slot;  // destination slot of each fetch
  std::vector<int32_t> cpu;       // misses left to the CPU (not fetched)
};

class ExpertCache {
 public:
  // slots >= n_experts (one layer must fit). Ids of n_layers layers of n_experts each; window:
  // the steps of one pass (its MoE layers; <= 0: n_layers).
  ExpertCache(int64_t n_layers, int64_t n_experts, int64_t slots, int64_t window = 0);

  // Decode: the distinct experts `active` of `layer` are needed this step. Hits are touched;
  // of the misses, the first `max_fetch` by priority (most recently active, then lower id) get
  // a slot (evicting an empty, probationary or else the least recently used slot not owned by
  // this step's experts; on probation when that victim is recent, see above); the rest are
  // left to the CPU. max_fetch < 0: fetch every miss.
  EnsurePlan ensure(int64_t layer, std::span<const int32_t> active, int64_t max_fetch = -1);

  // Where an expert lives, or -1.
  int32_t slot_of(int64_t layer, int32_t expert) const {
    return slot_for_id_[layer * n_experts_ + expert];
  }
  // Drops every mapping (e.g. after a resize); usage restarts.
  void reset();
  // Drops the mappings of slots [0, end) only (prefill streaming overwrites them; the rest of
  // the cache stays valid): they become the first LRU victims.
  void drop_slots(int64_t end);
  int64_t slots() const { return static_cast<int64_t>(id_of_slot_.size()); }
  const ExpertCacheStats& stats() const { return stats_; }

 private:
  int64_t n_layers_, n_experts_, window_;
  std::vector<int32_t> slot_for_id_;  // [n_layers * n_experts] -> slot or -1
  std::vector<int32_t> id_of_slot_;   // [slots] -> flat id or -1
  std::vector<int64_t> usage_;        // [slots] last step used (0 = never; < 0 probation)
  std::vector<int64_t> recency_;      // [n_layers * n_experts] last step active
  int64_t step_ = 0, thrash_ = 0;  // thrash_: victims found recent, ever
  int64_t last_large_ = 0;         // the last step of more than k_probation_max_active experts
  ExpertCacheStats stats_;
};

// The hybrid split rule: of `misses` experts, how many to fetch over PCIe so that neither the
// fetch (time ~ F * (1 - f)) nor the CPU (time ~ (misses - F) * f) is the long pole, where
// f = B_pcie / (B_pcie + B_cpu) from bandwidths measured under contention. Q16 fixed point as
// the GPU kernel computes it: F in {floor(misses * f), +1}, the one with the smaller max.
int64_t hybrid_fetch_count(int64_t misses, double f);
// f as the rule's Q16 fraction (what the device bookkeeping is given).
int64_t hybrid_q16(double f);

}  // namespace ft
