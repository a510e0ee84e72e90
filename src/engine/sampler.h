// Token sampling: greedy at temperature 0, else temperature / top-k / top-p / min-p with a
// seeded RNG owned by the request.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

namespace ft {

struct SamplingParams {
  float temperature = 0.f;  // 0: greedy
  int64_t top_k = 0;        // 0: off
  float top_p = 1.f;        // 1: off
  float min_p = 0.f;        // 0: off
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p) : p_(p), rng_(p.seed) {}
  int32_t sample(const float* logits, int64_t vocab);

 private:
  int32_t sample_all(const float* logits, int64_t vocab, int32_t best);
  int32_t sample_top_k(const float* logits, int64_t vocab);

  SamplingParams p_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> cand_;  // top-k: (scaled logit -> probability, id)
  std::vector<float> e_;                         // weights of every token (no top-k)
  std::vector<int32_t> cand_ids_;                // tokens the filters may keep (a prefix)
  std::vector<float> cand_p_;                    // their probabilities (0: filtered out)
  std::vector<int16_t> cand_b_;                  // their probability buckets
  std::vector<double> hist_;                     // top-p: probability mass per bucket
  std::vector<uint64_t> keys_;                   // top-p's boundary bucket (prob desc, id asc)
};

// Index of the largest logit (lowest index on ties), as torch.argmax.
int32_t argmax(const float* logits, int64_t n);

}  // namespace ft
