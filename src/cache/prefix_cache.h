// Prefix cache for the engine: a radix tree of KV pages shared across requests plus
// recurrent-state snapshots at anchors. A new sequence copies the longest usable cached prefix
// into its cache (restore) and prefills only the rest; finished prefixes are recorded (save).
// The sequence's cache is reached through SeqCacheIO (host copies in and out), so the same
// code serves a host KVCache (CPU runner) and a device cache (CUDA runner).
// Attention-only families resume at any whole page or snapshot; hybrid (DeltaNet) families only
// at a snapshot, since their recurrent state cannot be rewound.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "cache/kv_pages.h"
#include "cache/radix_cache.h"
#include "base/error.h"
#include "cache/state_snapshots.h"
#include "model/transformer.h"

namespace ft {

// One sequence's cache as the prefix cache reads and writes it. Attention layers are counted
// among attention layers (model order); k, v are host [n_attention_layers, n, kv_dim] f32.
class SeqCacheIO {
 public:
  virtual ~SeqCacheIO() = default;
  // Positions [pos0, pos0 + n) of every attention layer.
  virtual void read_kv(int64_t pos0, int64_t n, float* k, float* v) = 0;
  virtual void write_kv(int64_t pos0, int64_t n, const float* k, const float* v) = 0;
  // Hybrid models: the recurrent state after the tokens the sequence holds, state_floats()
  // floats in the owner's layout (opaque here). write_state makes the sequence hold len tokens.
  virtual int64_t state_floats() const = 0;
  virtual void read_state(float* dst) = 0;
  virtual void write_state(const float* src, int64_t len) = 0;
  // The device tier of the snapshot pool (PrefixCacheOptions::device_snapshots slots, which
  // the owner keeps in device memory): the state into a slot and back (device-to-device
  // copies; slot_to_state makes the sequence hold len tokens), and a slot's state to the host
  // (a spill). Only called when the options gave slots.
  virtual void state_to_slot(int32_t slot) { FT_CHECK(false, "no device snapshot slots"); }
  virtual void slot_to_state(int32_t slot, int64_t len) { FT_CHECK(false, "no slots"); }
  virtual void read_slot(int32_t slot, float* dst) { FT_CHECK(false, "no slots"); }
};

// SeqCacheIO over a host KVCache (CPU runner, tests).
class KvCacheIO : public SeqCacheIO {
 public:
  KvCacheIO(const ModelConfig& c, KVCache& kv);
  void read_kv(int64_t pos0, int64_t n, float* k, float* v) override;
  void write_kv(int64_t pos0, int64_t n, const float* k, const float* v) override;
  int64_t state_floats() const override;
  void read_state(float* dst) override;
  void write_state(const float* src, int64_t len) override;

 private:
  KVCache& kv_;
  std::vector<int64_t> attn_;  // model layers with attention
};

struct PrefixCacheOptions {
  int64_t page_tokens = 16;
  int64_t kv_pages = 1024;              // pool size in pages
  size_t snapshot_bytes = 64ull << 20;  // snapshot pool budget (host tier)
  int32_t device_snapshots = 0;         // device tier: state slots the runner holds (hybrid)
};

struct PrefixCacheStats {
  int64_t page_tokens = 0, pages_total = 0, pages_used = 0, tree_nodes = 0;
  int64_t evicted_pages = 0;
  int64_t snapshots = 0, snapshot_evictions = 0;
  int64_t device_snapshots = 0, device_slots = 0, snapshot_spills = 0;  // the device tier
  int64_t snapshot_hits = 0;  // restores that loaded a snapshot, since start
  size_t kv_bytes = 0, snapshot_bytes = 0, snapshot_budget = 0;
  int64_t lookups = 0, hit_tokens = 0;  // restores and the tokens they loaded, since start
};

class PrefixCache {
 public:
  PrefixCache(const ModelConfig& c, PrefixCacheOptions o);

  // Copies the longest usable cached prefix of prompt into the sequence (positions 0..n, at
  // most prompt.size() - 1 so the last token still yields logits) and returns n; the caller
  // prefills prompt[n..) at pos0 = n.
  int64_t restore(std::span<const int32_t> prompt, SeqCacheIO& io);
  // Records the first n tokens the sequence holds (its recurrent state is after exactly n):
  // their whole pages go into the radix tree (evicting LRU leaves when the pool is full) and,
  // when snapshot is set, the state at n goes into the snapshot pool.
  void save(std::span<const int32_t> tokens, int64_t n, SeqCacheIO& io, bool snapshot);
  // The same over a host KVCache (n == kv.recurrent_len for save).
  int64_t restore(std::span<const int32_t> prompt, KVCache& kv);
  void save(std::span<const int32_t> tokens, int64_t n, const KVCache& kv, bool snapshot);

  PrefixCacheStats stats() const;
  // Drops every cached page and snapshot (no restore/save in flight); counters are kept.
  void clear();
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
  // Writes positions [0, n) from pages into the sequence, or reads whole pages [p0, p1) of it
  // into pages, staged through stage_k_/stage_v_ a bounded number of pages at a time.
  void copy_pages_in(std::span<const int32_t> pages, int64_t n, SeqCacheIO& io);
  void copy_pages_out(std::span<const int32_t> pages, int64_t p0, SeqCacheIO& io);
  void save_snapshot(std::span<const int32_t> tokens, int64_t n, SeqCacheIO& io);

  const ModelConfig& c_;
  int64_t n_attn_ = 0, kv_dim_ = 0;
  KvPagePool pool_;
  RadixCache tree_;
  SnapshotPool snaps_;
  std::vector<float> stage_k_, stage_v_;  // [n_attn, pages * page_tokens, kv_dim]
  int64_t lookups_ = 0, hit_tokens_ = 0;
};

}  // namespace ft
