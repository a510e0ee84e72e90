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
  SamplingParams p_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> cand_;
};

// Index of the largest logit (lowest index on ties), as torch.argmax.
int32_t argmax(const float* logits, int64_t n);

}  // namespace ft
