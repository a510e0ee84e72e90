// Test helper: a model's next-token log-probabilities at every position of a token sequence
// (one prefill on the CPU), the input of the KL checks against a base model.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/cpu/thread_pool.h"
#include "model/kl_divergence.h"
#include "model/transformer.h"

namespace ft::test {

// [ids.size(), vocab] log-probabilities.
inline std::vector<float> log_probs(const Model& m, const std::vector<int32_t>& ids) {
  const int64_t T = static_cast<int64_t>(ids.size()), V = m.config().vocab_size;
  ThreadPool pool(2, false);
  Transformer tf(m, pool, 64);
  KVCache kv(m.config(), T);
  std::vector<float> lg(T * V), lp(T * V);
  tf.forward(ids.data(), T, 0, kv, lg.data(), true);
  for (int64_t t = 0; t < T; ++t) log_softmax(lg.data() + t * V, V, lp.data() + t * V);
  return lp;
}

}  // namespace ft::test
