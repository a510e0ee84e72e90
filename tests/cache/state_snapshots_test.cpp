// SnapshotPool: prefix hashes, deepest matching snapshot, byte budget with LRU eviction.
#include "cache/state_snapshots.h"

#include <gtest/gtest.h>

namespace ft {
namespace {

TEST(Snapshots, PrefixHashesDependOnEveryEarlierToken) {
  std::vector<int32_t> a{1, 2, 3, 4}, b{1, 2, 9, 4};
  const auto ha = prefix_hashes(a), hb = prefix_hashes(b);
  ASSERT_EQ(ha.size(), 5u);
  EXPECT_EQ(ha[2], hb[2]);
  EXPECT_NE(ha[3], hb[3]);
  EXPECT_NE(ha[4], hb[4]);
  EXPECT_NE(ha[1], ha[2]);
}

TEST(Snapshots, DeepestMatchingSnapshotWins) {
  std::vector<int32_t> t{5, 6, 7, 8, 9, 10};
  const auto h = prefix_hashes(t);
  SnapshotPool pool(1 << 20);
  std::vector<float> d2{2}, d4{4}, d5{5};
  ASSERT_TRUE(pool.put(2, h[2], d2));
  ASSERT_TRUE(pool.put(4, h[4], d4));
  ASSERT_TRUE(pool.put(5, 12345, d5));  // another prefix at 5
  auto all = [](int64_t) { return true; };
  const auto* s = pool.deepest(h, 6, all);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->pos, 4);
  EXPECT_EQ(s->data[0], 4.f);
  EXPECT_EQ(pool.deepest(h, 3, all)->pos, 2);  // bounded by max_pos
  EXPECT_EQ(pool.deepest(h, 6, [](int64_t p) { return p < 4; })->pos, 2);
  EXPECT_EQ(pool.deepest(h, 1, all), nullptr);
}

TEST(Snapshots, BudgetEvictsLeastRecentlyUsed) {
  std::vector<int32_t> t{1, 2, 3, 4, 5};
  const auto h = prefix_hashes(t);
  SnapshotPool pool(3 * 4 * sizeof(float));  // room for three 4-float snapshots
  std::vector<float> d(4, 1.f);
  for (int p = 1; p <= 3; ++p) ASSERT_TRUE(pool.put(p, h[p], d));
  auto only = [](int64_t want) { return [want](int64_t p) { return p == want; }; };
  ASSERT_NE(pool.deepest(h, 5, only(1)), nullptr);  // 1 used: 2 is now the oldest
  ASSERT_TRUE(pool.put(4, h[4], d));
  EXPECT_FALSE(pool.contains(2, h[2]));
  EXPECT_TRUE(pool.contains(1, h[1]));
  EXPECT_TRUE(pool.contains(3, h[3]));
  EXPECT_EQ(pool.stats().count, 3);
  EXPECT_EQ(pool.stats().evicted, 1);
  EXPECT_EQ(pool.stats().bytes, 3 * 4 * sizeof(float));
  std::vector<float> huge(100);
  EXPECT_FALSE(pool.put(5, h[5], huge));
  pool.set_budget(4 * sizeof(float));
  EXPECT_EQ(pool.stats().count, 1);
  EXPECT_TRUE(pool.contains(4, h[4]));  // the most recent stays
  pool.set_budget(0);
  EXPECT_EQ(pool.stats().count, 0);
  EXPECT_EQ(pool.stats().bytes, 0u);
}

TEST(Snapshots, ReplacingASnapshotKeepsTheByteCountExact) {
  SnapshotPool pool(1 << 10);
  std::vector<float> a(8), b(3);
  pool.put(7, 1, a);
  pool.put(7, 1, b);
  EXPECT_EQ(pool.stats().count, 1);
  EXPECT_EQ(pool.stats().bytes, 3 * sizeof(float));
}

}  // namespace
}  // namespace ft
