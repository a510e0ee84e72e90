// Test helpers: a model's logits and next-token log-probabilities at every position of a token
// sequence (one CPU prefill in chunks of `chunk`), the input of the parity and KL checks.
#pragma once
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

}  // namespace ft::test
