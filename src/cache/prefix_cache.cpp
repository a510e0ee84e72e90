// Prefix cache: restore (radix match + snapshot) into a KVCache, save pages and snapshots.
#include "cache/prefix_cache.h"

#include <algorithm>

#include "base/error.h"

namespace ft {

PrefixCache::PrefixCache(const ModelConfig& c, PrefixCacheOptions o)
    : c_(c),
      pool_(
          o.kv_pages, o.page_tokens,
          [&] {
            int64_t n = 0;
            for (int64_t l = 0; l < c.n_layers; ++l) n += !c.is_delta(l);
            return n;
          }(),
          c.kv_dim()),
      tree_(pool_),
      snaps_(o.snapshot_bytes) {
  for (int64_t l = 0; l < c.n_layers; ++l)
    (c.is_delta(l) ? delta_layers_ : attn_layers_).push_back(l);
}

void PrefixCache::copy_pages_in(std::span<const int32_t> pages, int64_t n, KVCache& kv) const {
  const int64_t P = page_tokens(), d = kv.kv_dim;
  for (size_t a = 0; a < attn_layers_.size(); ++a) {
    const int64_t l = attn_layers_[a];
    for (int64_t i = 0; i * P < n; ++i) {
      const int64_t m = std::min(P, n - i * P);
      std::copy_n(pool_.k(pages[i], a), m * d, kv.k_at(l, i * P));
      std::copy_n(pool_.v(pages[i], a), m * d, kv.v_at(l, i * P));
    }
  }
}

int64_t PrefixCache::restore(std::span<const int32_t> prompt, KVCache& kv) {
  ++lookups_;
  const int64_t len = static_cast<int64_t>(prompt.size());
  if (len <= 1) return 0;
  const int64_t P = page_tokens(), d = kv.kv_dim;
  RadixCache::Match m = tree_.match(prompt);
  const std::vector<uint64_t> h = prefix_hashes(prompt);
  // A snapshot at p needs the pages below p's page from the tree; its data holds the rest.
  const SnapshotPool::Snapshot* s =
      snaps_.deepest(h, len - 1, [&](int64_t p) { return p / P * P <= m.tokens; });
  int64_t n = s ? s->pos : 0;
  if (!hybrid()) n = std::max(n, std::min(m.tokens, len - 1));
  if (n == 0) return 0;
  const bool from_snapshot = s && s->pos == n;
  const int64_t base = from_snapshot ? n / P * P : n;  // positions read from pages
  copy_pages_in(m.pages, base, kv);
  if (from_snapshot) {
    const float* p = s->data.data();
    for (int64_t l : delta_layers_) {
      std::copy_n(p, kv.conv_size, kv.conv_at(l));
      std::copy_n(p + kv.conv_size, kv.ssm_size, kv.ssm_at(l));
      p += kv.conv_size + kv.ssm_size;
    }
    const int64_t tail = n - base;
    for (int64_t l : attn_layers_) {
      std::copy_n(p, tail * d, kv.k_at(l, base));
      std::copy_n(p + tail * d, tail * d, kv.v_at(l, base));
      p += 2 * tail * d;
    }
    FT_CHECK(p == s->data.data() + s->data.size(), "snapshot size");
  }
  kv.recurrent_len = n;
  hit_tokens_ += n;
  return n;
}

void PrefixCache::save_snapshot(std::span<const int32_t> tokens, int64_t n, const KVCache& kv) {
  const int64_t P = page_tokens(), d = kv.kv_dim, base = n / P * P, tail = n - base;
  if (!hybrid() && tail == 0) return;  // whole pages: the tree alone restores it
  const uint64_t hash = prefix_hashes(tokens.first(n)).back();
  if (snaps_.touch(n, hash)) return;
  std::vector<float> data;
  data.reserve(delta_layers_.size() * (kv.conv_size + kv.ssm_size) +
               attn_layers_.size() * 2 * tail * d);
  auto& k = const_cast<KVCache&>(kv);  // k_at/v_at are non-const accessors; read only
  for (int64_t l : delta_layers_) {
    data.insert(data.end(), k.conv_at(l), k.conv_at(l) + kv.conv_size);
    data.insert(data.end(), k.ssm_at(l), k.ssm_at(l) + kv.ssm_size);
  }
  for (int64_t l : attn_layers_) {
    data.insert(data.end(), k.k_at(l, base), k.k_at(l, base) + tail * d);
    data.insert(data.end(), k.v_at(l, base), k.v_at(l, base) + tail * d);
  }
  snaps_.put(n, hash, data);
}

void PrefixCache::save(std::span<const int32_t> tokens, int64_t n, const KVCache& kv,
                       bool snapshot) {
  FT_CHECK(n <= static_cast<int64_t>(tokens.size()) && n <= kv.capacity);
  if (hybrid())
    FT_CHECK(kv.recurrent_len == n, "state holds {} tokens, not {}", kv.recurrent_len, n);
  const int64_t P = page_tokens(), d = kv.kv_dim, full = n / P;
  RadixCache::Match m = tree_.match(tokens.first(full * P));
  std::vector<int32_t> pages = m.pages, mine;
  const int64_t need = full - static_cast<int64_t>(pages.size());
  if (need > pool_.n_free()) {
    tree_.lock(m.node);  // keep the matched path
    tree_.evict(need - pool_.n_free());
    tree_.unlock(m.node);
  }
  for (int64_t i = static_cast<int64_t>(pages.size()); i < full; ++i) {
    const int32_t p = pool_.alloc();
    if (p < 0) break;
    auto& k = const_cast<KVCache&>(kv);
    for (size_t a = 0; a < attn_layers_.size(); ++a) {
      std::copy_n(k.k_at(attn_layers_[a], i * P), P * d, pool_.k(p, a));
      std::copy_n(k.v_at(attn_layers_[a], i * P), P * d, pool_.v(p, a));
    }
    pages.push_back(p);
    mine.push_back(p);
  }
  tree_.insert(tokens, pages);
  for (int32_t p : mine) pool_.unref(p);
  if (snapshot) save_snapshot(tokens, n, kv);
}

PrefixCacheStats PrefixCache::stats() const {
  const RadixCache::Stats t = tree_.stats();
  const SnapshotPool::Stats s = snaps_.stats();
  return {.page_tokens = page_tokens(),
          .pages_total = pool_.n_pages(),
          .pages_used = pool_.n_used(),
          .tree_nodes = t.nodes,
          .evicted_pages = t.evicted_pages,
          .snapshots = s.count,
          .snapshot_evictions = s.evicted,
          .kv_bytes = pool_.bytes(),
          .snapshot_bytes = s.bytes,
          .snapshot_budget = s.budget,
          .lookups = lookups_,
          .hit_tokens = hit_tokens_};
}

void PrefixCache::check_invariants() const {
  tree_.check_invariants();
  // Between requests the tree holds the only references: used pages == pages in the tree.
  FT_CHECK(pool_.n_used() == tree_.stats().pages, "{} pages used, {} in the tree", pool_.n_used(),
           tree_.stats().pages);
  FT_CHECK(tree_.stats().locked_nodes == 0, "locked nodes left");
}

}  // namespace ft
