// Prefix cache: restore (radix match + snapshot) into a sequence, save pages and snapshots;
// KvCacheIO, the sequence interface over a host KVCache.
#include "cache/prefix_cache.h"

#include <algorithm>

#include "base/error.h"

namespace ft {

namespace {
constexpr int64_t k_stage_pages = 64;  // pages moved per read_kv / write_kv call
}

KvCacheIO::KvCacheIO(const ModelConfig& c, KVCache& kv) : kv_(kv) {
  for (int64_t l = 0; l < c.n_layers; ++l)
    if (!c.is_delta(l)) attn_.push_back(l);
}

void KvCacheIO::read_kv(int64_t pos0, int64_t n, float* k, float* v) {
  const int64_t d = kv_.kv_dim;
  FT_CHECK(pos0 >= 0 && pos0 + n <= kv_.capacity);
  for (size_t a = 0; a < attn_.size(); ++a) {
    std::copy_n(kv_.k_at(attn_[a], pos0), n * d, k + a * n * d);
    std::copy_n(kv_.v_at(attn_[a], pos0), n * d, v + a * n * d);
  }
}

void KvCacheIO::write_kv(int64_t pos0, int64_t n, const float* k, const float* v) {
  const int64_t d = kv_.kv_dim;
  FT_CHECK(pos0 >= 0 && pos0 + n <= kv_.capacity);
  for (size_t a = 0; a < attn_.size(); ++a) {
    std::copy_n(k + a * n * d, n * d, kv_.k_at(attn_[a], pos0));
    std::copy_n(v + a * n * d, n * d, kv_.v_at(attn_[a], pos0));
  }
}

// The state is KVCache::conv followed by KVCache::ssm (the CUDA runner's layout too).
int64_t KvCacheIO::state_floats() const {
  return static_cast<int64_t>(kv_.conv.size() + kv_.ssm.size());
}

void KvCacheIO::read_state(float* dst) {
  std::copy(kv_.ssm.begin(), kv_.ssm.end(), std::copy(kv_.conv.begin(), kv_.conv.end(), dst));
}

void KvCacheIO::write_state(const float* src, int64_t len) {
  std::copy_n(src, kv_.conv.size(), kv_.conv.begin());
  std::copy_n(src + kv_.conv.size(), kv_.ssm.size(), kv_.ssm.begin());
  kv_.recurrent_len = len;
}

PrefixCache::PrefixCache(const ModelConfig& c, PrefixCacheOptions o)
    : c_(c),
      n_attn_([&] {
        int64_t n = 0;
        for (int64_t l = 0; l < c.n_layers; ++l) n += !c.is_delta(l);
        return n;
      }()),
      kv_dim_(c.kv_dim()),
      pool_(o.kv_pages, o.page_tokens, n_attn_, kv_dim_),
      tree_(pool_),
      snaps_(o.snapshot_bytes, c.has_delta() ? o.device_snapshots : 0) {}

void PrefixCache::copy_pages_in(std::span<const int32_t> pages, int64_t n, SeqCacheIO& io) {
  const int64_t P = page_tokens(), d = kv_dim_;
  for (int64_t i0 = 0; i0 * P < n; i0 += k_stage_pages) {
    const int64_t t0 = i0 * P, m = std::min(n, (i0 + k_stage_pages) * P) - t0;
    stage_k_.resize(n_attn_ * m * d);
    stage_v_.resize(n_attn_ * m * d);
    for (int64_t a = 0; a < n_attn_; ++a)
      for (int64_t t = 0; t < m; t += P) {
        const int32_t page = pages[i0 + t / P];
        const int64_t rows = std::min(P, m - t);
        std::copy_n(pool_.k(page, a), rows * d, stage_k_.data() + (a * m + t) * d);
        std::copy_n(pool_.v(page, a), rows * d, stage_v_.data() + (a * m + t) * d);
      }
    io.write_kv(t0, m, stage_k_.data(), stage_v_.data());
  }
}

void PrefixCache::copy_pages_out(std::span<const int32_t> pages, int64_t p0, SeqCacheIO& io) {
  const int64_t P = page_tokens(), d = kv_dim_, count = static_cast<int64_t>(pages.size());
  for (int64_t i0 = 0; i0 < count; i0 += k_stage_pages) {
    const int64_t np = std::min(k_stage_pages, count - i0), m = np * P;
    stage_k_.resize(n_attn_ * m * d);
    stage_v_.resize(n_attn_ * m * d);
    io.read_kv((p0 + i0) * P, m, stage_k_.data(), stage_v_.data());
    for (int64_t a = 0; a < n_attn_; ++a)
      for (int64_t i = 0; i < np; ++i) {
        std::copy_n(stage_k_.data() + (a * m + i * P) * d, P * d, pool_.k(pages[i0 + i], a));
        std::copy_n(stage_v_.data() + (a * m + i * P) * d, P * d, pool_.v(pages[i0 + i], a));
      }
  }
}

int64_t PrefixCache::restore(std::span<const int32_t> prompt, SeqCacheIO& io) {
  ++lookups_;
  const int64_t len = static_cast<int64_t>(prompt.size());
  if (len <= 1) return 0;
  const int64_t P = page_tokens(), d = kv_dim_;
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
  copy_pages_in(m.pages, base, io);
  if (from_snapshot) {
    const float* p = s->data.data();
    const int64_t tail = n - base;
    const int64_t state = hybrid() && s->slot < 0 ? io.state_floats() : 0;
    FT_CHECK(static_cast<int64_t>(s->data.size()) == state + 2 * n_attn_ * tail * d,
             "snapshot size");
    if (tail > 0) io.write_kv(base, tail, p + state, p + state + n_attn_ * tail * d);
    if (s->slot >= 0)
      io.slot_to_state(s->slot, n);  // device tier: a device-to-device copy
    else if (hybrid())
      io.write_state(p, n);
  }
  hit_tokens_ += n;
  return n;
}

void PrefixCache::save_snapshot(std::span<const int32_t> tokens, int64_t n, SeqCacheIO& io) {
  const int64_t P = page_tokens(), d = kv_dim_, base = n / P * P, tail = n - base;
  if (!hybrid() && tail == 0) return;  // whole pages: the tree alone restores it
  const uint64_t hash = prefix_hashes(tokens.first(n)).back();
  if (snaps_.touch(n, hash)) return;
  // The device tier when it has slots (spilling its least recently used state to the host).
  const int32_t slot = hybrid() ? snaps_.take_slot([&](int32_t victim, std::vector<float>& out) {
    out.resize(io.state_floats());
    io.read_slot(victim, out.data());
  }) : -1;
  const int64_t state = hybrid() && slot < 0 ? io.state_floats() : 0;
  std::vector<float> data(state + 2 * n_attn_ * tail * d);
  if (slot >= 0) io.state_to_slot(slot);
  if (state > 0) io.read_state(data.data());
  if (tail > 0) io.read_kv(base, tail, data.data() + state, data.data() + state + n_attn_ * tail * d);
  snaps_.put(n, hash, data, slot);
}

void PrefixCache::save(std::span<const int32_t> tokens, int64_t n, SeqCacheIO& io,
                       bool snapshot) {
  FT_CHECK(n <= static_cast<int64_t>(tokens.size()));
  const int64_t P = page_tokens(), full = n / P;
  RadixCache::Match m = tree_.match(tokens.first(full * P));
  std::vector<int32_t> pages = m.pages, mine;
  const int64_t need = full - static_cast<int64_t>(pages.size());
  if (need > pool_.n_free()) {
    tree_.lock(m.node);  // keep the matched path
    tree_.evict(need - pool_.n_free());
    tree_.unlock(m.node);
  }
  const int64_t first = static_cast<int64_t>(pages.size());
  for (int64_t i = first; i < full; ++i) {
    const int32_t p = pool_.alloc();
    if (p < 0) break;
    pages.push_back(p);
    mine.push_back(p);
  }
  copy_pages_out(mine, first, io);
  tree_.insert(tokens, pages);
  for (int32_t p : mine) pool_.unref(p);
  if (snapshot) save_snapshot(tokens, n, io);
}

int64_t PrefixCache::restore(std::span<const int32_t> prompt, KVCache& kv) {
  KvCacheIO io(c_, kv);
  const int64_t n = restore(prompt, io);
  kv.recurrent_len = n;
  return n;
}

void PrefixCache::save(std::span<const int32_t> tokens, int64_t n, const KVCache& kv,
                       bool snapshot) {
  FT_CHECK(n <= kv.capacity);
  if (hybrid())
    FT_CHECK(kv.recurrent_len == n, "state holds {} tokens, not {}", kv.recurrent_len, n);
  KvCacheIO io(c_, const_cast<KVCache&>(kv));  // save only reads
  save(tokens, n, io, snapshot);
}

void PrefixCache::clear() {
  tree_.evict(pool_.n_pages());
  snaps_.clear();
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
          .device_snapshots = s.device,
          .device_slots = s.device_slots,
          .snapshot_spills = s.spilled,
          .snapshot_hits = s.hits,
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
