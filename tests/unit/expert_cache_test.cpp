// Expert cache policy invariants: hits/misses, global LRU across layers, protection of the
// current step's experts, map consistency, fetch caps and the hybrid split rule.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "base/error.h"
#include "base/q_split.h"
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

TEST(ExpertCache, NeverEvictsThisStepsExperts) {
  ExpertCache c(1, 8, 8);
  std::mt19937 rng(3);
  for (int step = 0; step < 2000; ++step) {
    std::vector<int32_t> all{0, 1, 2, 3, 4, 5, 6, 7};
    std::shuffle(all.begin(), all.end(), rng);
    std::vector<int32_t> a(all.begin(), all.begin() + 1 + rng() % 8);
    auto p = c.ensure(0, a);
    std::set<int32_t> slots(p.slot_of.begin(), p.slot_of.end());
    ASSERT_EQ(slots.size(), a.size());  // distinct slots, none -1
    for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(c.slot_of(0, a[i]), p.slot_of[i]);
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
