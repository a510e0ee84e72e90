// Sampler: filters applied in the order HF's generate applies its warpers
// (temperature, top-k, top-p, min-p), then a draw from the renormalised distribution. It runs
// on the engine thread between decode steps, so a 152k vocabulary must cost tens of
// microseconds, not milliseconds: no full sort, one vectorised exp pass (bench/sampler_bench).
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/kernels.h"

namespace ft {

namespace {
constexpr int64_t kLanes = 16, kSpan = 256;  // the scans' vector width and skipped spans
// A probability's bucket: its float bits >> 19 (exponent and 4 mantissa bits: 16 per octave,
// ascending); a probability <= 1 has a bucket below kBuckets.
constexpr int kBucketShift = 19, kBuckets = 2048;

// max / sum of x[0..n) in kLanes running lanes, branch-free so the compiler vectorises them
// (the tail past a multiple of kLanes is added one by one). NaN never wins the max (the lanes
// start at -inf, not at a possibly-NaN first value).
float span_max(const float* x, int64_t n) {
  float m[kLanes];
  std::fill(m, m + kLanes, -INFINITY);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t j = 0; j < kLanes; ++j) m[j] = x[i + j] > m[j] ? x[i + j] : m[j];
  float r = m[0];
  for (int64_t j = 1; j < kLanes; ++j) r = m[j] > r ? m[j] : r;
  for (; i < n; ++i) r = x[i] > r ? x[i] : r;
  return r;
}
float span_sum(const float* x, int64_t n) {
  float a[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t j = 0; j < kLanes; ++j) a[j] += x[i + j];
  float r = 0.f;
  for (int64_t j = 0; j < kLanes; ++j) r += a[j];
  for (; i < n; ++i) r += x[i];
  return r;
}

// Keys that sort ascending as (weight desc, index asc): weights are floats >= 0, whose bits
// order as unsigned integers.
uint64_t desc_key(float w, int32_t i) {
  uint32_t bits;
  std::memcpy(&bits, &w, sizeof(bits));
  return (static_cast<uint64_t>(~bits) << 32) | static_cast<uint32_t>(i);
}
int32_t key_index(uint64_t k) { return static_cast<int32_t>(k & 0xffffffffu); }
}  // namespace

// Two passes, the first branch-free so it vectorises: each block's max over kLanes running
// maxima, then the first index of the best block holding the largest value. A vocabulary of
// 152k logits: ~3x faster than one compare-and-branch loop (it runs between decode steps).
// The same answer as that loop, NaN included: a NaN never wins unless it is logits[0].
int32_t argmax(const float* logits, int64_t n) {
  if (n <= 0 || std::isnan(logits[0])) return 0;
  constexpr int64_t kBlock = 2048;
  float best = logits[0];
  int64_t best_block = 0;
  for (int64_t b0 = 0; b0 < n; b0 += kBlock) {
    const float bm = span_max(logits + b0, std::min(kBlock, n - b0));
    if (bm > best) best = bm, best_block = b0;
  }
  for (int64_t i = best_block; i < n; ++i)
    if (logits[i] == best) return static_cast<int32_t>(i);
  return 0;
}

int32_t Sampler::sample(const float* logits, int64_t vocab) {
  if (p_.temperature <= 0.f || vocab <= 1) return argmax(logits, vocab);
  const int32_t best = argmax(logits, vocab);
  // +inf takes all the mass; all -inf (or a NaN first) leaves nothing to weigh.
  if (!std::isfinite(logits[best])) return best;
  if (p_.top_k > 0 && p_.top_k < vocab) return sample_top_k(logits, vocab);
  return sample_all(logits, vocab, best);
}

// No top-k: every token's weight e = exp((l - max) / T) in one vectorised pass (the max's is 1),
// and the draw walks the kept tokens in index order. With top-p / min-p only the tokens that can
// be kept are looked at: the top-p set (the most probable tokens until their mass reaches
// top_p) lies among those with e >= (1 - top_p) * total / (2 vocab), since all the others
// together weigh less than (1 - top_p) of the total; min-p keeps e >= min_p. The filters then
// apply in HF's warper order, with the probabilities the sorting sampler had (float(e / total)).
int32_t Sampler::sample_all(const float* logits, int64_t vocab, int32_t best) {
  const float inv_t = 1.f / p_.temperature;
  e_.resize(static_cast<size_t>(vocab));
  const double total = cpu::kernels().exp_sum(logits, vocab, logits[best], inv_t, e_.data());
  if (!(total > 0) || !std::isfinite(total)) return best;  // NaN logits
  const bool nucleus = p_.top_p < 1.f, floor = p_.min_p > 0.f;
  if (!nucleus && !floor) {
    // Whole spans are skipped by their sums, then the span that holds r is walked; masked
    // tokens (-inf: e ~1e-38 from the vector exp, not 0) are never drawn.
    double r = std::uniform_real_distribution<double>(0.0, total)(rng_);
    int32_t last = best;
    for (int64_t s0 = 0; s0 < vocab; s0 += kSpan) {
      const int64_t n = std::min(kSpan, vocab - s0);
      const double ss = span_sum(&e_[s0], n);
      if (r > ss) {
        r -= ss;
        continue;
      }
      for (int64_t i = s0; i < s0 + n; ++i) {
        if (logits[i] == -INFINITY) continue;
        last = static_cast<int32_t>(i);
        r -= e_[i];
        if (r <= 0) return last;
      }
    }
    return last;  // r left over by rounding: the last token weighed
  }
  float tau = 0.f;
  if (nucleus)
    tau = static_cast<float>(0.5 * (1.0 - p_.top_p) * total / static_cast<double>(vocab));
  if (floor) tau = std::max(tau, 0.5f * p_.min_p);
  // Candidates compacted without a branch per token: over flat logits a random ~40% of the
  // vocabulary passes, and a branch mispredicted on each of them cost most of the sampler's time.
  if (cand_ids_.size() < static_cast<size_t>(vocab)) cand_ids_.resize(static_cast<size_t>(vocab));
  int32_t* ids = cand_ids_.data();
  size_t nc = 0;
  for (int64_t s0 = 0; s0 < vocab; s0 += kSpan) {
    const int64_t end = std::min(vocab, s0 + kSpan);
    if (span_max(&e_[s0], end - s0) < tau) continue;
    for (int64_t i = s0; i < end; ++i) {
      ids[nc] = static_cast<int32_t>(i);
      nc += static_cast<size_t>((e_[i] >= tau) & (logits[i] != -INFINITY));
    }
  }
  // Each candidate's probability and bucket, once.
  cand_p_.resize(nc);
  cand_b_.resize(nc);
  for (size_t j = 0; j < nc; ++j) {
    const float q = static_cast<float>(e_[ids[j]] / total);
    uint32_t bits;
    std::memcpy(&bits, &q, sizeof(bits));
    cand_p_[j] = q, cand_b_[j] = static_cast<int16_t>(bits >> kBucketShift);
  }
  // Top-p: the most probable tokens until their mass reaches top_p (the one that crosses
  // included). Bucket masses find the bucket where it is crossed; only that bucket is sorted.
  int boundary = -1;  // members: bucket > boundary, or in it up to last_key
  uint64_t last_key = 0;
  if (nucleus) {
    hist_.assign(kBuckets, 0.0);
    for (size_t j = 0; j < nc; ++j) hist_[cand_b_[j]] += cand_p_[j];
    double acc = 0;
    int b = kBuckets - 1;
    for (; b >= 0; --b) {
      if (acc + hist_[b] >= p_.top_p) break;
      acc += hist_[b];
    }
    if (b >= 0) {
      keys_.clear();
      for (size_t j = 0; j < nc; ++j)
        if (cand_b_[j] == b) keys_.push_back(desc_key(cand_p_[j], ids[j]));
      std::sort(keys_.begin(), keys_.end());
      for (uint64_t k : keys_) {
        acc += static_cast<float>(e_[key_index(k)] / total);
        last_key = k;
        if (acc >= p_.top_p) break;
      }
      boundary = b;
    }
  }
  // Min-p after it: at least min_p times the most probable token's probability. The kept
  // candidates keep their probability, the others weigh 0 (again no branch per candidate).
  const float fl = floor ? static_cast<float>(e_[best] / total) * p_.min_p : 0.f;
  double sum = 0;
  for (size_t j = 0; j < nc; ++j) {
    const int b = cand_b_[j];
    const bool in_p =
        (b > boundary) | ((b == boundary) & (desc_key(cand_p_[j], ids[j]) <= last_key));
    const bool kept = in_p & (cand_p_[j] >= fl);
    cand_p_[j] = kept ? cand_p_[j] : 0.f;
    sum += cand_p_[j];
  }
  double r = std::uniform_real_distribution<double>(0.0, sum)(rng_);
  for (size_t j = 0; j < nc; ++j) {
    r -= cand_p_[j];
    if (r <= 0 && cand_p_[j] > 0.f) return ids[j];
  }
  return best;
}

// Top-k first: one scan keeps the k best (scaled logit desc, index asc) in a heap whose root is
// the worst kept, skipping 256-logit spans whose max cannot beat it (the scan's indices ascend,
// so an equal logit later never does). Then softmax, top-p and min-p over the k, as HF's warpers
// apply them.
int32_t Sampler::sample_top_k(const float* logits, int64_t vocab) {
  const auto k = static_cast<size_t>(p_.top_k);
  auto better = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  auto scaled = [&](int64_t i) {  // NaN ranks as -inf (the heap needs a strict order)
    const float l = logits[i];
    return std::pair<float, int32_t>{l == l ? l / p_.temperature : -INFINITY,
                                     static_cast<int32_t>(i)};
  };
  cand_.clear();
  for (int64_t i = 0; i < static_cast<int64_t>(k); ++i) cand_.push_back(scaled(i));
  std::make_heap(cand_.begin(), cand_.end(), better);  // root: the worst kept
  auto raw = [&](int32_t i) { return logits[i] == logits[i] ? logits[i] : -INFINITY; };
  float worst_logit = raw(cand_.front().second);
  for (int64_t b0 = static_cast<int64_t>(k); b0 < vocab; b0 += kSpan) {
    const int64_t end = std::min(vocab, b0 + kSpan);
    if (!(span_max(logits + b0, end - b0) > worst_logit)) continue;
    for (int64_t i = b0; i < end; ++i) {
      if (!(logits[i] > worst_logit)) continue;
      const std::pair<float, int32_t> c = scaled(i);
      if (!better(c, cand_.front())) continue;
      std::pop_heap(cand_.begin(), cand_.end(), better);
      cand_.back() = c;
      std::push_heap(cand_.begin(), cand_.end(), better);
      worst_logit = raw(cand_.front().second);
    }
  }
  std::sort(cand_.begin(), cand_.end(), better);
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
