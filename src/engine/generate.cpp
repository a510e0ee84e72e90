// generate(): prompt prefill (one batched pass), then one decode step per new token.
#include "engine/generate.h"

#include <algorithm>

#include "base/error.h"
#include "base/timer.h"

namespace ft {

std::vector<int32_t> generate(Transformer& tf, const std::vector<int32_t>& prompt,
                              const GenerateParams& p, GenerateStats* stats,
                              const std::function<bool(int32_t)>& on_token) {
  if (prompt.empty()) fail("the prompt is empty");
  const auto& c = tf.model().config();
  const int64_t total = static_cast<int64_t>(prompt.size()) + p.max_new_tokens;
  KVCache kv(c, total);
  std::vector<float> logits(c.vocab_size);
  Sampler sampler(p.sampling);
  Timer timer;
  tf.forward(prompt.data(), static_cast<int64_t>(prompt.size()), 0, kv, logits.data(), false);
  GenerateStats st;
  st.prompt_tokens = static_cast<int64_t>(prompt.size());
  st.prefill_s = timer.seconds();
  timer.reset();
  std::vector<int32_t> out;
  int64_t pos = static_cast<int64_t>(prompt.size());
  while (static_cast<int64_t>(out.size()) < p.max_new_tokens) {
    int32_t id = sampler.sample(logits.data(), c.vocab_size);
    out.push_back(id);
    bool stop = std::find(p.stop_ids.begin(), p.stop_ids.end(), id) != p.stop_ids.end();
    if (on_token && !on_token(id)) stop = true;
    if (stop || static_cast<int64_t>(out.size()) == p.max_new_tokens) break;
    tf.forward(&id, 1, pos++, kv, logits.data(), false);
  }
  st.new_tokens = static_cast<int64_t>(out.size());
  st.decode_s = timer.seconds();
  if (stats) *stats = st;
  return out;
}

}  // namespace ft
