// Expert cache policy invariants: hits/misses, global LRU across layers, protection of the
// current step's experts, map consistency, fetch caps, probation when a pass does not fit
// (against a plain LRU reference) and the hybrid split rule.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "base/error.h"
#include "base/q_split.h"
#include "base/slot_rank.h"
#include "experts/expert_cache.h"

namespace ft {
namespace {

TEST(ExpertCache, MissThenHit) {
  ExpertCache c(2, 4, 6);
  std::vector<int32_t> a{1, 3};
  auto p = c.ensure(0, a);
  EXPECT_EQ(p.fetch.size(), 2u);
  EXPECT_TRUE(p.cpu.empty());
  auto q = c.ensure(0, a);
  EXPECT_TRUE(q.fetch.empty());
  EXPECT_EQ(q.slot_of, p.slot_of);
  EXPECT_EQ(c.stats().hits, 2);
  EXPECT_EQ(c.stats().misses, 2);
}

TEST(ExpertCache, EvictsGlobalLeastRecentlyUsedAcrossLayers) {
  ExpertCache c(3, 2, 4);
  c.ensure(0, std::vector<int32_t>{0, 1});  // slots for layer 0 (oldest)
  c.ensure(1, std::vector<int32_t>{0, 1});
  auto p = c.ensure(2, std::vector<int32_t>{0, 1});  // must evict layer 0's two experts
  EXPECT_EQ(c.slot_of(0, 0), -1);
  EXPECT_EQ(c.slot_of(0, 1), -1);
  EXPECT_GE(c.slot_of(1, 0), 0);
  EXPECT_EQ(c.stats().evictions, 2);
  EXPECT_EQ(std::set<int32_t>(p.slot_of.begin(), p.slot_of.end()).size(), 2u);
}

// One layer in 8 slots, and 6 layers in 9 (a pass never fits: probation on every step that
// misses): a step's experts get distinct slots, and the maps stay one-to-one.
TEST(ExpertCache, NeverEvictsThisStepsExperts) {
  for (const int64_t L : {1, 6}) {
    const int64_t E = 8, S = L == 1 ? 8 : 9;
    ExpertCache c(L, E, S);
    std::mt19937 rng(3);
    for (int step = 0; step < 3000; ++step) {
      const int64_t layer = rng() % L;
      std::vector<int32_t> all{0, 1, 2, 3, 4, 5, 6, 7};
      std::shuffle(all.begin(), all.end(), rng);
      std::vector<int32_t> a(all.begin(), all.begin() + 1 + rng() % 8);
      auto p = c.ensure(layer, a);
      std::set<int32_t> slots(p.slot_of.begin(), p.slot_of.end());
      ASSERT_EQ(slots.size(), a.size());  // distinct slots, none -1
      for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(c.slot_of(layer, a[i]), p.slot_of[i]);
      std::set<int32_t> used;
      for (int64_t l = 0; l < L; ++l)
        for (int32_t e = 0; e < E; ++e)
          if (int32_t s = c.slot_of(l, e); s >= 0) ASSERT_TRUE(used.insert(s).second);
    }
    EXPECT_EQ(c.stats().probation > 0, L > 1);
  }
}

TEST(ExpertCache, MapsStayConsistentUnderRandomTraffic) {
  const int64_t L = 4, E = 16, S = 24;
  ExpertCache c(L, E, S);
  std::mt19937 rng(11);
  for (int step = 0; step < 3000; ++step) {
    const int64_t layer = rng() % L;
    std::set<int32_t> uniq;
    while (uniq.size() < 6) uniq.insert(static_cast<int32_t>(rng() % E));
    std::vector<int32_t> a(uniq.begin(), uniq.end());
    c.ensure(layer, a, static_cast<int64_t>(rng() % 4) - 1);
    std::set<int32_t> used;
    for (int64_t l = 0; l < L; ++l)
      for (int32_t e = 0; e < E; ++e)
        if (int32_t s = c.slot_of(l, e); s >= 0) ASSERT_TRUE(used.insert(s).second) << "slot twice";
    ASSERT_LE(static_cast<int64_t>(used.size()), S);
  }
  const auto& st = c.stats();
  EXPECT_EQ(st.hits + st.misses, st.lookups);
}

TEST(ExpertCache, FetchCapLeavesRestToCpuMostRecentFirst) {
  ExpertCache c(1, 8, 8);
  c.ensure(0, std::vector<int32_t>{5}, 0);  // 5 active, but not fetched: recency only
  auto p = c.ensure(0, std::vector<int32_t>{2, 5, 7}, 1);
  ASSERT_EQ(p.fetch.size(), 1u);
  EXPECT_EQ(p.fetch[0], 5);  // recently active wins
  EXPECT_EQ(p.cpu, (std::vector<int32_t>{2, 7}));
  EXPECT_EQ(p.slot_of[0], -1);
  EXPECT_GE(p.slot_of[1], 0);
}

// Prefill streaming overwrites slots [0, end) only: their experts miss afterwards and those
// slots are the first victims; every other mapping survives. A fresh cache fills from the
// highest slot, so the buffers are taken last.
TEST(ExpertCache, DropSlotsKeepsTheRest) {
  ExpertCache c(2, 4, 8);
  c.ensure(0, std::vector<int32_t>{0, 1, 2, 3});
  for (int32_t e = 0; e < 4; ++e) EXPECT_GE(c.slot_of(0, e), 4) << "expert " << e;
  c.ensure(1, std::vector<int32_t>{0, 1, 2, 3});
  c.drop_slots(4);  // layer 1's slots
  for (int32_t e = 0; e < 4; ++e) {
    EXPECT_GE(c.slot_of(0, e), 4);
    EXPECT_EQ(c.slot_of(1, e), -1);
  }
  // Layer 0's experts still hit; layer 1's miss into the dropped slots, evicting nothing.
  const auto hits = c.stats().hits, evictions = c.stats().evictions;
  const auto p0 = c.ensure(0, std::vector<int32_t>{0, 1, 2, 3});
  EXPECT_TRUE(p0.fetch.empty());
  EXPECT_EQ(c.stats().hits, hits + 4);
  const auto p1 = c.ensure(1, std::vector<int32_t>{0, 1, 2, 3});
  EXPECT_EQ(p1.fetch.size(), 4u);
  for (int32_t s : p1.fetch_slot) EXPECT_LT(s, 4);
  EXPECT_EQ(c.stats().evictions, evictions);
  c.drop_slots(100);  // past the end: every slot
  EXPECT_EQ(c.slot_of(0, 0), -1);
}

TEST(ExpertCache, TooFewSlotsIsAnError) { EXPECT_THROW(ExpertCache(2, 8, 7), Error); }

// The pre-probation policy (plain timestamp LRU, the highest index on ties; misses most
// recently active first, then lower id) as a reference.
struct PlainLru {
  std::vector<int32_t> slot_for_id, id_of_slot;
  std::vector<int64_t> usage, recency;
  int64_t step = 0, E;
  PlainLru(int64_t L, int64_t E_, int64_t S)
      : slot_for_id(L * E_, -1), id_of_slot(S, -1), usage(S, 0), recency(L * E_, 0), E(E_) {}
  std::vector<int32_t> ensure(int64_t layer, const std::vector<int32_t>& active) {
    ++step;
    std::vector<int32_t> out(active.size(), -1);
    std::vector<char> owned(usage.size(), 0);
    std::vector<size_t> miss;
    for (size_t i = 0; i < active.size(); ++i)
      if (int32_t s = slot_for_id[layer * E + active[i]]; s >= 0)
        usage[s] = step, owned[s] = 1, out[i] = s;
      else
        miss.push_back(i);
    std::sort(miss.begin(), miss.end(), [&](size_t a, size_t b) {
      const int64_t ra = recency[layer * E + active[a]], rb = recency[layer * E + active[b]];
      return ra != rb ? ra > rb : active[a] < active[b];
    });
    for (size_t i : miss) {
      int32_t v = -1;
      for (size_t s = 0; s < usage.size(); ++s)
        if (!owned[s] && (v < 0 || usage[s] <= usage[v])) v = static_cast<int32_t>(s);
      if (id_of_slot[v] >= 0) slot_for_id[id_of_slot[v]] = -1;
      id_of_slot[v] = static_cast<int32_t>(layer * E + active[i]);
      slot_for_id[layer * E + active[i]] = v;
      usage[v] = step, owned[v] = 1, out[i] = v;
    }
    for (int32_t e : active) recency[layer * E + e] = step;
    return out;
  }
};

// A pass's experts per layer, the same every token (a decode that keeps its routing).
std::vector<std::vector<int32_t>> fixed_routes(int64_t L, int64_t E, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<int32_t>> r(L);
  for (auto& a : r) {
    std::vector<int32_t> all(E);
    for (int32_t e = 0; e < E; ++e) all[e] = e;
    std::shuffle(all.begin(), all.end(), rng);
    a.assign(all.begin(), all.begin() + k);
  }
  return r;
}

// When one pass's experts (window x ids per step) fit in the slots, a victim is never recent:
// the same decisions as plain LRU, and nothing goes on probation.
TEST(ExpertCache, PlainLruWhenAPassFits) {
  const int64_t L = 4, E = 16, k = 6, S = L * k + 1;
  ExpertCache c(L, E, S);
  PlainLru ref(L, E, S);
  std::mt19937 rng(5);
  for (int step = 0; step < 4000; ++step) {
    const int64_t layer = step % L;
    std::set<int32_t> uniq;
    const size_t n = 1 + rng() % k;
    while (uniq.size() < n) uniq.insert(static_cast<int32_t>(rng() % E));
    std::vector<int32_t> a(uniq.begin(), uniq.end());
    ASSERT_EQ(c.ensure(layer, a).slot_of, ref.ensure(layer, a)) << "step " << step;
  }
  EXPECT_EQ(c.stats().probation, 0);
}

// A pass needs more experts than there are slots: plain LRU evicts each one before its next use
// and never hits; with probation the slots that are not cycling keep hitting.
TEST(ExpertCache, ProbationKeepsACyclingPassHitting) {
  const int64_t L = 8, E = 16, k = 4, S = 24;  // 32 experts a pass
  const auto routes = fixed_routes(L, E, k, 7);
  ExpertCache c(L, E, S);
  int64_t hits = 0, ref_hits = 0, lookups = 0;
  for (int pass = 0; pass < 300; ++pass)
    for (int64_t l = 0; l < L; ++l) {
      const auto before = c.stats().hits;
      c.ensure(l, routes[l]);
      if (pass >= 200) hits += c.stats().hits - before, lookups += k;  // after a warm-up
    }
  PlainLru lru(L, E, S);  // a hit: the expert had a slot before the step
  for (int pass = 0; pass < 300; ++pass)
    for (int64_t l = 0; l < L; ++l) {
      std::vector<int32_t> was(k);
      for (int64_t i = 0; i < k; ++i) was[i] = lru.slot_for_id[l * E + routes[l][i]];
      lru.ensure(l, routes[l]);
      if (pass >= 200)
        for (int32_t s : was) ref_hits += s >= 0;
    }
  EXPECT_EQ(ref_hits, 0);
  // 4 slots cycle (one step's misses); the other 20 of 32 experts hit, less promotion churn.
  EXPECT_GE(hits * 100, lookups * 55) << hits << " of " << lookups;
  EXPECT_GT(c.stats().probation, 0);
}

// After the routing moves to other experts, the old kept set ages out of the window and is
// evicted as plain LRU would, so the cache settles on the new routing within a few passes.
TEST(ExpertCache, ProbationFollowsAShiftingRouting) {
  const int64_t L = 8, E = 16, k = 4, S = 24;  // 32 experts a pass
  const auto a = fixed_routes(L, E / 2, k, 1);
  auto b = fixed_routes(L, E / 2, k, 2);
  for (auto& r : b)
    for (auto& e : r) e += E / 2;  // disjoint from a
  ExpertCache c(L, E, S);
  for (int pass = 0; pass < 100; ++pass)
    for (int64_t l = 0; l < L; ++l) c.ensure(l, a[l]);
  int64_t hits = 0;
  for (int pass = 0; pass < 20; ++pass)
    for (int64_t l = 0; l < L; ++l) {
      const auto before = c.stats().hits;
      c.ensure(l, b[l]);
      if (pass >= 10) hits += c.stats().hits - before;
    }
  EXPECT_GE(hits * 100, 10 * L * k * 55) << hits;
}

// Steps of more than k_probation_max_active distinct experts (an extend through the cache)
// insert as plain LRU does even when the pass does not fit, and the decode steps after them
// (whose pass fits) find every slot used within the window but no sign of cycling: plain LRU
// throughout, so the decode keeps the long pass's last layers.
TEST(ExpertCache, LargeStepsInsertAsLru) {
  const int64_t L = 8, E = 64, S = 100;  // a long pass: 8 x 40 experts; a decode pass: 8 x 8
  ExpertCache c(L, E, S);
  PlainLru ref(L, E, S);
  std::mt19937 rng(13);
  for (int step = 0; step < 1200; ++step) {
    const int64_t n = step % 400 < 16 ? k_probation_max_active + 8 : 8;  // 2 long passes a 400
    std::vector<int32_t> all(E);
    for (int32_t e = 0; e < E; ++e) all[e] = e;
    std::shuffle(all.begin(), all.end(), rng);
    const std::vector<int32_t> a(all.begin(), all.begin() + n);
    ASSERT_EQ(c.ensure(step % L, a).slot_of, ref.ensure(step % L, a)) << "step " << step;
  }
  EXPECT_EQ(c.stats().probation, 0);
}

TEST(HybridSplit, BalancesFetchAgainstCpu) {
  EXPECT_EQ(hybrid_fetch_count(0, 0.5), 0);
  EXPECT_EQ(hybrid_fetch_count(3, 0.415), 1);
  EXPECT_EQ(hybrid_fetch_count(4, 0.415), 2);
  EXPECT_EQ(hybrid_fetch_count(8, 0.0), 0);
  EXPECT_EQ(hybrid_fetch_count(8, 1.0), 8);
  for (int64_t m = 1; m < 64; ++m)
    for (double f : {0.1, 0.25, 0.33, 0.5, 0.7, 0.9}) {
      int64_t F = hybrid_fetch_count(m, f);
      ASSERT_LE(std::abs(static_cast<double>(F) - f * m), 1.0) << m << " " << f;
      ASSERT_GE(F, 0);
      ASSERT_LE(F, m);
    }
}

// The device bookkeeping (slot_cache.cu) evaluates the same Q16 rule: it is constexpr and
// gives hybrid_fetch_count's answers from hybrid_q16(f).
static_assert(hybrid_fetch_count_q16(3, 27197) == 1 && hybrid_fetch_count_q16(4, 27197) == 2);
static_assert(hybrid_fetch_count_q16(0, 1 << 15) == 0 && hybrid_fetch_count_q16(8, 1 << 16) == 8);
TEST(HybridSplit, Q16RuleIsTheHostRule) {
  EXPECT_EQ(hybrid_q16(0.415), 27197);
  EXPECT_EQ(hybrid_q16(-1.0), 0);
  EXPECT_EQ(hybrid_q16(2.0), 1 << 16);
  for (int64_t m = 0; m < 300; ++m)
    for (double f : {0.0, 0.05, 0.2843, 0.5, 0.71, 1.0})
      ASSERT_EQ(hybrid_fetch_count(m, f), hybrid_fetch_count_q16(m, hybrid_q16(f))) << m << " " << f;
}

}  // namespace
}  // namespace ft
