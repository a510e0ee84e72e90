// Tensor-parallel plan and shards on the CPU: ranges tile the heads and widths, refusals are
// one-line errors, shard tensors are the right slices, and the Megatron identities hold on
// the fixtures (row-parallel partial sums over the ranks == the unsharded block).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "backend/cpu/thread_pool.h"
#include "base/error.h"
#include "model/model.h"
#include "ops/delta_net.h"
#include "ops/ops.h"
#include "parallel/tp_plan.h"
#include "tp_test_util.h"

#include "fp8_model.h"

namespace ft {
namespace {

using test::fixture;
using test::randv;

// f32 copy of element (r, c) of a 2-D F32/BF16/F16 matrix.
float at(const TensorView& t, int64_t r, int64_t c) {
  std::vector<float> row(t.shape[1]);
  ThreadPool pool(1, false);
  std::vector<float> x(t.shape[1], 0.f);
  x[c] = 1.f;
  std::vector<float> y(t.shape[0]);
  ops::matmul(pool, x.data(), 1, t, y.data());  // column c of W = W e_c
  return y[r];
}

void expect_near(const std::vector<float>& a, const std::vector<float>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size());
  float max_ref = 0, max_d = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    max_ref = std::max(max_ref, std::fabs(b[i]));
    max_d = std::max(max_d, std::fabs(a[i] - b[i]));
  }
  EXPECT_LE(max_d, 1e-4f * std::max(1.f, max_ref)) << what;
}

TEST(TpPlan, RangesTileHeadsAndWidths) {
  auto m = Model::load(fixture("qwen3_moe"));
  const ModelConfig& c = m->config();
  for (int world : {1, 2, 4}) {
    const TpPlan p = plan_tensor_parallel(c, world);
    ASSERT_EQ(p.ranks.size(), size_t(world));
    EXPECT_EQ(p.kv_replicated, world > c.n_kv_heads);
    int64_t q = 0, e = 0, f = 0;
    for (const TpRank& r : p.ranks) {
      EXPECT_EQ(r.q_heads.begin, q);
      q = r.q_heads.end;
      EXPECT_EQ(r.expert.begin, e);
      e = r.expert.end;
      EXPECT_EQ(r.ffn.begin, f);
      f = r.ffn.end;
      EXPECT_EQ(r.adds_biases, r.rank == 0);
      // GQA: every q head of the rank reads a KV head the rank holds.
      const int64_t group = c.n_heads / c.n_kv_heads;
      EXPECT_GE(r.q_heads.begin / group, r.kv_heads.begin);
      EXPECT_LT((r.q_heads.end - 1) / group, r.kv_heads.end);
      const ModelConfig s = shard_config(c, r);
      EXPECT_EQ(s.q_dim() * world, c.q_dim());
      EXPECT_EQ(s.expert_dim * world, c.expert_dim);
      EXPECT_EQ(s.ffn_dim * world, c.ffn_dim);
      EXPECT_EQ(s.hidden, c.hidden);
    }
    EXPECT_EQ(q, c.n_heads);
    EXPECT_EQ(e, c.expert_dim);
    EXPECT_EQ(f, c.ffn_dim);
  }
  // world 4 > 2 KV heads: ranks 0,1 share KV head 0, ranks 2,3 KV head 1.
  const TpPlan p4 = plan_tensor_parallel(c, 4);
  EXPECT_EQ(p4.ranks[1].kv_heads.begin, 0);
  EXPECT_EQ(p4.ranks[2].kv_heads.begin, 1);
}

TEST(TpPlan, RefusalsAreOneLine) {
  auto m = Model::load(fixture("qwen3_moe"));
  auto refused = [](const ModelConfig& c, int world, const char* needle) {
    test::expect_refused([&] { plan_tensor_parallel(c, world); }, needle,
                         "world " + std::to_string(world));
  };
  refused(m->config(), 0, ">= 1");
  refused(m->config(), 3, "attention heads");
  ModelConfig c = m->config();
  c.n_heads = 6, c.n_kv_heads = 3;
  refused(c, 2, "KV heads");
  c = m->config();
  c.expert_dim = 30;
  refused(c, 4, "expert width");
  c = m->config();
  c.ffn_dim = 90;
  refused(c, 4, "dense MLP width");
  refused(Model::load(fixture("qwen3_next"))->config(), 4, "DeltaNet key heads");
  c = m->config();
  c.shared_expert_dim = 90;
  refused(c, 4, "shared expert width");
  // MXFP4 experts of 96 columns: 3 blocks of 32 cannot go to 4 GPUs.
  auto mx = Model::load(fixture("gpt_oss_mxfp4"));
  test::expect_refused([&] { plan_tensor_parallel(*mx, 4); }, "whole blocks of 32",
                       "gpt_oss_mxfp4 at 4");
  refused(Model::load(fixture("olmoe"))->config(), 4, "full-width k norm");
}

TEST(TpShard, SlicesAreTheRightParts) {
  auto m = Model::load(fixture("qwen3_moe"));
  const ModelConfig& c = m->config();
  const TpPlan p = plan_tensor_parallel(c, 2);
  const LayerWeights& L = m->weights().layers[0];
  for (int rank = 0; rank < 2; ++rank) {
    auto s = shard_model(*m, p, rank);
    const LayerWeights& S = s->weights().layers[0];
    const TpRank& r = p.ranks[rank];
    const int64_t hd = c.head_dim;
    EXPECT_EQ(S.q.w.shape[0], r.q_heads.size() * hd);
    EXPECT_EQ(S.o.w.shape[1], r.q_heads.size() * hd);
    EXPECT_EQ(S.o.w.shape[0], c.hidden);
    for (int64_t i : {int64_t{0}, hd + 3}) {
      EXPECT_EQ(at(S.q.w, i, 5), at(L.q.w, r.q_heads.begin * hd + i, 5));
      EXPECT_EQ(at(S.o.w, 7, i), at(L.o.w, 7, r.q_heads.begin * hd + i));
    }
    const ExpertWeights &se = S.experts[3], &fe = L.experts[3];
    EXPECT_EQ(se.down.shape[1], c.expert_dim / 2);
    EXPECT_EQ(at(se.gate, 2, 9), at(fe.gate, r.expert.begin + 2, 9));
    EXPECT_EQ(at(se.down, 9, 2), at(fe.down, 9, r.expert.begin + 2));
    EXPECT_EQ(s->weights().embed.data, m->weights().embed.data);  // replicated, not copied
    EXPECT_EQ(S.router.data, L.router.data);
  }
}

// SwiGLU over (gate, up, down) of n rows of x.
std::vector<float> swiglu(ThreadPool& pool, const std::vector<float>& x, int64_t n,
                          const TensorView& g, const TensorView& u, const TensorView& d) {
  const int64_t I = g.shape[0], H = d.shape[0];
  std::vector<float> a(n * I), b(n * I), y(n * H);
  ops::matmul(pool, x.data(), n, g, a.data());
  ops::matmul(pool, x.data(), n, u, b.data());
  ops::silu_mul(pool, a.data(), b.data(), n * I, a.data());
  ops::matmul(pool, a.data(), n, d, y.data());
  return y;
}

// Expert e of a layer as the model runs it: SwiGLU, or (gpt-oss) gate/up biases, the clamped
// activation and the down bias (each from the layer's [E, I] / [E, H] vectors, when present).
std::vector<float> expert_out(ThreadPool& pool, const ModelConfig& c, const LayerWeights& L,
                              size_t e, const std::vector<float>& x, int64_t n) {
  const ExpertWeights& w = L.experts[e];
  if (c.expert_act.kind == ExpertActivation::Kind::SILU && L.expert_gate_bias.empty())
    return swiglu(pool, x, n, w.gate, w.up, w.down);
  const int64_t I = w.gate.shape[0], H = w.down.shape[0];
  std::vector<float> g(n * I), u(n * I), y(n * H);
  ops::matmul(pool, x.data(), n, w.gate, g.data(), L.expert_gate_bias.data() + e * I);
  ops::matmul(pool, x.data(), n, w.up, u.data(), L.expert_up_bias.data() + e * I);
  ops::swiglu_oai(pool, g.data(), u.data(), n * I, c.expert_act.alpha, c.expert_act.limit,
                  g.data());
  ops::matmul(pool, g.data(), n, w.down, y.data(),
              L.expert_down_bias.empty() ? nullptr : L.expert_down_bias.data() + e * H);
  return y;
}

// The shared expert: sigmoid(x . g) * SwiGLU_shared(x).
std::vector<float> shared_out(ThreadPool& pool, const LayerWeights& L, const std::vector<float>& x,
                              int64_t n) {
  std::vector<float> y = swiglu(pool, x, n, L.shared.gate, L.shared.up, L.shared.down);
  std::vector<float> logit(n);
  ops::matmul(pool, x.data(), n, L.shared_gate, logit.data());
  const int64_t H = static_cast<int64_t>(y.size()) / n;
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = 0; j < H; ++j) y[t * H + j] /= 1.f + std::exp(-logit[t]);
  return y;
}

float softplus(float x) { return x > 20.f ? x : std::log1p(std::exp(x)); }

void l2norm(float* x, int64_t n) {
  float ss = 0.f;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  for (int64_t i = 0; i < n; ++i) x[i] /= std::sqrt(ss + 1e-6f);
}

// The Gated DeltaNet mixer of one sequence from a zero state (model/delta_net_block.cpp's
// steps) under config c's head counts: W_out applied to the gated-normed delta rule output.
std::vector<float> delta_mixer(ThreadPool& pool, const ModelConfig& c, const DeltaNetWeights& D,
                               const std::vector<float>& x, int64_t n) {
  const DeltaNetConfig& d = c.delta;
  const int64_t cd = d.conv_dim(), K = d.key_dim(), V = d.value_dim(), nv = d.n_v_heads;
  const int64_t dk = d.k_head_dim, dv = d.v_head_dim, H = c.hidden;
  std::vector<float> qkv(n * cd), conv(n * cd), z(n * V), b(n * nv), a(n * nv), o(n * V),
      y(n * H);
  ops::matmul(pool, x.data(), n, D.qkv, qkv.data());
  ops::matmul(pool, x.data(), n, D.z, z.data());
  ops::matmul(pool, x.data(), n, D.b, b.data());
  ops::matmul(pool, x.data(), n, D.a, a.data());
  std::vector<float> conv_state(cd * (d.conv_kernel - 1), 0.f), ssm(nv * dk * dv, 0.f);
  ops::causal_conv1d_silu(pool, qkv.data(), n, cd, D.conv.data(), d.conv_kernel,
                          conv_state.data(), conv.data());
  for (int64_t t = 0; t < n; ++t) {
    float* row = conv.data() + t * cd;
    for (int64_t h = 0; h < d.n_k_heads; ++h) {
      l2norm(row + h * dk, dk);
      for (int64_t i = 0; i < dk; ++i) row[h * dk + i] /= std::sqrt(static_cast<float>(dk));
      l2norm(row + K + h * dk, dk);
    }
    for (int64_t h = 0; h < nv; ++h) {
      b[t * nv + h] = 1.f / (1.f + std::exp(-b[t * nv + h]));
      a[t * nv + h] = -std::exp(D.a_log[h]) * softplus(a[t * nv + h] + D.dt_bias[h]);
    }
  }
  const ops::DeltaRuleArgs rule{.q = conv.data(), .k = conv.data() + K, .v = conv.data() + 2 * K,
                                .qkv_stride = cd, .g = a.data(), .beta = b.data(), .n = n,
                                .n_k_heads = d.n_k_heads, .n_v_heads = nv, .k_dim = dk,
                                .v_dim = dv, .state = ssm.data(), .out = o.data()};
  ops::gated_delta_rule(pool, {&rule, 1});
  for (int64_t i = 0; i < n * nv; ++i) {
    float* oh = o.data() + i * dv;
    const float* zh = z.data() + i * dv;
    float ss = 0.f;
    for (int64_t j = 0; j < dv; ++j) ss += oh[j] * oh[j];
    const float inv = 1.f / std::sqrt(ss / dv + c.rms_eps);
    for (int64_t j = 0; j < dv; ++j)
      oh[j] = oh[j] * inv * D.norm[j] * zh[j] / (1.f + std::exp(-zh[j]));
  }
  ops::matmul(pool, o.data(), n, D.out, y.data());
  return y;
}

// Sums fn(rank) over the ranks and compares with want.
void expect_partials_sum(int world, const std::vector<float>& want,
                         const std::function<std::vector<float>(int)>& fn,
                         const std::string& what) {
  std::vector<float> sum(want.size(), 0.f);
  for (int r = 0; r < world; ++r) {
    const auto y = fn(r);
    ASSERT_EQ(y.size(), want.size()) << what;
    for (size_t i = 0; i < y.size(); ++i) sum[i] += y[i];
  }
  expect_near(sum, want, what.c_str());
}

struct Checked {
  int delta = 0, shared = 0, bias = 0;
};

// Column-parallel gate/up + row-parallel down: the ranks' partial outputs sum to the full MLP
// (dense layer, every expert with its biases, the gated shared expert); row-parallel o: the
// ranks' heads sum to the full projection; a DeltaNet mixer over the rank's heads sums to the
// full mixer.
void check_partial_sums(ThreadPool& pool, const Model& m, const std::string& tag, int world,
                        Checked& checked) {
  const ModelConfig& c = m.config();
  const TpPlan p = plan_tensor_parallel(m, world);
  std::vector<std::unique_ptr<Model>> shards;
  for (int r = 0; r < world; ++r) shards.push_back(shard_model(m, p, r));
  const int64_t n = 3, H = c.hidden;
  const auto x = randv(n * H, 11);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = m.weights().layers[l];
    auto S = [&](int r) -> const LayerWeights& { return shards[r]->weights().layers[l]; };
    if (!L.gate.empty())
      expect_partials_sum(world, swiglu(pool, x, n, L.gate, L.up, L.down), [&](int r) {
        return swiglu(pool, x, n, S(r).gate, S(r).up, S(r).down);
      }, tag + " dense");
    for (size_t e = 0; e < L.experts.size(); ++e)
      expect_partials_sum(world, expert_out(pool, c, L, e, x, n), [&](int r) {
        return expert_out(pool, shards[r]->config(), S(r), e, x, n);
      }, fmt::format("{} layer {} expert {}", tag, l, e));
    checked.bias += !L.expert_down_bias.empty();
    if (!L.shared_gate.empty()) {
      ++checked.shared;
      expect_partials_sum(world, shared_out(pool, L, x, n), [&](int r) {
        return shared_out(pool, S(r), x, n);
      }, tag + " shared expert");
    }
    if (c.is_delta(l)) {
      ++checked.delta;
      expect_partials_sum(world, delta_mixer(pool, c, L.delta, x, n), [&](int r) {
        return delta_mixer(pool, shards[r]->config(), S(r).delta, x, n);
      }, fmt::format("{} layer {} DeltaNet", tag, l));
      continue;
    }
    const int64_t qd = c.q_dim();
    const auto att = randv(n * qd, 12);
    std::vector<float> want(n * H);
    ops::matmul(pool, att.data(), n, L.o.w, want.data(),
                L.o.bias.empty() ? nullptr : L.o.bias.data());
    expect_partials_sum(world, want, [&](int r) {
      const TpRank& k = p.ranks[r];
      const int64_t q0 = k.q_heads.begin * c.head_dim, ql = k.q_heads.size() * c.head_dim;
      std::vector<float> a(n * ql), y(n * H);
      for (int64_t t = 0; t < n; ++t)
        std::copy_n(att.begin() + t * qd + q0, ql, a.begin() + t * ql);
      ops::matmul(pool, a.data(), n, S(r).o.w, y.data(),
                  S(r).o.bias.empty() ? nullptr : S(r).o.bias.data());
      return y;
    }, tag + " o_proj");
  }
}

// Every fixture the plan takes, at 2 ranks (and 4 where the heads divide).
TEST(TpShard, PartialSumsEqualTheFullBlock) {
  ThreadPool pool(2, false);
  Checked checked;
  for (const char* name : {"qwen3_moe", "mixtral", "olmoe", "qwen3_moe_yarn", "gpt_oss",
                           "gpt_oss_mxfp4", "qwen3_next", "qwen3_5_moe"}) {
    auto m = Model::load(fixture(name));
    const ModelConfig& c = m->config();
    for (int world : {2, 4}) {
      if (world == 4 && (c.has_delta() || c.qk_norm == QkNorm::FULL || c.expert_dim == 96))
        continue;  // refused at 4: DeltaNet key heads, olmoe's k norm, 3 MXFP4 blocks
      check_partial_sums(pool, *m, fmt::format("{} tp{}", name, world), world, checked);
    }
  }
  EXPECT_GT(checked.delta, 0);
  EXPECT_GT(checked.shared, 0);
  EXPECT_GT(checked.bias, 0);
}

// FP8 128x128 tiles: q/k/v rows and expert gate/up rows on 128-row tiles, o and down columns
// on 128-column tiles with their scale columns; 384-wide experts go out as 128 + 256.
TEST(TpShard, Fp8TilesTravelWithTheirSlices) {
  ThreadPool pool(2, false);
  auto base = Model::synthetic(test::fp8_test_config(), 5);
  auto m = test::fp8_copy(*base);
  ASSERT_EQ(m->weights().layers[0].experts[0].down.dtype, DType::F8_E4M3_B128);
  const TpPlan p = plan_tensor_parallel(*m, 2);
  EXPECT_EQ(p.ranks[0].expert.size(), 128);
  EXPECT_EQ(p.ranks[1].expert.size(), 256);
  Checked checked;
  check_partial_sums(pool, *m, "fp8 tp2", 2, checked);
  // The slice's scales are the tile columns of the full matrix's: dequantized slices equal
  // slices of the dequantized matrix.
  auto s1 = shard_model(*m, p, 1);
  const TensorView &full = m->weights().layers[1].experts[2].down,
                   &part = s1->weights().layers[1].experts[2].down;
  ASSERT_EQ(part.shape[1], 256);
  for (int64_t r : {int64_t{0}, int64_t{130}})
    for (int64_t col : {int64_t{0}, int64_t{129}, int64_t{255}})
      EXPECT_EQ(at(part, r, col), at(full, r, 128 + col)) << r << "," << col;
  // Tiles that a split would cut are refused in one line.
  ModelConfig narrow = test::fp8_test_config();
  narrow.expert_dim = 128;
  auto nb = Model::synthetic(narrow, 6);
  auto nm = test::fp8_copy(*nb);
  test::expect_refused([&] { plan_tensor_parallel(*nm, 2); }, "whole blocks of 128",
                       "128-wide FP8 experts split over 2");
  ModelConfig heads = test::fp8_test_config();  // 64-row heads: rank 1's q rows start at 192
  heads.n_heads = 6, heads.n_kv_heads = 6, heads.head_dim = 64;
  auto hb = Model::synthetic(heads, 7);
  auto hm = test::fp8_copy(*hb);
  test::expect_refused([&] { shard_model(*hm, plan_tensor_parallel(*hm, 2), 1); }, "128-row tile",
                       "q rows from 192");
}

// Per-head pieces travel with their heads: gated attention's [query | gate] q rows, gpt-oss's
// sinks and q/k/v biases, DeltaNet's conv channels, A_log and dt_bias; the router and its bias
// and the shared expert's gate are replicated views.
TEST(TpShard, PerHeadTensorsFollowTheirHeads) {
  {
    auto m = Model::load(fixture("gpt_oss"));
    const ModelConfig& c = m->config();
    const TpPlan p = plan_tensor_parallel(*m, 2);
    const LayerWeights& L = m->weights().layers[1];
    for (int rank = 0; rank < 2; ++rank) {
      auto s = shard_model(*m, p, rank);
      const LayerWeights& S = s->weights().layers[1];
      const TpRank& r = p.ranks[rank];
      ASSERT_EQ(S.sinks.size(), size_t(r.q_heads.size()));
      for (int64_t h = 0; h < r.q_heads.size(); ++h)
        EXPECT_EQ(S.sinks[h], L.sinks[r.q_heads.begin + h]);
      EXPECT_EQ(S.q.bias[1], L.q.bias[r.q_heads.begin * c.head_dim + 1]);
      EXPECT_EQ(S.k.bias[1], L.k.bias[r.kv_heads.begin * c.head_dim + 1]);
      EXPECT_EQ(S.o.bias.empty(), rank > 0);
      EXPECT_EQ(S.expert_down_bias.empty(), rank > 0);
      ASSERT_EQ(S.expert_gate_bias.size(), size_t(c.n_experts * r.expert.size()));
      EXPECT_EQ(S.expert_up_bias[r.expert.size() + 1],
                L.expert_up_bias[c.expert_dim + r.expert.begin + 1]);  // expert 1, column 1
      EXPECT_EQ(S.router_bias, L.router_bias);
      EXPECT_EQ(s->config().window(0), c.window(0));
    }
  }
  {  // MXFP4 experts of 96 columns = 3 blocks of 32: ranks take 1 and 2 whole blocks.
    auto m = Model::load(fixture("gpt_oss_mxfp4"));
    const TpPlan p = plan_tensor_parallel(*m, 2);
    EXPECT_EQ(p.ranks[0].expert.size(), 32);
    EXPECT_EQ(p.ranks[1].expert.size(), 64);
    EXPECT_EQ(shard_model(*m, p, 1)->config().expert_dim, 64);
  }
  auto m = Model::load(fixture("qwen3_next"));
  const ModelConfig& c = m->config();
  const TpPlan p = plan_tensor_parallel(*m, 2);
  const int64_t hd = c.head_dim;
  const DeltaNetConfig& d = c.delta;
  for (int rank = 0; rank < 2; ++rank) {
    auto s = shard_model(*m, p, rank);
    const TpRank& r = p.ranks[rank];
    const ModelConfig& sc = s->config();
    EXPECT_EQ(sc.delta.n_k_heads * 2, d.n_k_heads);
    EXPECT_EQ(sc.delta.n_v_heads * 2, d.n_v_heads);
    EXPECT_EQ(sc.shared_expert_dim * 2, c.shared_expert_dim);
    for (int64_t l = 0; l < c.n_layers; ++l) {
      const LayerWeights &L = m->weights().layers[l], &S = s->weights().layers[l];
      if (!c.is_delta(l)) {  // gated attention: a head is 2 * head_dim rows of q
        ASSERT_EQ(S.q.w.shape[0], 2 * hd * r.q_heads.size());
        EXPECT_EQ(at(S.q.w, hd + 1, 3), at(L.q.w, 2 * hd * r.q_heads.begin + hd + 1, 3));
      } else {
        const DeltaNetWeights &D = L.delta, &E = S.delta;
        const int64_t K = d.key_dim(), k0 = r.delta_k.begin * d.k_head_dim;
        const int64_t v0 = r.delta_v.begin * d.v_head_dim, Ks = sc.delta.key_dim();
        EXPECT_EQ(E.qkv.shape[0], sc.delta.conv_dim());
        EXPECT_EQ(at(E.qkv, 1, 2), at(D.qkv, k0 + 1, 2));                   // q
        EXPECT_EQ(at(E.qkv, Ks + 1, 2), at(D.qkv, K + k0 + 1, 2));         // k
        EXPECT_EQ(at(E.qkv, 2 * Ks + 1, 2), at(D.qkv, 2 * K + v0 + 1, 2)); // v
        const int64_t kk = d.conv_kernel;
        EXPECT_EQ(E.conv[(2 * Ks + 1) * kk + 2], D.conv[(2 * K + v0 + 1) * kk + 2]);
        EXPECT_EQ(E.a_log[1], D.a_log[r.delta_v.begin + 1]);
        EXPECT_EQ(E.dt_bias[0], D.dt_bias[r.delta_v.begin]);
        EXPECT_EQ(at(E.out, 5, 1), at(D.out, 5, v0 + 1));
      }
      if (!L.shared_gate.empty()) EXPECT_EQ(S.shared_gate.data, L.shared_gate.data);
    }
  }
}

}  // namespace
}  // namespace ft
