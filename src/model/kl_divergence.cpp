// KL divergence and top-1 agreement between two models' next-token distributions.
#include "model/kl_divergence.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"

namespace ft {

void log_softmax(const float* logits, int64_t n, float* out) {
  const float mx = *std::max_element(logits, logits + n);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(logits[i] - mx));
  const double lse = std::log(sum);
  for (int64_t i = 0; i < n; ++i)
    out[i] = static_cast<float>(static_cast<double>(logits[i] - mx) - lse);
}

double kl_divergence(const float* base_logp, const float* test_logp, int64_t n) {
  double kl = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double lp = base_logp[i];
    if (lp < -80) continue;  // p = 0 to double precision: no contribution
    kl += std::exp(lp) * (lp - static_cast<double>(test_logp[i]));
  }
  return std::max(kl, 0.0);  // rounding can leave a tiny negative for identical rows
}

void KlStats::add(const float* base_logp, const float* test_logp, int64_t n) {
  kl_.push_back(kl_divergence(base_logp, test_logp, n));
  same_top1_ += std::max_element(base_logp, base_logp + n) - base_logp ==
                std::max_element(test_logp, test_logp + n) - test_logp;
}

double KlStats::mean() const {
  double s = 0;
  for (double k : kl_) s += k;
  return kl_.empty() ? 0 : s / static_cast<double>(kl_.size());
}

double KlStats::max() const { return kl_.empty() ? 0 : *std::max_element(kl_.begin(), kl_.end()); }

double KlStats::quantile(double q) const {
  FT_CHECK(q >= 0 && q <= 1, "quantile {}", q);
  if (kl_.empty()) return 0;
  std::vector<double> s = kl_;
  const size_t k = std::min(s.size() - 1, static_cast<size_t>(q * static_cast<double>(s.size())));
  std::nth_element(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(k), s.end());
  return s[k];
}

double KlStats::top1_agreement() const {
  return kl_.empty() ? 0 : static_cast<double>(same_top1_) / static_cast<double>(kl_.size());
}

}  // namespace ft
