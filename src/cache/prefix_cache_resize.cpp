// Prefix cache live resize (issue #9): the page pool shrinks by LRU eviction then compaction,
// or grows; the snapshot pool's budget follows.
#include <algorithm>
#include <new>

#include "base/error.h"
#include "cache/prefix_cache.h"

namespace ft {

void PrefixCache::resize(int64_t kv_pages, int64_t snapshot_bytes) {
  if (kv_pages >= 0 && kv_pages != pool_.n_pages()) {
    if (kv_pages < pool_.n_used()) tree_.evict(pool_.n_used() - kv_pages);
    if (kv_pages < pool_.n_used())
      fail("the prefix cache holds {} pages in use ({} locked nodes); cannot shrink to {} pages",
           pool_.n_used(), tree_.stats().locked_nodes, kv_pages);
    try {
      tree_.remap(pool_.resize(kv_pages));
    } catch (const std::bad_alloc&) {
      throw OutOfMemory(fmt::format("cannot allocate {} prefix-cache KV pages ({} bytes)",
                                    kv_pages, static_cast<size_t>(kv_pages) * pool_.page_bytes()));
    }
  }
  if (snapshot_bytes >= 0) snaps_.set_budget(static_cast<size_t>(snapshot_bytes));
}

size_t PrefixCache::snapshot_unit_bytes() const {
  int64_t floats = 0;
  if (c_.has_delta()) {
    const KVCache probe(c_, 1);
    for (int64_t l = 0; l < c_.n_layers; ++l)
      if (c_.is_delta(l)) floats += probe.conv_size + probe.ssm_size;
  }
  for (int64_t l = 0; l < c_.n_layers; ++l)
    if (!c_.is_delta(l)) floats += 2 * (page_tokens() - 1) * c_.kv_dim();
  return static_cast<size_t>(std::max<int64_t>(floats, 1)) * sizeof(float);
}

}  // namespace ft
