// Recurrent-state snapshot pool: prefix hashes, budgeted LRU store.
#include "cache/state_snapshots.h"

namespace ft {

std::vector<uint64_t> prefix_hashes(std::span<const int32_t> tokens) {
  std::vector<uint64_t> out(tokens.size() + 1);
  uint64_t h = 0x9e3779b97f4a7c15ull;
  out[0] = h;
  for (size_t i = 0; i < tokens.size(); ++i) {  // splitmix64 over (h, token)
    uint64_t z = h ^ (static_cast<uint64_t>(static_cast<uint32_t>(tokens[i])) +
                      0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2));
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    h = z ^ (z >> 31);
    out[i + 1] = h;
  }
  return out;
}

SnapshotPool::SnapshotPool(size_t budget_bytes, int32_t n_slots)
    : budget_(budget_bytes), n_slots_(n_slots) {
  for (int32_t i = n_slots - 1; i >= 0; --i) free_slots_.push_back(i);
}

bool SnapshotPool::put(int64_t pos, uint64_t hash, std::span<const float> data, int32_t slot) {
  const size_t need = data.size() * sizeof(float);
  auto old = map_.find({pos, hash});
  if (old != map_.end()) erase(old);
  if (need > budget_) {
    if (slot >= 0) free_slots_.push_back(slot);
    return false;
  }
  evict_to(budget_ - need);
  Snapshot& s = map_[{pos, hash}];
  s.pos = pos;
  s.hash = hash;
  s.data.assign(data.begin(), data.end());
  s.last_use = ++tick_;
  s.slot = slot;
  bytes_ += need;
  ++stored_;
  return true;
}

void SnapshotPool::add_spilled(Snapshot& s, std::vector<float> state) {
  const size_t added = state.size() * sizeof(float);
  state.insert(state.end(), s.data.begin(), s.data.end());
  s.data = std::move(state);
  bytes_ += added;
  ++spilled_;
  evict_to(budget_);
}

void SnapshotPool::erase(std::map<std::pair<int64_t, uint64_t>, Snapshot>::iterator it) {
  bytes_ -= it->second.data.size() * sizeof(float);
  if (it->second.slot >= 0) free_slots_.push_back(it->second.slot);
  map_.erase(it);
}

bool SnapshotPool::touch(int64_t pos, uint64_t hash) {
  auto it = map_.find({pos, hash});
  if (it == map_.end()) return false;
  it->second.last_use = ++tick_;
  return true;
}

void SnapshotPool::evict_to(size_t bytes) {
  while (bytes_ > bytes && !map_.empty()) {
    auto lru = map_.begin();
    for (auto it = map_.begin(); it != map_.end(); ++it)
      if (it->second.last_use < lru->second.last_use) lru = it;
    erase(lru);
    ++evicted_;
  }
}

void SnapshotPool::set_budget(size_t bytes) {
  budget_ = bytes;
  evict_to(bytes);
}

void SnapshotPool::clear() {
  while (!map_.empty()) erase(map_.begin());
}

SnapshotPool::Stats SnapshotPool::stats() const {
  return {.count = static_cast<int64_t>(map_.size()),
          .stored = stored_,
          .evicted = evicted_,
          .hits = hits_,
          .bytes = bytes_,
          .budget = budget_,
          .device = n_slots_ - static_cast<int64_t>(free_slots_.size()),
          .device_slots = n_slots_,
          .spilled = spilled_};
}

}  // namespace ft
