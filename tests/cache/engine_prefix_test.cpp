// The engine with the prefix cache: usage.cached_tokens, identical greedy output with the cache
// on and off (attention-only and hybrid fixtures), occupancy in EngineStats, nothing leaked.
#include <gtest/gtest.h>

#include "engine/engine.h"

namespace ft {
namespace {

const std::string k_demo = FT_DEMO;

struct Answer {
  std::vector<int32_t> ids;
  Usage usage;
};

Answer ask(Engine& e, const std::vector<int32_t>& prompt, int64_t n) {
  auto r = std::make_shared<Request>();
  r->prompt = prompt;
  r->max_tokens = n;
  r->ignore_eos = true;
  e.submit(r);
  Answer a;
  for (Event ev; r->events.pop(ev, 60000);) {
    a.ids.insert(a.ids.end(), ev.ids.begin(), ev.ids.end());
    if (ev.kind == Event::Kind::DONE) {
      EXPECT_EQ(ev.finish, FinishReason::LENGTH) << ev.error;
      a.usage = ev.usage;
      break;
    }
  }
  return a;
}

std::unique_ptr<Engine> engine(const std::string& fixture, int64_t prefix_tokens) {
  EngineOptions o{.max_running = 2, .ctx_size = 1024, .chunk = 64, .threads = 2,
                  .stats_log_s = 0};
  o.prefix_cache_tokens = prefix_tokens;
  return std::make_unique<Engine>(Model::load(std::string(FT_FIXTURES) + "/" + fixture),
                                  std::make_unique<Tokenizer>(Tokenizer::load(k_demo)), o);
}

std::vector<int32_t> turn_tokens(int seed, int n) {  // <|im_start|> x.. <|im_end|>
  std::vector<int32_t> t{1};
  for (int i = 0; i < n; ++i) t.push_back(20 + (seed * 131 + i * 17) % 900);
  t.push_back(2);
  return t;
}

class EnginePrefix : public ::testing::TestWithParam<std::string> {};

TEST_P(EnginePrefix, CachedTokensReportedAndOutputUnchanged) {
  auto on = engine(GetParam(), 512), off = engine(GetParam(), 0);
  std::vector<int32_t> p1 = turn_tokens(1, 40);
  p1.push_back(1);  // the next message's <|im_start|>: an anchor before it
  const Answer a1 = ask(*on, p1, 5);
  EXPECT_EQ(a1.usage.cached_tokens, 0);
  EXPECT_EQ(a1.ids, ask(*off, p1, 5).ids);
  // The agent resends the conversation with the reply (4 of the 5 tokens were forwarded) and a
  // new message: the prompt, then those 4 tokens, are cached.
  std::vector<int32_t> p2 = p1;
  p2.insert(p2.end(), a1.ids.begin(), a1.ids.end());
  const auto more = turn_tokens(2, 30);
  p2.insert(p2.end(), more.begin(), more.end());
  const Answer a2 = ask(*on, p2, 5);
  EXPECT_EQ(a2.usage.cached_tokens, int64_t(p1.size()) + 4);
  EXPECT_EQ(a2.usage.prompt_tokens, int64_t(p2.size()));
  EXPECT_EQ(a2.ids, ask(*off, p2, 5).ids);
  // Edit the first message: resume at the anchor before it (position 0: nothing) on hybrid
  // families; whole pages before the edit on attention-only ones.
  std::vector<int32_t> p3 = p2;
  p3[35] = p3[35] == 500 ? 501 : 500;
  const Answer a3 = ask(*on, p3, 5);
  const bool hybrid = GetParam() == "qwen3_next" || GetParam() == "qwen3_5_moe";
  EXPECT_EQ(a3.usage.cached_tokens, hybrid ? 0 : 32);
  EXPECT_EQ(a3.ids, ask(*off, p3, 5).ids);
  const EngineStats st = on->stats();
  EXPECT_EQ(st.cached_tokens_total, a2.usage.cached_tokens + a3.usage.cached_tokens);
  EXPECT_GT(st.prefix.pages_used, 0);
  EXPECT_EQ(st.prefix.pages_total, 32);
  EXPECT_GT(st.prefix.snapshots, 0);
  EXPECT_EQ(off->stats().prefix.pages_total, 0);
}

INSTANTIATE_TEST_SUITE_P(Families, EnginePrefix,
                         ::testing::Values("qwen3_moe", "mixtral", "qwen3_next", "qwen3_5_moe",
                                           "gpt_oss"));

}  // namespace
}  // namespace ft
