// Agent-session replay on a hybrid (DeltaNet) fixture: 20 turns of a coding agent (user task,
// assistant thinking + tool call, tool result; earlier thinking dropped when re-rendered, as
// Qwen3 templates do). Reports TTFT and recomputed prompt tokens per turn with anchors and with
// only every-512 checkpoints and the request's end, and checks recomputed <= 1.1x the new tokens with anchors.
// FT_AGENT_RESULT_TOKENS sets the tool-result size (default 200; 1500 grows past 30k tokens).
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>

#include "base/timer.h"
#include "cache/prefix_cache.h"
#include "engine/anchors.h"
#include "model/transformer.h"

namespace ft {
namespace {

constexpr int32_t IM_START = 1, IM_END = 2, TOOL_CALL = 3, TOOL_CALL_END = 4, THINK = 5,
                  THINK_END = 6, TOOL_RESP = 7, TOOL_RESP_END = 8, NL = 10, SYSTEM = 11,
                  USER = 12, ASSISTANT = 13;
using Tokens = std::vector<int32_t>;

struct Replay {
  const Model& model;
  Transformer& tf;
  AnchorTokens anchors;
  int64_t every;
  bool use_anchors;
  PrefixCache cache;
  // Runs one request: restore, prefill cut at anchors (saving), then "generates" reply by
  // forwarding it token by token (as decode would), saving at the end. Returns recomputed
  // prompt tokens and the time to the first token's logits.
  std::pair<int64_t, double> turn(const Tokens& prompt, const Tokens& reply) {
    const auto& c = model.config();
    KVCache kv(c, static_cast<int64_t>(prompt.size() + reply.size()) + 8);
    std::vector<float> logits(c.vocab_size);
    Timer t;
    int64_t pos = cache.restore(prompt, kv);
    const int64_t recomputed = static_cast<int64_t>(prompt.size()) - pos;
    for (int64_t cut : find_anchors(prompt, anchors, every, pos)) {
      tf.forward(prompt.data() + pos, cut - pos, pos, kv, logits.data(), false);
      pos = cut;
      // Without anchors only the every-N checkpoints (and the request's end) are kept.
      if (use_anchors || cut % every == 0) cache.save(prompt, cut, kv, true);
    }
    const double ttft = t.seconds();
    Tokens seq = prompt;
    for (size_t i = 0; i + 1 < reply.size(); ++i) {  // the last reply token is never forwarded
      tf.forward(&reply[i], 1, pos, kv, logits.data(), false);
      seq.push_back(reply[i]);
      ++pos;
    }
    cache.save(seq, pos, kv, true);
    return {recomputed, ttft};
  }
};

TEST(AgentReplay, AnchorsKeepRecomputeNearTheNewTokens) {
  const char* env = std::getenv("FT_AGENT_RESULT_TOKENS");
  const int result_tokens = env ? std::atoi(env) : 200;
  auto model = Model::load(std::string(FT_FIXTURES) + "/qwen3_next");
  ThreadPool pool(2, false);
  Transformer tf(*model, pool, 256);
  const AnchorTokens anchors{.after = {IM_END, TOOL_CALL_END, THINK_END, TOOL_RESP_END},
                             .before = {IM_START, TOOL_CALL, THINK, TOOL_RESP}};
  const PrefixCacheOptions o{.page_tokens = 16, .kv_pages = 8192, .snapshot_bytes = 256 << 20};
  Replay with{*model, tf, anchors, 512, true, PrefixCache(model->config(), o)};
  Replay without{*model, tf, AnchorTokens{}, 512, false, PrefixCache(model->config(), o)};
  std::mt19937 rng(3);
  auto text = [&](int n) {
    Tokens t(n);
    for (auto& x : t) x = static_cast<int32_t>(20 + rng() % 900);
    return t;
  };
  auto cat = [](std::initializer_list<Tokens> parts) {
    Tokens out;
    for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
    return out;
  };
  Tokens convo = cat({{IM_START, SYSTEM, NL}, text(300), {IM_END, NL},
                      {IM_START, USER, NL}, text(60), {IM_END, NL}});
  Tokens prev_seq;  // what the previous request forwarded (prompt + reply)
  std::printf("turn  prompt   new  recomputed(anchors)  ttft_ms  recomputed(every-512)  ttft_ms\n");
  int64_t sum_new = 0, sum_with = 0, sum_without = 0;
  for (int turn = 0; turn < 20; ++turn) {
    const Tokens prompt = cat({convo, {IM_START, ASSISTANT, NL}});
    const Tokens th = text(40 + turn % 7), call = text(20);
    const Tokens reply = cat({{THINK, NL}, th, {NL, THINK_END, NL, NL, TOOL_CALL, NL}, call,
                              {NL, TOOL_CALL_END, IM_END}});
    size_t common = 0;  // tokens shared with what the previous request forwarded
    while (common < prompt.size() && common < prev_seq.size() && prompt[common] == prev_seq[common])
      ++common;
    const int64_t fresh = static_cast<int64_t>(prompt.size() - common);
    const auto [rw, tw] = with.turn(prompt, reply);
    const auto [ro, to] = without.turn(prompt, reply);
    std::printf("%4d %7zu %5ld %20ld %8.1f %23ld %8.1f\n", turn, prompt.size(), (long)fresh,
                (long)rw, tw * 1e3, (long)ro, to * 1e3);
    if (turn > 0) {
      EXPECT_LE(rw, std::max<int64_t>(1, fresh * 11 / 10)) << "turn " << turn;
      sum_new += fresh, sum_with += rw, sum_without += ro;
    }
    prev_seq = cat({prompt, Tokens(reply.begin(), reply.end() - 1)});
    // Re-rendered history drops the thinking block; the tool result follows.
    convo = cat({convo, {IM_START, ASSISTANT, NL, TOOL_CALL, NL}, call, {NL, TOOL_CALL_END},
                 {IM_END, NL}, {IM_START, USER, NL, TOOL_RESP, NL}, text(result_tokens),
                 {NL, TOOL_RESP_END, IM_END, NL}});
    with.cache.check_invariants();
    without.cache.check_invariants();
  }
  std::printf("turns 1-19: new %ld, recomputed with anchors %ld (%.2fx), every-512 only %ld "
              "(%.2fx)\n", (long)sum_new, (long)sum_with, double(sum_with) / sum_new,
              (long)sum_without, double(sum_without) / sum_new);
  EXPECT_LE(sum_with * 10, sum_new * 11);
}

}  // namespace
}  // namespace ft
