// Thread pool, sampler and routing invariants.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
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

// The sampler before it avoided sorting the vocabulary (session 20): every filter over a full
// sort (top-k: a partial sort) of (logit / T, id), in HF's warper order. The reference the
// fast paths are held to.
struct SortingSampler {
  SamplingParams p;
  std::mt19937_64 rng{p.seed};
  // The kept (probability, id) in draw order.
  std::vector<std::pair<float, int32_t>> kept(const float* logits, int64_t vocab) const {
    std::vector<std::pair<float, int32_t>> c(vocab);
    for (int64_t i = 0; i < vocab; ++i) c[i] = {logits[i] / p.temperature, static_cast<int32_t>(i)};
    auto by = [](const auto& a, const auto& b) {
      return a.first > b.first || (a.first == b.first && a.second < b.second);
    };
    size_t keep = c.size();
    if (p.top_k > 0 && static_cast<size_t>(p.top_k) < keep) {
      keep = static_cast<size_t>(p.top_k);
      std::partial_sort(c.begin(), c.begin() + keep, c.end(), by);
    } else {
      std::sort(c.begin(), c.end(), by);
    }
    c.resize(keep);
    const float mx = c[0].first;
    double sum = 0;
    for (auto& x : c) sum += (x.first = std::exp(x.first - mx));
    for (auto& x : c) x.first = static_cast<float>(x.first / sum);
    if (p.top_p < 1.f) {
      double acc = 0;
      size_t n = 0;
      while (n < c.size()) {
        acc += c[n++].first;
        if (acc >= p.top_p) break;
      }
      c.resize(std::max<size_t>(1, n));
    }
    if (p.min_p > 0.f) {
      const float floor = c[0].first * p.min_p;
      size_t n = 1;
      while (n < c.size() && c[n].first >= floor) ++n;
      c.resize(n);
    }
    return c;
  }
  int32_t sample(const float* logits, int64_t vocab) {
    const auto c = kept(logits, vocab);
    double total = 0;
    for (const auto& x : c) total += x.first;
    double r = std::uniform_real_distribution<double>(0.0, total)(rng);
    for (const auto& x : c) {
      r -= x.first;
      if (r <= 0) return x.second;
    }
    return c.back().second;
  }
};

// LLM-like logits: a few strong candidates over a long normal tail, and some masked tokens.
std::vector<float> llm_logits(int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> tail(0.f, 2.5f);
  std::vector<float> l(vocab);
  for (auto& x : l) x = tail(rng);
  for (int64_t i = 0; i < std::min<int64_t>(12, vocab / 4); ++i)
    l[rng() % vocab] = 9.f + static_cast<float>(i % 5);
  for (int64_t i = 0; i < std::min<int64_t>(30, vocab / 8); ++i) l[rng() % vocab] = -INFINITY;
  return l;
}

// Top-k keeps the reference's arithmetic: the same seed draws the same ids, at vocabularies of
// 7 to 152k, with ties (rounded logits), top-p and min-p after it.
TEST(Sampler, TopKDrawsMatchTheSortingReference) {
  for (int64_t vocab : {7, 1000, 151936})
    for (bool ties : {false, true})
      for (int64_t k : {1, 5, 20, 64})
        for (float top_p : {1.f, 0.8f})
          for (float min_p : {0.f, 0.1f}) {
            if (k >= vocab) continue;
            auto l = llm_logits(vocab, static_cast<uint32_t>(vocab + k));
            if (ties)
              for (auto& x : l) x = std::round(x);
            const SamplingParams p{.temperature = 0.7f, .top_k = k, .top_p = top_p,
                                   .min_p = min_p, .seed = 11};
            Sampler fast(p);
            SortingSampler ref{p};
            for (int d = 0; d < 30; ++d)
              ASSERT_EQ(fast.sample(l.data(), vocab), ref.sample(l.data(), vocab))
                  << "vocab " << vocab << " k " << k << " top_p " << top_p << " min_p " << min_p
                  << " ties " << ties << " draw " << d;
          }
}

// Without top-k, top-p / min-p sort only the bucket where top-p's mass is crossed: every draw
// is in the reference's kept set, and over a small kept set the draws follow its probabilities.
// Temperature 1 over the heavy tail keeps ~40% of a 152k vocabulary at top-p 0.95; 0.5 a few.
TEST(Sampler, NucleusAndMinPKeepTheReferenceSet) {
  for (int64_t vocab : {50, 151936})
    for (float temperature : {1.f, 0.5f})
      for (float top_p : {1.f, 0.95f, 0.6f})
        for (float min_p : {0.f, 0.05f}) {
        if (top_p >= 1.f && min_p <= 0.f) continue;
        const auto l = llm_logits(vocab, static_cast<uint32_t>(vocab + 3));
        const SamplingParams p{
            .temperature = temperature, .top_p = top_p, .min_p = min_p, .seed = 3};
        const auto kept = SortingSampler{p}.kept(l.data(), vocab);
        std::map<int32_t, double> prob;
        double total = 0;
        for (const auto& [q, id] : kept) total += q;
        for (const auto& [q, id] : kept) prob[id] = q / total;
        Sampler s(p);
        std::map<int32_t, int> seen;
        const bool few = prob.size() <= 64;  // frequencies checked; else membership only
        const int draws = !few ? 300 : vocab > 1000 ? 6000 : 20000;
        for (int d = 0; d < draws; ++d) {
          const int32_t id = s.sample(l.data(), vocab);
          ASSERT_TRUE(prob.count(id)) << "id " << id << " outside the kept set (vocab " << vocab
                                      << " T " << temperature << " top_p " << top_p
                                      << " min_p " << min_p << ")";
          ++seen[id];
        }
        if (few)
          for (const auto& [id, q] : prob)  // within 5 sigma of the binomial
            EXPECT_NEAR(seen[id] / double(draws), q, 5 * std::sqrt(q * (1 - q) / draws) + 1e-4)
                << "id " << id << " vocab " << vocab << " T " << temperature << " top_p "
                << top_p << " min_p " << min_p;
      }
}

// Unfiltered at a 152k vocabulary: masked (-inf) tokens are never drawn, the draws follow the
// softmax (the strong candidates' share), and +inf takes everything.
TEST(Sampler, UnfilteredLargeVocabularyMasksAndShares) {
  const int64_t vocab = 151936;
  auto l = llm_logits(vocab, 9);
  std::vector<int32_t> masked;
  for (int64_t i = 0; i < vocab; ++i)
    if (l[i] == -INFINITY) masked.push_back(static_cast<int32_t>(i));
  double z = 0, strong = 0;
  const float mx = *std::max_element(l.begin(), l.end());
  for (float x : l) {
    const double e = std::exp(static_cast<double>(x) - mx);
    z += e;
    if (x >= 9.f) strong += e;
  }
  Sampler s({.temperature = 1.f, .seed = 4});
  int hits = 0;
  const int draws = 20000;
  for (int d = 0; d < draws; ++d) {
    const int32_t id = s.sample(l.data(), vocab);
    ASSERT_NE(l[id], -INFINITY) << "masked token " << id << " drawn";
    hits += l[id] >= 9.f;
  }
  const double q = strong / z;
  EXPECT_NEAR(hits / double(draws), q, 5 * std::sqrt(q * (1 - q) / draws));
  l[77] = INFINITY;
  for (int d = 0; d < 20; ++d) EXPECT_EQ(s.sample(l.data(), vocab), 77);
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
