// Thread pool, sampler and routing invariants.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <numeric>
#include <random>

#include "backend/cpu/thread_pool.h"
#include "engine/sampler.h"
#include "ops/ops.h"

namespace ft {
namespace {

TEST(ThreadPool, EveryItemExactlyOnce) {
  ThreadPool pool(3, false);
  for (int64_t n : {1, 2, 7, 100, 1001}) {
    for (int64_t grain : {1, 3, 64}) {
      std::vector<std::atomic<int>> hits(n);
      pool.run(n, grain, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[i]++;
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << n << " " << grain;
    }
  }
  std::atomic<int> all{0};
  pool.run_on_all([&](int) { all++; });
  EXPECT_EQ(all.load(), 3);
}

TEST(ThreadPool, ManyBackToBackRuns) {
  ThreadPool pool(2, false);
  std::atomic<int64_t> sum{0};
  for (int r = 0; r < 5000; ++r) pool.run(4, 1, [&](int64_t b, int64_t e) { sum += e - b; });
  EXPECT_EQ(sum.load(), 20000);
}

TEST(Sampler, GreedyIsArgmaxLowestIndexOnTies) {
  std::vector<float> l{0.1f, 3.f, 3.f, -1.f};
  Sampler s({});
  EXPECT_EQ(s.sample(l.data(), 4), 1);
}

// argmax (blocked, vectorisable) against the plain first-maximum loop: random vocabularies of
// every length around the block and lane sizes, heavy ties, infinities and NaNs.
TEST(Sampler, ArgmaxMatchesFirstMaximumLoop) {
  auto plain = [](const std::vector<float>& v) {
    int64_t best = 0;
    for (int64_t i = 1; i < static_cast<int64_t>(v.size()); ++i)
      if (v[i] > v[best]) best = i;
    return static_cast<int32_t>(best);
  };
  std::mt19937 rng(3);
  for (int r = 0; r < 3000; ++r) {
    const int64_t n = r < 100 ? r + 1 : 1 + static_cast<int64_t>(rng() % 9000);
    std::vector<float> v(n);
    const int levels = 1 + static_cast<int>(rng() % 40);  // few levels: many ties
    for (auto& x : v) x = static_cast<float>(static_cast<int>(rng() % levels) - levels / 2);
    if (r % 7 == 0) v[rng() % n] = INFINITY;
    if (r % 5 == 0) v[rng() % n] = NAN;
    if (r % 11 == 0) v[rng() % n] = -INFINITY;
    if (r % 13 == 0) v[0] = NAN;
    ASSERT_EQ(argmax(v.data(), n), plain(v)) << "case " << r << " n " << n;
  }
  std::vector<float> big(151936, -2.f);
  big[151935] = 1.f, big[4097] = 1.f;
  EXPECT_EQ(argmax(big.data(), 151936), 4097);
}

TEST(Sampler, SeededDrawsRepeatAndFiltersHold) {
  std::vector<float> l{2.f, 1.f, 0.5f, 0.f, -1.f, -3.f};
  SamplingParams p{.temperature = 1.f, .top_k = 3, .seed = 7};
  Sampler a(p), b(p);
  for (int i = 0; i < 200; ++i) {
    int32_t x = a.sample(l.data(), 6);
    EXPECT_EQ(x, b.sample(l.data(), 6));
    EXPECT_LT(x, 3);  // top_k = 3
  }
  Sampler nucleus({.temperature = 1.f, .top_p = 0.5f, .seed = 1});
  for (int i = 0; i < 100; ++i) EXPECT_EQ(nucleus.sample(l.data(), 6), 0);  // p(0) = 0.55
  Sampler minp({.temperature = 1.f, .min_p = 0.5f, .seed = 1});
  for (int i = 0; i < 100; ++i) EXPECT_LE(minp.sample(l.data(), 6), 1);
}

TEST(Sampler, UnfilteredDrawFollowsTheDistribution) {
  std::vector<float> l{0.f, std::log(3.f), -50.f};  // p = 0.25, 0.75, ~0 at temperature 1
  Sampler s({.temperature = 1.f, .seed = 5});
  int counts[3] = {0, 0, 0};
  for (int i = 0; i < 8000; ++i) counts[s.sample(l.data(), 3)]++;
  EXPECT_NEAR(counts[1] / 8000.0, 0.75, 0.02);
  EXPECT_EQ(counts[2], 0);
  Sampler hot({.temperature = 2.f, .seed = 5});  // p ∝ exp(l / 2): 1 : sqrt(3)
  int one = 0;
  for (int i = 0; i < 8000; ++i) one += hot.sample(l.data(), 3) == 1;
  EXPECT_NEAR(one / 8000.0, std::sqrt(3.0) / (1 + std::sqrt(3.0)), 0.02);
}

TEST(Routing, SoftmaxTopKRenormalised) {
  std::vector<float> logits{0.f, 2.f, 1.f, 2.f};  // tie between 1 and 3
  std::vector<int32_t> ids(2);
  std::vector<float> w(2);
  ops::route_topk_softmax(logits.data(), 1, 4, 2, true, ids.data(), w.data());
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 3);
  EXPECT_FLOAT_EQ(w[0] + w[1], 1.f);
  ops::route_topk_softmax(logits.data(), 1, 4, 2, false, ids.data(), w.data());
  double z = std::exp(0.) + 2 * std::exp(2.) + std::exp(1.);
  EXPECT_NEAR(w[0], std::exp(2.) / z, 1e-6);
}

}  // namespace
}  // namespace ft
