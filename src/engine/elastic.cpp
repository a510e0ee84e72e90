// Elastic memory policy: resize-target validation and the free-memory pressure decision.
#include "engine/elastic.h"

#include <algorithm>

#include "base/error.h"

namespace ft {

namespace {
std::string gib(size_t b) { return fmt::format("{:.2f} GiB", b / double(size_t{1} << 30)); }
int64_t ceil_div(size_t a, size_t b) { return static_cast<int64_t>((a + b - 1) / b); }
}  // namespace

const PoolInfo* find_pool(const std::vector<PoolInfo>& pools, const std::string& name) {
  for (const PoolInfo& p : pools)
    if (p.name == name) return &p;
  return nullptr;
}

void check_resize_target(const std::vector<PoolInfo>& pools, const ResizeTarget& t,
                         size_t budget, size_t used) {
  if (t.empty()) fail("the resize names no pool: give moe_slots, kv_tokens, prefix_tokens or state_slots");
  int64_t delta = 0;  // bytes the target adds (negative: frees)
  auto one = [&](const char* name, int64_t v) {
    if (v < 0) return;
    const PoolInfo* p = find_pool(pools, name);
    if (!p) {
      std::string have;
      for (const PoolInfo& q : pools) have += (have.empty() ? "" : ", ") + q.name;
      fail("this backend has no '{}' pool (pools: {})", name, have.empty() ? "none" : have);
    }
    if (v < p->min || v > p->max)
      fail("{} {} is outside the '{}' pool's limits [{}, {}]", v, p->unit, name, p->min, p->max);
    delta += (v - p->size) * static_cast<int64_t>(p->unit_bytes);
  };
  one("moe", t.moe_slots);
  one("kv", t.kv_tokens);
  one("prefix_kv", t.prefix_tokens);
  one("state", t.state_slots);
  if (budget > 0 && delta > 0 && used + static_cast<size_t>(delta) > budget)
    fail("the resize needs {} more, {} in all, over the {} budget; shrink another pool too",
         gib(static_cast<size_t>(delta)), gib(used + static_cast<size_t>(delta)), gib(budget));
}

std::optional<ResizeTarget> elastic_decide(size_t free_bytes, size_t floor_bytes,
                                           size_t margin_bytes,
                                           const std::vector<PoolInfo>& pools,
                                           const ElasticWant& want) {
  const PoolInfo* moe = find_pool(pools, "moe");
  const PoolInfo* pkv = find_pool(pools, "prefix_kv");
  ResizeTarget t;
  if (free_bytes < floor_bytes) {
    size_t deficit = floor_bytes - free_bytes + margin_bytes / 2;
    for (const PoolInfo* p : {moe, pkv}) {
      if (!p || !p->device || deficit == 0 || p->size <= p->min || p->unit_bytes == 0) continue;
      const int64_t cut = std::min(p->size - p->min, ceil_div(deficit, p->unit_bytes));
      (p == moe ? t.moe_slots : t.prefix_tokens) = p->size - cut;
      deficit -= std::min(deficit, static_cast<size_t>(cut) * p->unit_bytes);
    }
  } else if (free_bytes > floor_bytes + margin_bytes) {
    size_t surplus = free_bytes - floor_bytes - margin_bytes;
    for (const PoolInfo* p : {moe, pkv}) {
      const int64_t w = p == moe ? want.moe_slots : want.prefix_tokens;
      if (!p || !p->device || p->unit_bytes == 0 || std::min(w, p->max) <= p->size) continue;
      const int64_t add = std::min<int64_t>(std::min(w, p->max) - p->size,
                                            static_cast<int64_t>(surplus / p->unit_bytes));
      if (add <= 0) continue;
      (p == moe ? t.moe_slots : t.prefix_tokens) = p->size + add;
      surplus -= static_cast<size_t>(add) * p->unit_bytes;
    }
  }
  if (t.empty()) return std::nullopt;
  return t;
}

size_t elastic_floor(const ElasticOptions& o, size_t total_bytes) {
  return o.floor_bytes > 0 ? o.floor_bytes : total_bytes / 20;
}

size_t elastic_margin(const ElasticOptions& o, size_t floor_bytes) {
  return o.grow_margin_bytes > 0 ? o.grow_margin_bytes
                                 : std::max(floor_bytes / 2, size_t{256} << 20);
}

bool parse_on_off(const std::string& flag, const std::string& v) {
  if (v == "on") return true;
  if (v == "off") return false;
  fail("{} must be on or off, not '{}'", flag, v);
}

}  // namespace ft
