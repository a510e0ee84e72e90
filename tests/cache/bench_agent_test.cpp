// ft bench agent on the CPU: a small coding-agent trace (tests/cache/agent_session_small.json)
// rendered through bench/traces/qwen3_agent.jinja, replayed on a tiny synthetic Qwen3.6-shaped
// hybrid model through the engine and the runner's prefix export/import. Each turn's cached
// tokens must be exactly the deepest anchor an earlier request saved on the shared prefix (so
// recomputed = prompt - that), with semantic anchors and with every-N checkpoints only; with
// anchors recomputed stays <= 1.1x the new tokens of every turn.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include "cli/bench_agent.h"
#include "engine/anchors.h"
#include "engine/backend.h"
#include "model/model.h"

namespace ft::cli {
namespace {

const std::string k_root = FT_SOURCE_DIR;
using Prompts = std::vector<std::vector<int32_t>>;

// What the prefix cache must hold for request i: every earlier request j saved snapshots at
// its anchors after its restore point and at its end; request i resumes at the deepest one
// (< its length) on its own prefix.
std::vector<int64_t> expected_cached(const Prompts& prompts, const AnchorTokens& a,
                                     int64_t every, int64_t gap) {
  std::vector<int64_t> cached;
  std::vector<std::vector<int64_t>> saved;
  for (const auto& p : prompts) {
    int64_t best = 0;
    for (size_t j = 0; j < saved.size(); ++j)
      for (int64_t s : saved[j])
        if (s > best && s < static_cast<int64_t>(p.size()) &&
            s <= static_cast<int64_t>(prompts[j].size()) &&
            std::equal(p.begin(), p.begin() + s, prompts[j].begin()))
          best = s;
    cached.push_back(best);
    saved.push_back(thin_anchors(find_anchors(p, a, every, best), gap, best,
                                 static_cast<int64_t>(p.size())));
  }
  return cached;
}

class BenchAgent : public ::testing::TestWithParam<int64_t> {};  // the anchor gap

TEST_P(BenchAgent, RecomputedTokensMatchTheAnchorsOnTheCpu) {
  auto tok_owned = std::make_unique<Tokenizer>(agent_tokenizer(k_root + "/models/demo"));
  const Tokenizer& tok = *tok_owned;  // the engine owns it later
  ASSERT_GE(tok.token_id("</tool_call>"), 0);
  const ChatTemplate tpl = ChatTemplate::load(k_root + "/bench/traces/qwen3_agent.jinja");
  std::ifstream f(k_root + "/tests/cache/agent_session_small.json");
  const Prompts prompts = render_agent_trace(nlohmann::ordered_json::parse(f), tpl, tok);
  ASSERT_EQ(prompts.size(), 8u);
  const ModelConfig c = agent_model_config("tiny", static_cast<int64_t>(tok.vocab_size()));
  ASSERT_TRUE(c.has_delta());
  EngineOptions eo{.max_running = 1, .ctx_size = 16384, .chunk = 512, .threads = 2,
                   .stats_log_s = 0};
  eo.anchor_every = 256;
  eo.anchor_gap = GetParam();
  BackendOptions b;
  b.moe_backend = "cpu";
  auto model = Model::synthetic(c, 7);
  auto runner = make_runner(*model, eo, b);
  Engine e(std::move(model), std::move(tok_owned), eo, std::move(runner));
  const AgentRun cold = replay_agent(e, prompts, "off", 0, true);
  for (const AgentTurn& t : cold.turns) EXPECT_EQ(t.recomputed, t.prompt);
  for (bool semantic : {true, false}) {
    e.reset_prefix_cache(semantic);
    const AgentRun r = replay_agent(e, prompts, semantic ? "anchors" : "every");
    const std::vector<int64_t> want =
        expected_cached(prompts, semantic ? anchor_tokens(tok) : AnchorTokens{}, 256, GetParam());
    ASSERT_EQ(r.turns.size(), prompts.size());
    int64_t fresh = 0, recomputed = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
      const AgentTurn& t = r.turns[i];
      EXPECT_EQ(t.recomputed, t.prompt - want[i]) << (semantic ? "anchors" : "every") << " turn " << i;
      // One pass per chunk: chunks of at most 512 tokens that end at every anchor (the CPU
      // runner captures no state inside a pass).
      const std::vector<int64_t> cuts = thin_anchors(
          find_anchors(prompts[i], semantic ? anchor_tokens(tok) : AnchorTokens{}, 256, want[i]),
          GetParam(), want[i], t.prompt);
      int64_t passes = 0;
      for (int64_t done = want[i]; done < t.prompt; ++passes) {
        int64_t n = std::min<int64_t>(512, t.prompt - done);
        for (int64_t c : cuts)
          if (c > done) {
            n = std::min(n, c - done);
            break;
          }
        done += n;
      }
      EXPECT_EQ(t.passes, passes) << (semantic ? "anchors" : "every") << " turn " << i;
      EXPECT_GT(t.ttft_s, 0);
      EXPECT_EQ(t.first_id, cold.turns[i].first_id) << "greedy token differs with the cache";
      if (i == 0) continue;
      fresh += t.fresh;
      recomputed += t.recomputed;
      if (semantic) EXPECT_LE(t.recomputed * 10, t.fresh * 11 + 10 * GetParam()) << "turn " << i;
    }
    // Without them a request that edits inside the previous one (a truncated tool result, the
    // thinking dropped after a new user message) resumes at an earlier checkpoint.
    if (!semantic) EXPECT_GT(r.max_ratio, 1.1);
    EXPECT_LE(recomputed, r.total_ratio * fresh + 1);
  }
}

INSTANTIATE_TEST_SUITE_P(Gap, BenchAgent, ::testing::Values(0, 48));

}  // namespace
}  // namespace ft::cli
