// PrefixCache over every fixture family: greedy output identical with and without the cache,
// scripted agent traces with exact counts of recomputed tokens, eviction under small pools, and
// no leaked pages or locks after each trace.
#include "cache/prefix_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "engine/anchors.h"
#include "io/safetensors.h"
#include "model/transformer.h"

namespace ft {
namespace {

constexpr int64_t kPage = 16;
// Synthetic special ids inside the fixtures' 1000-token vocabulary.
constexpr int32_t IM_START = 1, IM_END = 2, TOOL_CALL = 3, TOOL_CALL_END = 4, THINK = 5,
                  THINK_END = 6, TOOL_RESP = 7, TOOL_RESP_END = 8, NL = 10, SYSTEM = 11, USER = 12,
                  ASSISTANT = 13;
const AnchorTokens kAnchors{.after = {IM_END, TOOL_CALL_END, THINK_END, TOOL_RESP_END},
                            .before = {IM_START, TOOL_CALL, THINK, TOOL_RESP}};

using Tokens = std::vector<int32_t>;

Tokens text(std::mt19937& rng, int n) {  // ordinary tokens
  Tokens t(n);
  for (auto& x : t) x = static_cast<int32_t>(20 + rng() % 900);
  return t;
}
Tokens cat(std::initializer_list<Tokens> parts) {
  Tokens out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}
Tokens msg(int32_t role, const Tokens& content) {  // <|im_start|>role\n content <|im_end|>\n
  return cat({{IM_START, role, NL}, content, {IM_END, NL}});
}
Tokens think(const Tokens& t) { return cat({{THINK, NL}, t, {NL, THINK_END, NL, NL}}); }
Tokens tool_call(const Tokens& t) { return cat({{TOOL_CALL, NL}, t, {NL, TOOL_CALL_END}}); }
Tokens tool_resp(const Tokens& t) { return cat({{TOOL_RESP, NL}, t, {NL, TOOL_RESP_END}}); }
Tokens gen_header() { return {IM_START, ASSISTANT, NL}; }

int32_t argmax(const float* x, int64_t n) {
  return static_cast<int32_t>(std::max_element(x, x + n) - x);
}

struct TurnResult {
  Tokens out;          // greedy tokens
  int64_t recomputed;  // prompt tokens run through the model
  std::vector<float> first_logits;
};

class PrefixCacheTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    model_ = Model::load(std::string(FT_FIXTURES) + "/" + GetParam());
    tf_ = std::make_unique<Transformer>(*model_, pool_, 64);
  }
  const ModelConfig& config() const { return model_->config(); }

  // One request: restore from cache (when given), prefill in segments cut at the anchors
  // (saving pages and a snapshot at each), then gen greedy tokens; the sequence is saved again
  // at the end (what the engine does when a request finishes).
  TurnResult run(PrefixCache* cache, const Tokens& prompt, int gen = 4, int64_t every = 0) {
    const int64_t V = config().vocab_size, len = static_cast<int64_t>(prompt.size());
    KVCache kv(config(), 2048);
    std::vector<float> logits(V);
    int64_t pos = cache ? cache->restore(prompt, kv) : 0;
    TurnResult r{.recomputed = len - pos};
    const std::vector<int64_t> cuts =
        cache ? find_anchors(prompt, kAnchors, every, pos) : std::vector<int64_t>{len};
    for (int64_t cut : cuts) {
      tf_->forward(prompt.data() + pos, cut - pos, pos, kv, logits.data(), false);
      pos = cut;
      if (cache) cache->save(prompt, cut, kv, true);
    }
    r.first_logits = logits;
    Tokens seq = prompt;
    for (int g = 0; g < gen; ++g) {
      const int32_t next = argmax(logits.data(), V);
      r.out.push_back(next);
      seq.push_back(next);
      if (g + 1 < gen) {
        tf_->forward(&next, 1, pos, kv, logits.data(), false);
        ++pos;
      }
    }
    if (cache && pos > len) cache->save(seq, pos, kv, true);
    return r;
  }

  // A turn with the cache must give the uncached greedy tokens; returns the recomputed count.
  int64_t turn(PrefixCache& cache, const Tokens& prompt, int gen = 4) {
    const TurnResult want = run(nullptr, prompt, gen);
    const TurnResult got = run(&cache, prompt, gen);
    EXPECT_EQ(got.out, want.out) << "greedy output differs with the cache";
    float max_ref = 0, max_d = 0;
    for (size_t i = 0; i < want.first_logits.size(); ++i) {
      max_ref = std::max(max_ref, std::fabs(want.first_logits[i]));
      max_d = std::max(max_d, std::fabs(want.first_logits[i] - got.first_logits[i]));
    }
    EXPECT_LE(max_d, 1e-4f * max_ref) << "logits drift with the cache";
    cache.check_invariants();
    return got.recomputed;
  }

  bool hybrid() const { return config().has_delta(); }
  // Restart point of a prompt that diverges from the cached one after `common` tokens, when
  // the deepest anchor snapshot below the divergence is at `anchor`.
  int64_t resume(int64_t anchor, int64_t common) const {
    return hybrid() ? anchor : std::max(anchor, common / kPage * kPage);
  }

  std::unique_ptr<Model> model_;
  ThreadPool pool_{2, false};
  std::unique_ptr<Transformer> tf_;
  std::mt19937 rng_{7};
};

PrefixCacheOptions small_opts(int64_t pages = 512, size_t snap = 64 << 20) {
  return {.page_tokens = kPage, .kv_pages = pages, .snapshot_bytes = snap};
}

TEST_P(PrefixCacheTest, ReferencePromptGreedyIdenticalColdWarmAndExtended) {
  auto ref = SafetensorsSet::open_file(std::string(FT_FIXTURES) + "/" + GetParam() +
                                       "/reference.safetensors");
  const TensorView ids = ref.get("prompt_ids");
  Tokens prompt(ids.numel());
  for (int64_t i = 0; i < ids.numel(); ++i) prompt[i] = int32_t(ids.as<int64_t>()[i]);
  PrefixCache cache(config(), small_opts());
  const int64_t len = static_cast<int64_t>(prompt.size());
  EXPECT_EQ(turn(cache, prompt, 8), len);  // cold
  EXPECT_EQ(turn(cache, prompt, 8), 1);    // warm: only the last token for its logits
  Tokens longer = cat({prompt, text(rng_, 40)});
  // The first run saved prompt + 7 generated tokens; the extension diverges right after the
  // prompt (greedy tokens differ from the random text), so the prompt-end snapshot is used.
  EXPECT_EQ(turn(cache, longer, 8), 40);
}

TEST_P(PrefixCacheTest, AgentTraceAppendEditDropThinking) {
  PrefixCache cache(config(), small_opts());
  const Tokens sys = msg(SYSTEM, text(rng_, 37));
  const Tokens user = msg(USER, text(rng_, 23));
  const Tokens th = think(text(rng_, 19)), call = tool_call(text(rng_, 11));
  const Tokens asst = msg(ASSISTANT, cat({th, call}));
  const Tokens t1 = cat({sys, user, asst});
  EXPECT_EQ(turn(cache, t1), int64_t(t1.size()));

  // 1. Append a tool result: only the new message and the generation header are computed.
  const Tokens res = text(rng_, 29);
  const Tokens t2 = cat({t1, msg(USER, tool_resp(res)), gen_header()});
  EXPECT_EQ(turn(cache, t2), int64_t(t2.size() - t1.size()));

  // 2. Edit the last tool result (its 6th token): resume before <tool_response>.
  Tokens res2 = res;
  res2[5] = res2[5] == 500 ? 501 : 500;
  const Tokens t3 = cat({t1, msg(USER, tool_resp(res2)), gen_header()});
  const int64_t at_resp = int64_t(t1.size()) + 3, common3 = at_resp + 2 + 5;
  EXPECT_EQ(turn(cache, t3), int64_t(t3.size()) - resume(at_resp, common3));

  // 3. Drop the previous thinking block: resume before where <think> was.
  const Tokens asst_nothink = msg(ASSISTANT, call);
  const Tokens t4 = cat({sys, user, asst_nothink, msg(USER, tool_resp(res)), gen_header()});
  const int64_t at_think = int64_t(sys.size() + user.size()) + 3;
  EXPECT_EQ(turn(cache, t4), int64_t(t4.size()) - resume(at_think, at_think));

  // The same conversations again are all cached (but the last token).
  EXPECT_EQ(turn(cache, t2), 1);
  EXPECT_EQ(turn(cache, t3), 1);
  EXPECT_EQ(turn(cache, t4), 1);
}

TEST_P(PrefixCacheTest, AgentTraceBranchAndInterleave) {
  PrefixCache cache(config(), small_opts());
  // Two conversations branching from one prefix.
  const Tokens prefix = cat({msg(SYSTEM, text(rng_, 50)), msg(USER, text(rng_, 20))});
  const Tokens b1 = cat({prefix, msg(ASSISTANT, text(rng_, 15)), msg(USER, text(rng_, 9))});
  const Tokens b2 = cat({prefix, msg(ASSISTANT, text(rng_, 12)), msg(USER, text(rng_, 8))});
  EXPECT_EQ(turn(cache, b1), int64_t(b1.size()));
  // b2 resumes at the anchor before the assistant message (<|im_start|> at prefix.size()).
  const int64_t p = int64_t(prefix.size());
  EXPECT_EQ(turn(cache, b2), int64_t(b2.size()) - resume(p, p + 3));
  const Tokens b1b = cat({b1, msg(ASSISTANT, text(rng_, 10))});
  EXPECT_EQ(turn(cache, b1b), int64_t(b1b.size() - b1.size()));  // b1 is still cached
  const Tokens b2b = cat({b2, msg(ASSISTANT, text(rng_, 10))});
  EXPECT_EQ(turn(cache, b2b), int64_t(b2b.size() - b2.size()));

  // Two sessions interleaved turn by turn: each turn computes only its new tokens.
  Tokens s = msg(SYSTEM, text(rng_, 33)), u = msg(SYSTEM, text(rng_, 41));
  EXPECT_EQ(turn(cache, s), int64_t(s.size()));
  EXPECT_EQ(turn(cache, u), int64_t(u.size()));
  for (int k = 0; k < 3; ++k) {
    const Tokens ns =
        cat({s, msg(USER, text(rng_, 7 + k)), msg(ASSISTANT, tool_call(text(rng_, 5)))});
    EXPECT_EQ(turn(cache, ns), int64_t(ns.size() - s.size()));
    const Tokens nu = cat({u, msg(USER, text(rng_, 11)), msg(ASSISTANT, text(rng_, 6 + k))});
    EXPECT_EQ(turn(cache, nu), int64_t(nu.size() - u.size()));
    s = ns;
    u = nu;
  }
}

TEST_P(PrefixCacheTest, AppendingToTheGeneratedReplyReusesTheDecodedTokens) {
  PrefixCache cache(config(), small_opts());
  const Tokens t1 = cat({msg(SYSTEM, text(rng_, 30)), msg(USER, text(rng_, 10)), gen_header()});
  const TurnResult want = run(nullptr, t1, 6);
  EXPECT_EQ(turn(cache, t1, 6), int64_t(t1.size()));
  // The agent resends the reply as generated plus a new user message; the first 5 generated
  // tokens were forwarded (and saved at the end of the request).
  const Tokens t2 = cat({t1, want.out, {IM_END, NL}, msg(USER, text(rng_, 12))});
  EXPECT_EQ(turn(cache, t2), int64_t(t2.size() - t1.size() - 5));
}

TEST_P(PrefixCacheTest, EvictionUnderSmallPoolsStaysCorrect) {
  // 10 pages (160 tokens) and room for 8 of the largest snapshots: two sessions of up to 107
  // and 117 tokens evict each other's pages and snapshots.
  KVCache probe(config(), kPage);
  int64_t n_attn = 0;
  for (int64_t l = 0; l < config().n_layers; ++l) n_attn += !config().is_delta(l);
  const size_t snap_max =
      probe.conv.size() + probe.ssm.size() + 2 * (kPage - 1) * probe.kv_dim * n_attn;
  PrefixCache cache(config(), small_opts(10, 8 * snap_max * sizeof(float)));
  Tokens s = msg(SYSTEM, text(rng_, 60)), u = msg(SYSTEM, text(rng_, 70));
  for (int k = 0; k < 3; ++k) {
    s = cat({s, msg(USER, text(rng_, 9))});
    u = cat({u, msg(USER, text(rng_, 9))});
    const int64_t rs = turn(cache, s), ru = turn(cache, u);
    EXPECT_GE(rs, 1);
    EXPECT_LE(rs, int64_t(s.size()));
    EXPECT_GE(ru, 1);
    EXPECT_LE(ru, int64_t(u.size()));
    const auto st = cache.stats();
    EXPECT_LE(st.pages_used, 10);
    EXPECT_LE(st.snapshot_bytes, st.snapshot_budget);
  }
  const auto st = cache.stats();
  EXPECT_GT(st.evicted_pages, 0);
  EXPECT_GT(st.snapshot_evictions, 0);
  // The most recent session is still cached whole: a resend recomputes its last token only.
  EXPECT_EQ(turn(cache, u), 1);
}

TEST_P(PrefixCacheTest, LongPrefillCheckpointsEveryNTokens) {
  PrefixCache cache(config(), small_opts());
  const Tokens doc = text(rng_, 300);  // no special tokens: only every-N anchors and the end
  const TurnResult a = run(&cache, doc, 1, 64);
  EXPECT_EQ(a.recomputed, 300);
  Tokens edited = doc;
  edited[200] = edited[200] == 30 ? 31 : 30;
  // Resumes at the checkpoint at 192 (every 64) on both kinds of family (192 is whole pages).
  const TurnResult b = run(&cache, edited, 1, 64);
  EXPECT_EQ(b.recomputed, 300 - 192);
  EXPECT_EQ(b.out, run(nullptr, edited, 1).out);
  cache.check_invariants();
}

INSTANTIATE_TEST_SUITE_P(Families, PrefixCacheTest,
                         ::testing::Values("qwen3_moe", "qwen3_moe_yarn", "mixtral", "olmoe",
                                           "qwen3_next", "qwen3_5_moe", "gpt_oss"));

}  // namespace
}  // namespace ft
