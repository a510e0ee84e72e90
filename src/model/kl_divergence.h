// How far a model's next-token distributions are from a base model's: KL(base || test) per
// position, top-1 agreement (the quantization quality gate of ft perplexity and the tests).
#pragma once
#include <cstdint>
#include <vector>

namespace ft {

// log softmax of n logits into out (double accumulation).
void log_softmax(const float* logits, int64_t n, float* out);

// KL(P || Q) = sum_i P_i (log P_i - log Q_i) from two rows of log-probabilities.
double kl_divergence(const float* base_logp, const float* test_logp, int64_t n);

// Running statistics over positions.
class KlStats {
 public:
  // One position: both rows are log-probabilities over the same vocabulary.
  void add(const float* base_logp, const float* test_logp, int64_t n);
  int64_t count() const { return static_cast<int64_t>(kl_.size()); }
  double mean() const;
  double max() const;
  // q-th quantile (0..1) of the per-position KL.
  double quantile(double q) const;
  // Fraction of positions whose argmax (top-1 token) is the same.
  double top1_agreement() const;

 private:
  std::vector<double> kl_;
  int64_t same_top1_ = 0;
};

}  // namespace ft
