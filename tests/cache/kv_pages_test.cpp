// KvPagePool: allocation until exhaustion, reference counts, free list reuse, page addressing.
#include "cache/kv_pages.h"

#include <gtest/gtest.h>

#include <set>

namespace ft {
namespace {

TEST(KvPages, AllocatesEveryPageOnceThenRefuses) {
  KvPagePool pool(5, 4, 2, 3);
  std::set<int32_t> got;
  for (int i = 0; i < 5; ++i) {
    const int32_t p = pool.alloc();
    ASSERT_GE(p, 0);
    EXPECT_TRUE(got.insert(p).second) << "page " << p << " handed out twice";
    EXPECT_EQ(pool.refcount(p), 1);
  }
  EXPECT_EQ(pool.alloc(), -1);
  EXPECT_EQ(pool.n_free(), 0);
  EXPECT_EQ(pool.n_used(), 5);
}

TEST(KvPages, PageReturnsToFreeListAtZeroReferences) {
  KvPagePool pool(2, 4, 1, 2);
  const int32_t a = pool.alloc(), b = pool.alloc();
  pool.ref(a);
  EXPECT_EQ(pool.refcount(a), 2);
  pool.unref(a);
  EXPECT_EQ(pool.n_free(), 0);  // one reference left
  pool.unref(a);
  EXPECT_EQ(pool.refcount(a), 0);
  EXPECT_EQ(pool.n_free(), 1);
  EXPECT_EQ(pool.alloc(), a);  // reused
  pool.unref(a);
  pool.unref(b);
  EXPECT_EQ(pool.n_free(), 2);
}

TEST(KvPages, PagesAndLayersDoNotOverlap) {
  const int64_t P = 4, L = 3, D = 5;
  KvPagePool pool(3, P, L, D);
  EXPECT_EQ(pool.page_floats(), 2 * L * P * D);
  EXPECT_EQ(pool.bytes(), size_t(3 * 2 * L * P * D) * sizeof(float));
  for (int32_t p = 0; p < 3; ++p)
    for (int64_t l = 0; l < L; ++l)
      for (int64_t i = 0; i < P * D; ++i) {
        pool.k(p, l)[i] = float(p * 1000 + l * 100 + i);
        pool.v(p, l)[i] = -float(p * 1000 + l * 100 + i);
      }
  for (int32_t p = 0; p < 3; ++p)
    for (int64_t l = 0; l < L; ++l)
      for (int64_t i = 0; i < P * D; ++i) {
        ASSERT_EQ(pool.k(p, l)[i], float(p * 1000 + l * 100 + i));
        ASSERT_EQ(pool.v(p, l)[i], -float(p * 1000 + l * 100 + i));
      }
}

TEST(KvPagesDeath, UnrefOfAFreePageAborts) {
  KvPagePool pool(1, 4, 1, 1);
  EXPECT_DEATH(pool.unref(0), "unref of free page");
}

}  // namespace
}  // namespace ft
