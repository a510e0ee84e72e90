// Whole-expert tensor parallelism on the CPU (parallel/tp_experts.cpp): the ranks' expert ranges
// tile the experts, shards hold views of their own experts at full width with the router's
// width and offset in the config, and the ranks' partial MoE outputs (each computing only the
// routed experts it owns, ids mapped as the CUDA routing maps them) sum to the full block.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backend/cpu/thread_pool.h"
#include "base/error.h"
#include "model/model.h"
#include "ops/ops.h"
#include "parallel/tp_plan.h"
#include "tp_test_util.h"

namespace ft {
namespace {

using test::fixture;
using test::randv;

// Expert e of layer L on one row x [hidden], as the model runs it: SwiGLU, or (gpt-oss) the
// layer's gate/up biases, the clamped activation and the down bias (rows e of [E, I] / [E, H]).
std::vector<float> expert_out(ThreadPool& pool, const ModelConfig& c, const LayerWeights& L,
                              int64_t e, const float* x) {
  const ExpertWeights& w = L.experts[e];
  const int64_t I = w.gate.shape[0], H = w.down.shape[0];
  std::vector<float> a(I), b(I), y(H);
  auto row = [](const std::vector<float>& v, int64_t i, int64_t n) {
    return v.empty() ? nullptr : v.data() + i * n;
  };
  ops::matmul(pool, x, 1, w.gate, a.data(), row(L.expert_gate_bias, e, I));
  ops::matmul(pool, x, 1, w.up, b.data(), row(L.expert_up_bias, e, I));
  if (c.expert_act.kind == ExpertActivation::Kind::SILU)
    ops::silu_mul(pool, a.data(), b.data(), I, a.data());
  else
    ops::swiglu_oai(pool, a.data(), b.data(), I, c.expert_act.alpha, c.expert_act.limit, a.data());
  ops::matmul(pool, a.data(), 1, w.down, y.data(), row(L.expert_down_bias, e, H));
  return y;
}

TEST(TpExperts, ParseAndNames) {
  EXPECT_EQ(parse_tp_experts("whole"), TpExperts::WHOLE);
  EXPECT_EQ(parse_tp_experts("slice"), TpExperts::SLICE);
  EXPECT_EQ(parse_tp_experts("auto"), TpExperts::AUTO);
  EXPECT_STREQ(tp_experts_name(TpExperts::WHOLE), "whole");
  test::expect_refused([] { parse_tp_experts("rows"); }, "auto, slice or whole", "rows");
}

// auto: slices for decode (measured faster on two H200s), whole experts where widths do not split.
TEST(TpExperts, AutoPicksSlicesForDecodeUnlessTheWidthDoesNotSplit) {
  auto m = Model::load(fixture("qwen3_moe"));
  ModelConfig c = m->config();
  EXPECT_EQ(choose_tp_experts(TpExperts::AUTO, c, 2, false), TpExperts::SLICE);
  EXPECT_EQ(choose_tp_experts(TpExperts::AUTO, c, 2, true), TpExperts::SLICE);
  EXPECT_EQ(choose_tp_experts(TpExperts::WHOLE, c, 2, false), TpExperts::WHOLE);
  EXPECT_EQ(choose_tp_experts(TpExperts::SLICE, c, 2, false), TpExperts::SLICE);
  c.expert_dim = 30;
  EXPECT_EQ(choose_tp_experts(TpExperts::AUTO, c, 4, false), TpExperts::WHOLE);
  EXPECT_EQ(choose_tp_experts(TpExperts::AUTO, c, 1, false), TpExperts::SLICE);
}

TEST(TpExperts, WholePlanTilesTheExperts) {
  auto m = Model::load(fixture("qwen3_moe"));
  const ModelConfig& c = m->config();
  for (int world : {1, 2, 4}) {
    const TpPlan p = plan_tensor_parallel(c, world, TpExperts::WHOLE);
    int64_t e = 0, q = 0;
    for (const TpRank& r : p.ranks) {
      EXPECT_EQ(r.own_experts.begin, e);
      EXPECT_GT(r.own_experts.size(), 0);
      e = r.own_experts.end;
      EXPECT_EQ(r.q_heads.begin, q);  // attention split as the slice plan's
      q = r.q_heads.end;
      EXPECT_EQ(r.expert.begin, 0);
      EXPECT_EQ(r.expert.end, c.expert_dim);
      const ModelConfig s = shard_config(c, r);
      EXPECT_EQ(s.n_experts, r.own_experts.size());
      EXPECT_EQ(s.router_experts, c.n_experts);
      EXPECT_EQ(s.routed_experts(), c.n_experts);
      EXPECT_EQ(s.expert_begin, r.own_experts.begin);
      EXPECT_EQ(s.expert_dim, c.expert_dim);
      EXPECT_EQ(s.top_k, c.top_k);
    }
    EXPECT_EQ(e, c.n_experts);
    EXPECT_EQ(q, c.n_heads);
  }
  // The slice plan leaves own_experts empty and the config's router width alone.
  const TpPlan s = plan_tensor_parallel(c, 2, TpExperts::SLICE);
  EXPECT_EQ(s.ranks[1].own_experts.size(), 0);
  EXPECT_EQ(shard_config(c, s.ranks[1]).router_experts, 0);
  EXPECT_EQ(shard_config(c, s.ranks[1]).routed_experts(), c.n_experts);
  // Whole experts take widths the slice plan refuses.
  ModelConfig odd = c;
  odd.expert_dim = 30;
  EXPECT_NO_THROW(plan_whole_experts(odd, 4));
  EXPECT_THROW(plan_tensor_parallel(odd, 4), Error);
}

TEST(TpExperts, RefusalsAreOneLine) {
  auto m = Model::load(fixture("qwen3_moe"));
  auto refused = [](const ModelConfig& c, int world, const char* needle) {
    test::expect_refused([&] { plan_whole_experts(c, world); }, needle,
                         "world " + std::to_string(world));
  };
  ModelConfig c = m->config();
  c.n_experts = 0;
  refused(c, 2, "no routed experts");
  c = m->config();
  c.n_experts = 2;
  c.top_k = 1;
  refused(c, 4, "fewer than 4 GPUs");
  refused(m->config(), 3, "attention heads");  // the slice plan's refusals stand
}

TEST(TpExperts, ShardsHoldTheirOwnExpertsAsViews) {
  auto m = Model::load(fixture("qwen3_moe"));
  const ModelConfig& c = m->config();
  const TpPlan p = plan_whole_experts(c, 2);
  for (int rank = 0; rank < 2; ++rank) {
    auto s = shard_model(*m, p, rank);
    const TpRank& r = p.ranks[rank];
    EXPECT_EQ(s->config().n_experts, r.own_experts.size());
    for (int64_t l = 0; l < c.n_layers; ++l) {
      const LayerWeights &S = s->weights().layers[l], &L = m->weights().layers[l];
      if (L.experts.empty()) continue;
      ASSERT_EQ(static_cast<int64_t>(S.experts.size()), r.own_experts.size());
      EXPECT_EQ(S.router.data, L.router.data);  // replicated
      for (int64_t e = 0; e < r.own_experts.size(); ++e) {
        const ExpertWeights &se = S.experts[e], &fe = L.experts[r.own_experts.begin + e];
        EXPECT_EQ(se.gate.data, fe.gate.data);  // views, full width, no copies
        EXPECT_EQ(se.up.data, fe.up.data);
        EXPECT_EQ(se.down.data, fe.down.data);
        EXPECT_EQ(se.down.shape[1], c.expert_dim);
      }
    }
  }
}

// Route n tokens over all experts (replicated router), then each rank adds w_k * expert(x) only
// for ids it owns (id - begin in its shard; others -1, as cuda::RouteLocal maps them): the
// ranks' partials sum to the full MoE output (gpt-oss: with each rank's expert biases; MXFP4
// experts; the hybrid families' routed experts).
TEST(TpExperts, PartialSumsEqualTheFullMoeBlock) {
  ThreadPool pool(2, false);
  for (const char* name : {"qwen3_moe", "mixtral", "olmoe", "qwen3_moe_yarn", "gpt_oss",
                           "gpt_oss_mxfp4", "qwen3_next", "qwen3_5_moe"}) {
    auto m = Model::load(fixture(name));
    const ModelConfig& c = m->config();
    int layers_checked = 0;
    for (int world : {2, 4}) {
      TpPlan p;
      try {
        p = plan_whole_experts(c, world, tp_align(m->weights()));
      } catch (const Error&) {
        EXPECT_EQ(world, 4) << name;  // e.g. olmoe's full-width k norm at 4 ranks
        continue;
      }
      std::vector<std::unique_ptr<Model>> shards;
      for (int r = 0; r < world; ++r) shards.push_back(shard_model(*m, p, r));
      const int64_t n = 3, H = c.hidden, E = c.n_experts, k = c.top_k;
      const auto x = randv(n * H, 21);
      for (int64_t l = 0; l < c.n_layers; ++l) {
        const LayerWeights& L = m->weights().layers[l];
        if (L.experts.empty()) continue;
        std::vector<float> logits(n * E), w(n * k);
        std::vector<int32_t> ids(n * k);
        ops::matmul(pool, x.data(), n, L.router, logits.data(),
                    L.router_bias.empty() ? nullptr : L.router_bias.data());
        ops::route_topk_softmax(logits.data(), n, E, k, c.norm_topk_prob, ids.data(), w.data());
        std::vector<float> full(n * H, 0.f), sum(n * H, 0.f);
        for (int64_t t = 0; t < n; ++t)
          for (int64_t j = 0; j < k; ++j) {
            const auto y = expert_out(pool, c, L, ids[t * k + j], x.data() + t * H);
            for (int64_t i = 0; i < H; ++i) full[t * H + i] += w[t * k + j] * y[i];
          }
        int hits = 0;
        for (int r = 0; r < world; ++r) {
          const ModelConfig& sc = shards[r]->config();
          const LayerWeights& S = shards[r]->weights().layers[l];
          for (int64_t t = 0; t < n; ++t)
            for (int64_t j = 0; j < k; ++j) {
              const int64_t local = ids[t * k + j] - sc.expert_begin;
              if (local < 0 || local >= sc.n_experts) continue;  // another rank's expert
              ++hits;
              const auto y = expert_out(pool, sc, S, local, x.data() + t * H);
              for (int64_t i = 0; i < H; ++i) sum[t * H + i] += w[t * k + j] * y[i];
            }
        }
        EXPECT_EQ(hits, n * k) << name << ": every routed expert computed once";
        ++layers_checked;
        float max_ref = 0, max_d = 0;
        for (int64_t i = 0; i < n * H; ++i) {
          max_ref = std::max(max_ref, std::fabs(full[i]));
          max_d = std::max(max_d, std::fabs(sum[i] - full[i]));
        }
        EXPECT_LE(max_d, 1e-5f * std::max(1.f, max_ref)) << name << " world " << world;
      }
    }
    EXPECT_GT(layers_checked, 0) << name;
  }
}

}  // namespace
}  // namespace ft
