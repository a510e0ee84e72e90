// RadixCache: page-granular match and insert, node splits, locks against eviction, LRU order,
// reference counts back to zero.
#include "cache/radix_cache.h"

#include <gtest/gtest.h>

#include <numeric>

namespace ft {
namespace {

constexpr int64_t P = 4;

std::vector<int32_t> seq(int32_t from, int64_t n) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), from);
  return v;
}

// Allocates pages for the first n / P pages of tokens, inserts them and drops the caller's refs.
void put(RadixCache& t, KvPagePool& pool, const std::vector<int32_t>& tokens) {
  std::vector<int32_t> pages;
  for (size_t i = 0; i + P <= tokens.size(); i += P) pages.push_back(pool.alloc());
  t.insert(tokens, pages);
  for (int32_t p : pages) pool.unref(p);
}

TEST(RadixCache, MatchesWholePagesOnly) {
  KvPagePool pool(16, P, 1, 1);
  RadixCache t(pool);
  put(t, pool, seq(0, 10));  // 2 whole pages, 2 tokens dropped
  EXPECT_EQ(pool.n_used(), 2);
  EXPECT_EQ(t.match(seq(0, 10)).tokens, 8);
  EXPECT_EQ(t.match(seq(0, 7)).tokens, 4);
  EXPECT_EQ(t.match(seq(0, 3)).tokens, 0);
  auto other = seq(0, 10);
  other[5] = 99;  // diverges inside the second page
  EXPECT_EQ(t.match(other).tokens, 4);
  EXPECT_EQ(t.match(seq(1, 10)).tokens, 0);
  t.check_invariants();
}

TEST(RadixCache, BranchesShareTheCommonPagesAndSplitNodes) {
  KvPagePool pool(16, P, 1, 1);
  RadixCache t(pool);
  auto a = seq(0, 16);
  auto b = seq(0, 16);
  b[9] = 500;  // diverges in page 2
  put(t, pool, a);
  const auto ma = t.match(a);
  put(t, pool, b);
  EXPECT_EQ(pool.n_used(), 4 + 2);  // shared pages 0-1, two private tails of 2 pages
  const auto mb = t.match(b);
  EXPECT_EQ(mb.tokens, 16);
  EXPECT_EQ(std::vector<int32_t>(ma.pages.begin(), ma.pages.begin() + 2),
            std::vector<int32_t>(mb.pages.begin(), mb.pages.begin() + 2));
  EXPECT_NE(ma.pages[2], mb.pages[2]);
  const auto s = t.stats();
  EXPECT_EQ(s.nodes, 3);  // common [0,8) and the two tails
  EXPECT_EQ(s.pages, 6);
  t.check_invariants();
}

TEST(RadixCache, InsertKeepsExistingPagesAndIgnoresTheCallersDuplicates) {
  KvPagePool pool(16, P, 1, 1);
  RadixCache t(pool);
  put(t, pool, seq(0, 8));
  put(t, pool, seq(0, 12));  // first two pages duplicate: freed again by put
  EXPECT_EQ(pool.n_used(), 3);
  for (int32_t p : t.match(seq(0, 12)).pages) EXPECT_EQ(pool.refcount(p), 1);
  t.check_invariants();
}

TEST(RadixCache, EvictsLeastRecentlyUsedLeavesAndSparesLocked) {
  KvPagePool pool(16, P, 1, 1);
  RadixCache t(pool);
  auto a = seq(0, 8), b = seq(100, 8), c = seq(200, 8);
  put(t, pool, a);
  put(t, pool, b);
  put(t, pool, c);
  t.match(a);  // a is now the most recent; b the least
  auto lc = t.match(c);
  t.lock(lc.node);
  EXPECT_EQ(t.evict(2), 2);
  EXPECT_EQ(t.match(b).tokens, 0);
  EXPECT_EQ(t.match(a).tokens, 8);
  EXPECT_EQ(t.evict(100), 2);  // only a is unlocked
  EXPECT_EQ(t.match(a).tokens, 0);
  EXPECT_EQ(t.match(c).tokens, 8);
  EXPECT_EQ(t.stats().locked_nodes, 1);
  t.unlock(lc.node);
  EXPECT_EQ(t.evict(100), 2);
  EXPECT_EQ(pool.n_used(), 0);
  EXPECT_EQ(t.stats().nodes, 0);
  EXPECT_EQ(t.stats().evicted_pages, 6);
  t.check_invariants();
}

TEST(RadixCache, EvictingALeafExposesItsParent) {
  KvPagePool pool(16, P, 1, 1);
  RadixCache t(pool);
  auto a = seq(0, 12), b = seq(0, 12);
  b[8] = 77;
  put(t, pool, a);
  put(t, pool, b);           // root -> [0,8) -> {a tail, b tail}
  EXPECT_EQ(t.evict(4), 4);  // both tails, then the shared node
  EXPECT_EQ(pool.n_used(), 0);
}

TEST(RadixCache, LockedPathSurvivesAndLocksAreCounted) {
  KvPagePool pool(16, P, 1, 1);
  RadixCache t(pool);
  put(t, pool, seq(0, 16));
  auto m = t.match(seq(0, 8));  // splits at 8: the lock pins only [0,8)
  t.lock(m.node);
  t.lock(m.node);
  EXPECT_EQ(t.evict(100), 2);  // the unlocked tail [8,16)
  EXPECT_EQ(t.match(seq(0, 16)).tokens, 8);
  t.unlock(m.node);
  EXPECT_EQ(t.evict(100), 0);
  t.unlock(m.node);
  EXPECT_EQ(t.evict(100), 2);
  t.check_invariants();
}

TEST(RadixCache, DestructorGivesEveryReferenceBack) {
  KvPagePool pool(16, P, 1, 1);
  {
    RadixCache t(pool);
    put(t, pool, seq(0, 16));
    auto b = seq(0, 16);
    b[4] = 3;
    put(t, pool, b);
    EXPECT_EQ(pool.n_used(), 7);
  }
  EXPECT_EQ(pool.n_used(), 0);
}

}  // namespace
}  // namespace ft
