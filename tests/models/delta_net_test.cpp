// Gated DeltaNet pieces: the chunked delta rule agrees with the recurrent one (and both with a
// plain per-element reference) across chunk sizes and a non-zero starting state; the causal
// conv continues its state across calls; hybrid configs (layer_types / full_attention_interval,
// partial rotary default) and the per-sequence state layout; misuse of the recurrent state.
#include "ops/delta_net.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backend/cpu/kernels.h"
#include "base/error.h"
#include "model/transformer.h"

namespace ft {
namespace {

struct RuleCase {
  int64_t n, nk, nv, dk, dv;
  std::vector<float> qkv, g, beta, state;  // qkv rows [q | k | v]
  int64_t stride() const { return 2 * nk * dk + nv * dv; }
  ops::DeltaRuleArgs args(float* st, float* out) const {
    return {.q = qkv.data(),
            .k = qkv.data() + nk * dk,
            .v = qkv.data() + 2 * nk * dk,
            .qkv_stride = stride(),
            .g = g.data(),
            .beta = beta.data(),
            .n = n,
            .n_k_heads = nk,
            .n_v_heads = nv,
            .k_dim = dk,
            .v_dim = dv,
            .state = st,
            .out = out};
  }
};

RuleCase make_case(int64_t n, int64_t nk, int64_t nv, int64_t dk, int64_t dv, uint32_t seed) {
  RuleCase c{n, nk, nv, dk, dv, {}, {}, {}, {}};
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_real_distribution<float> unit(0.f, 1.f);
  c.qkv.resize(n * c.stride());
  for (auto& x : c.qkv) x = normal(rng);
  for (int64_t t = 0; t < n; ++t)  // unit-norm q and k heads, as the model feeds them
    for (int64_t h = 0; h < 2 * nk; ++h) {
      float* p = c.qkv.data() + t * c.stride() + h * dk;
      float ss = 0.f;
      for (int64_t i = 0; i < dk; ++i) ss += p[i] * p[i];
      for (int64_t i = 0; i < dk; ++i) p[i] /= std::sqrt(ss);
    }
  c.g.resize(n * nv);
  c.beta.resize(n * nv);
  for (auto& x : c.g) x = -0.5f * unit(rng);
  for (auto& x : c.beta) x = unit(rng);
  c.state.resize(nv * dk * dv);
  for (auto& x : c.state) x = 0.3f * normal(rng);
  return c;
}

// The recurrence written element by element, in double.
void reference_rule(const RuleCase& c, std::vector<float>& state, std::vector<float>& out) {
  const int64_t r = c.nv / c.nk;
  out.assign(c.n * c.nv * c.dv, 0.f);
  for (int64_t h = 0; h < c.nv; ++h) {
    std::vector<double> S(state.begin() + h * c.dk * c.dv, state.begin() + (h + 1) * c.dk * c.dv);
    for (int64_t t = 0; t < c.n; ++t) {
      const float* row = c.qkv.data() + t * c.stride();
      const float* q = row + (h / r) * c.dk;
      const float* k = row + c.nk * c.dk + (h / r) * c.dk;
      const float* v = row + 2 * c.nk * c.dk + h * c.dv;
      const double decay = std::exp(static_cast<double>(c.g[t * c.nv + h]));
      for (auto& x : S) x *= decay;
      for (int64_t j = 0; j < c.dv; ++j) {
        double mem = 0;
        for (int64_t i = 0; i < c.dk; ++i) mem += S[i * c.dv + j] * k[i];
        const double delta = c.beta[t * c.nv + h] * (v[j] - mem);
        for (int64_t i = 0; i < c.dk; ++i) S[i * c.dv + j] += k[i] * delta;
      }
      for (int64_t j = 0; j < c.dv; ++j) {
        double o = 0;
        for (int64_t i = 0; i < c.dk; ++i) o += S[i * c.dv + j] * q[i];
        out[(t * c.nv + h) * c.dv + j] = static_cast<float>(o);
      }
    }
    for (int64_t i = 0; i < c.dk * c.dv; ++i) state[h * c.dk * c.dv + i] = static_cast<float>(S[i]);
  }
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

TEST(DeltaRule, ChunkedAndRecurrentFormsMatchTheReference) {
  const RuleCase c = make_case(150, 2, 4, 16, 24, 7);
  std::vector<float> ref_state = c.state, ref_out;
  reference_rule(c, ref_state, ref_out);
  auto run = [&](int64_t chunk) {  // chunk 0: recurrent
    std::vector<float> st = c.state, out(c.n * c.nv * c.dv);
    const ops::DeltaRuleArgs a = c.args(st.data(), out.data());
    for (int64_t h = 0; h < c.nv; ++h)
      chunk == 0 ? ops::gated_delta_rule_recurrent(a, h)
                 : ops::gated_delta_rule_chunked(a, h, chunk);
    EXPECT_LE(max_abs_diff(out, ref_out), 2e-4f) << "chunk " << chunk;
    EXPECT_LE(max_abs_diff(st, ref_state), 2e-4f) << "chunk " << chunk;
  };
  for (int64_t chunk : {0, 1, 7, 64, 200}) run(chunk);
}

TEST(DeltaRule, BatchedSequencesMatchOneByOne) {
  ThreadPool pool(2, false);
  const RuleCase a = make_case(70, 1, 2, 8, 8, 1), b = make_case(1, 1, 2, 8, 8, 2);
  std::vector<float> sa = a.state, sb = b.state, oa(a.n * 16), ob(16);
  const ops::DeltaRuleArgs args[] = {a.args(sa.data(), oa.data()), b.args(sb.data(), ob.data())};
  ops::gated_delta_rule(pool, args);
  std::vector<float> ra = a.state, rb = b.state, roa, rob;
  reference_rule(a, ra, roa);
  reference_rule(b, rb, rob);
  EXPECT_LE(max_abs_diff(oa, roa), 2e-4f);
  EXPECT_LE(max_abs_diff(ob, rob), 2e-4f);
  EXPECT_LE(max_abs_diff(sb, rb), 2e-4f);
}

TEST(CausalConv, ContinuesItsStateAcrossCalls) {
  ThreadPool pool(2, false);
  const int64_t n = 9, C = 5, K = 4;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> x(n * C), w(C * K);
  for (auto& v : x) v = normal(rng);
  for (auto& v : w) v = normal(rng);
  std::vector<float> direct(n * C);  // zero history, written out
  for (int64_t t = 0; t < n; ++t)
    for (int64_t c = 0; c < C; ++c) {
      float acc = 0;
      for (int64_t j = 0; j < K; ++j) {
        const int64_t i = t - (K - 1) + j;
        if (i >= 0) acc += w[c * K + j] * x[i * C + c];
      }
      direct[t * C + c] = acc / (1 + std::exp(-acc));
    }
  std::vector<float> state(C * (K - 1), 0.f), out(n * C);
  for (int64_t t0 : {0, 1, 2, 5}) {  // pieces of 1, 1, 3, 4 tokens
    const int64_t t1 = t0 == 5 ? n : (t0 == 2 ? 5 : t0 + 1);
    ops::causal_conv1d_silu(pool, x.data() + t0 * C, t1 - t0, C, w.data(), K, state.data(),
                            out.data() + t0 * C);
  }
  EXPECT_LE(max_abs_diff(out, direct), 1e-5f);
  for (int64_t c = 0; c < C; ++c)  // the state holds the last K - 1 inputs, oldest first
    for (int64_t j = 0; j < K - 1; ++j)
      EXPECT_EQ(state[c * (K - 1) + j], x[(n - (K - 1) + j) * C + c]);
}

ModelConfig hybrid_config(const nlohmann::json& j) {
  ModelConfig c;
  c.n_layers = j["num_hidden_layers"];
  read_hybrid_fields(JsonReader{j, "config.json"}, c);
  return c;
}

TEST(HybridConfig, LayerTypesIntervalAndPartialRotary) {
  nlohmann::json j = {{"num_hidden_layers", 8},      {"linear_num_key_heads", 2},
                      {"linear_num_value_heads", 4}, {"linear_key_head_dim", 16},
                      {"linear_value_head_dim", 8},  {"shared_expert_intermediate_size", 12}};
  ModelConfig c = hybrid_config(j);  // default full_attention_interval 4
  for (int64_t l = 0; l < 8; ++l) EXPECT_EQ(c.is_delta(l), (l + 1) % 4 != 0) << l;
  EXPECT_EQ(c.rope.partial_rotary_factor, 0.25);
  EXPECT_EQ(c.delta.conv_kernel, 4);
  EXPECT_EQ(c.delta.conv_dim(), 2 * 32 + 32);
  EXPECT_EQ(c.shared_expert_dim, 12);
  EXPECT_TRUE(c.attn_output_gate && c.norm_offset);
  j["full_attention_interval"] = 2;
  c = hybrid_config(j);
  EXPECT_TRUE(c.is_delta(0) && !c.is_delta(1) && c.is_delta(6) && !c.is_delta(7));
  j["layer_types"] = {"full_attention", "linear_attention", "mamba",          "attention",
                      "full_attention", "full_attention",   "full_attention", "full_attention"};
  c = hybrid_config(j);
  EXPECT_TRUE(!c.is_delta(0) && c.is_delta(1) && c.is_delta(2) && !c.is_delta(3));
  j["partial_rotary_factor"] = 0.5;
  c = hybrid_config(j);
  EXPECT_EQ(c.rope.partial_rotary_factor, 1.0);  // named by the file: parse_rope's value stands
  j["layer_types"][2] = "sliding_attention";
  EXPECT_THROW(hybrid_config(j), Error);
  j["layer_types"] = {"full_attention"};
  EXPECT_THROW(hybrid_config(j), Error);
}

class HybridModel : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { model_ = Model::load(std::string(FT_FIXTURES) + "/" + GetParam()); }
  std::unique_ptr<Model> model_;
  ThreadPool pool_{2, false};
};

TEST_P(HybridModel, StateIsAllocatedPerLayerKind) {
  const auto& c = model_->config();
  int64_t attention = 0, delta = 0;
  for (int64_t l = 0; l < c.n_layers; ++l) (c.is_delta(l) ? delta : attention)++;
  ASSERT_GE(delta, 2);
  ASSERT_GE(attention, 1);
  KVCache kv(c, 10);
  EXPECT_EQ(kv.k.size(), static_cast<size_t>(attention * 10 * c.kv_dim()));
  EXPECT_EQ(kv.conv.size(), static_cast<size_t>(delta * c.delta.conv_dim() * 3));
  EXPECT_EQ(kv.ssm.size(), static_cast<size_t>(delta * c.delta.n_v_heads * c.delta.k_head_dim *
                                               c.delta.v_head_dim));
  EXPECT_EQ(c.rotary_dim(), c.head_dim / 4);
}

TEST_P(HybridModel, RecurrentStateMustContinueOrRestart) {
  const auto& c = model_->config();
  Transformer tf(*model_, pool_);
  KVCache kv(c, 16);
  std::vector<float> first(c.vocab_size), again(c.vocab_size);
  const int32_t ids[] = {5, 6, 7, 8};
  tf.forward(ids, 4, 0, kv, first.data(), false);
  EXPECT_THROW(tf.forward(ids, 1, 2, kv, again.data(), false), Error);  // would rewind
  EXPECT_THROW(tf.forward(ids, 1, 5, kv, again.data(), false), Error);  // would skip
  tf.forward(ids, 4, 0, kv, again.data(), false);  // position 0 restarts the sequence
  EXPECT_EQ(first, again);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HybridModel, ::testing::Values("qwen3_next", "qwen3_5_moe"));

}  // namespace
}  // namespace ft
