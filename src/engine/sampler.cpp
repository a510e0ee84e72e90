// Sampler: filters applied in the order HF's generate applies its warpers
// (temperature, top-k, top-p, min-p), then a draw from the renormalised distribution.
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>

namespace ft {

int32_t argmax(const float* logits, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (logits[i] > logits[best]) best = i;
  return static_cast<int32_t>(best);
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
