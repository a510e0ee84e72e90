// Prefix cache for the CPU engine: a radix tree of KV pages shared across requests plus
// recurrent-state snapshots at anchors. A new sequence copies the longest usable cached prefix
// into its KVCache (restore) and prefills only the rest; finished prefixes are recorded (save).
// Attention-only families resume at any whole page or snapshot; hybrid (DeltaNet) families only
// at a snapshot, since their recurrent state cannot be rewound.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "cache/kv_pages.h"
#include "cache/radix_cache.h"
#include "cache/state_snapshots.h"
#include "model/transformer.h"

namespace ft {

struct PrefixCacheOptions {
  int64_t page_tokens = 16;
  int64_t kv_pages = 1024;              // pool size in pages
  size_t snapshot_bytes = 64ull << 20;  // snapshot pool budget
};

struct PrefixCacheStats {
  int64_t page_tokens = 0, pages_total = 0, pages_used = 0, tree_nodes = 0;
  int64_t evicted_pages = 0;
  int64_t snapshots = 0, snapshot_evictions = 0;
  size_t kv_bytes = 0, snapshot_bytes = 0, snapshot_budget = 0;
  int64_t lookups = 0, hit_tokens = 0;  // restores and the tokens they loaded, since start
};

class PrefixCache {
 public:
  PrefixCache(const ModelConfig& c, PrefixCacheOptions o);

  // Copies the longest usable cached prefix of prompt into kv (positions 0..n, at most
  // prompt.size() - 1 so the last token still yields logits) and returns n; the caller
  // prefills prompt[n..) at pos0 = n.
  int64_t restore(std::span<const int32_t> prompt, KVCache& kv);
  // Records the first n tokens held by kv (n == kv.recurrent_len): their whole pages go into
  // the radix tree (evicting LRU leaves when the pool is full) and, when snapshot is set, the
  // state at n goes into the snapshot pool.
  void save(std::span<const int32_t> tokens, int64_t n, const KVCache& kv, bool snapshot);

  PrefixCacheStats stats() const;
  // Live resize between steps (no restore/save in flight): the page pool to kv_pages (shrink
  // evicts LRU leaves, then compacts; locked pages are never dropped) and/or the snapshot pool
  // to snapshot_bytes; -1 keeps a pool. Throws ft::Error when the locked pages do not fit, and
  // OutOfMemory when the new block cannot be allocated; nothing changes then.
  void resize(int64_t kv_pages, int64_t snapshot_bytes);
  // Bytes of the largest snapshot (all recurrent state plus a page's tail of KV): the unit of
  // the "state" pool.
  size_t snapshot_unit_bytes() const;
  size_t page_bytes() const { return pool_.page_bytes(); }
  void check_invariants() const;  // aborts on leaked or doubly-held pages
  bool hybrid() const { return c_.has_delta(); }
  int64_t page_tokens() const { return pool_.page_tokens(); }

 private:
  void copy_pages_in(std::span<const int32_t> pages, int64_t n, KVCache& kv) const;
  void save_snapshot(std::span<const int32_t> tokens, int64_t n, const KVCache& kv);

  const ModelConfig& c_;
  std::vector<int64_t> attn_layers_;  // model layer of each attention slot
  std::vector<int64_t> delta_layers_;
  KvPagePool pool_;
  RadixCache tree_;
  SnapshotPool snaps_;
  int64_t lookups_ = 0, hit_tokens_ = 0;
};

}  // namespace ft
