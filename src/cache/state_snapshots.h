// Recurrent-state snapshot pool: copies of a sequence's state (DeltaNet conv + ssm and the KV
// of the last partial page) after the first pos tokens of a prefix, keyed by (pos, 64-bit hash
// of those tokens), under a byte budget with LRU eviction. Two tiers: host RAM (data holds
// everything), and optionally n_slots device slots owned by the runner (a snapshot holding a
// slot keeps its recurrent state there and only the KV tail in data); when every slot is taken
// the least recently used device snapshot spills its state to the host tier.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <utility>
#include <vector>

namespace ft {

// Hash chain over a token prefix: out[i] hashes tokens[0..i) (out[0] is the empty prefix).
std::vector<uint64_t> prefix_hashes(std::span<const int32_t> tokens);

class SnapshotPool {
 public:
  struct Snapshot {
    int64_t pos;
    uint64_t hash;
    std::vector<float> data;
    uint64_t last_use = 0;
    int32_t slot = -1;  // device slot holding the recurrent state, or -1 (host tier)
  };
  struct Stats {
    int64_t count = 0, stored = 0, evicted = 0, hits = 0;
    size_t bytes = 0, budget = 0;
    int64_t device = 0, device_slots = 0, spilled = 0;  // device-tier snapshots, slots, spills
  };

  explicit SnapshotPool(size_t budget_bytes, int32_t n_slots = 0);

  // Stores a copy of data for the prefix (pos, hash), replacing an older copy, after evicting
  // least recently used snapshots to make room. slot (from take_slot) moves into the entry.
  // False (nothing stored; the slot is given back) when data alone exceeds the budget.
  bool put(int64_t pos, uint64_t hash, std::span<const float> data, int32_t slot = -1);
  // A free device slot, or -1 without slots. When all are taken, the least recently used
  // device snapshot spills: spill(slot, state) must fill state with the slot's contents, which
  // go in front of its data (host tier), and its slot is returned.
  template <class Spill>
  int32_t take_slot(Spill spill);
  // The deepest snapshot at a position p <= max_pos with hash == hashes[p] and accept(p) true,
  // marked used; nullptr when none.
  template <class Accept>
  const Snapshot* deepest(std::span<const uint64_t> hashes, int64_t max_pos, Accept accept);
  bool contains(int64_t pos, uint64_t hash) const { return map_.count({pos, hash}) > 0; }
  // Marks a stored snapshot used (a prefill passed its anchor again); false if absent.
  bool touch(int64_t pos, uint64_t hash);
  // Shrinks or grows the budget, evicting LRU snapshots to fit.
  void set_budget(size_t bytes);
  void clear();
  Stats stats() const;

 private:
  void evict_to(size_t bytes);
  void erase(std::map<std::pair<int64_t, uint64_t>, Snapshot>::iterator it);
  void add_spilled(Snapshot& s, std::vector<float> state);

  size_t budget_, bytes_ = 0;
  uint64_t tick_ = 0;
  int64_t stored_ = 0, evicted_ = 0, hits_ = 0, spilled_ = 0, n_slots_ = 0;
  std::vector<int32_t> free_slots_;
  std::map<std::pair<int64_t, uint64_t>, Snapshot> map_;  // ordered by position
};

template <class Spill>
int32_t SnapshotPool::take_slot(Spill spill) {
  if (n_slots_ == 0) return -1;
  if (free_slots_.empty()) {
    Snapshot* lru = nullptr;
    for (auto& [key, s] : map_)
      if (s.slot >= 0 && (!lru || s.last_use < lru->last_use)) lru = &s;
    if (!lru) return -1;  // every slot is out with a caller
    const int32_t slot = lru->slot;
    std::vector<float> state;
    spill(slot, state);
    lru->slot = -1;
    add_spilled(*lru, std::move(state));  // may evict host snapshots, lru itself included
    return slot;
  }
  const int32_t slot = free_slots_.back();
  free_slots_.pop_back();
  return slot;
}

template <class Accept>
const SnapshotPool::Snapshot* SnapshotPool::deepest(std::span<const uint64_t> hashes,
                                                    int64_t max_pos, Accept accept) {
  auto it = map_.upper_bound({max_pos, UINT64_MAX});
  while (it != map_.begin()) {
    --it;
    Snapshot& s = it->second;
    if (s.pos < static_cast<int64_t>(hashes.size()) && hashes[s.pos] == s.hash && accept(s.pos)) {
      s.last_use = ++tick_;
      ++hits_;
      return &s;
    }
  }
  return nullptr;
}

}  // namespace ft
