// Test helpers: a model's logits and next-token log-probabilities at every position of a token
// sequence (one CPU prefill in chunks of `chunk`), the input of the parity and KL checks, and
// the per-row logit error ratio the fixture tests bound.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "backend/cpu/thread_pool.h"
#include "model/kl_divergence.h"
#include "model/transformer.h"

namespace ft::test {

// [ids.size(), vocab] logits.
inline std::vector<float> all_logits(const Model& m, const std::vector<int32_t>& ids,
                                     ThreadPool& pool, int64_t chunk = 64) {
  const int64_t T = static_cast<int64_t>(ids.size()), V = m.config().vocab_size;
  Transformer tf(m, pool, chunk);
  KVCache kv(m.config(), T);
  std::vector<float> lg(T * V);
  tf.forward(ids.data(), T, 0, kv, lg.data(), true);
  return lg;
}

inline std::vector<float> all_logits(const Model& m, const std::vector<int32_t>& ids) {
  ThreadPool pool(2, false);
  return all_logits(m, ids, pool);
}

// [ids.size(), vocab] log-probabilities.
inline std::vector<float> log_probs(const Model& m, const std::vector<int32_t>& ids,
                                    ThreadPool& pool, int64_t chunk = 64) {
  const int64_t T = static_cast<int64_t>(ids.size()), V = m.config().vocab_size;
  const std::vector<float> lg = all_logits(m, ids, pool, chunk);
  std::vector<float> lp(T * V);
  for (int64_t t = 0; t < T; ++t) log_softmax(lg.data() + t * V, V, lp.data() + t * V);
  return lp;
}
inline std::vector<float> log_probs(const Model& m, const std::vector<int32_t>& ids) {
  ThreadPool pool(2, false);
  return log_probs(m, ids, pool);
}

// max over the rows of max|a - b| / max|b| ([rows, V] each): the fixtures' logit tolerance.
// A NaN or infinite value (std::max would skip a NaN) or a difference over an all-zero
// reference row is infinitely bad, so a broken output never passes a bound.
inline float worst_row_ratio(const float* a, const float* b, int64_t rows, int64_t V) {
  float worst = 0;
  for (int64_t r = 0; r < rows; ++r) {
    float md = 0, mr = 0;
    for (int64_t i = 0; i < V; ++i) {
      const float d = std::fabs(a[r * V + i] - b[r * V + i]);
      if (!std::isfinite(d)) return INFINITY;
      md = std::max(md, d);
      mr = std::max(mr, std::fabs(b[r * V + i]));
    }
    if (md > 0) worst = std::max(worst, mr > 0 ? md / mr : INFINITY);
  }
  return worst;
}
inline float worst_row_ratio(const std::vector<float>& a, const std::vector<float>& b, int64_t V) {
  return worst_row_ratio(a.data(), b.data(), static_cast<int64_t>(a.size()) / V, V);
}

}  // namespace ft::test
