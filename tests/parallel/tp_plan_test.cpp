// Tensor-parallel plan and shards on the CPU: ranges tile the heads and widths, refusals are
// one-line errors, shard tensors are the right slices, and the Megatron identities hold on
// the fixtures (row-parallel partial sums over the ranks == the unsharded block).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backend/cpu/thread_pool.h"
#include "base/error.h"
#include "model/model.h"
#include "ops/ops.h"
#include "parallel/tp_plan.h"

namespace ft {
namespace {

std::string fixture(const char* name) { return std::string(FT_FIXTURES) + "/" + name; }

std::vector<float> randv(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

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
    try {
      plan_tensor_parallel(c, world);
      ADD_FAILURE() << "world " << world << " accepted";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(needle), std::string::npos) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
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
  refused(Model::load(fixture("qwen3_next"))->config(), 2, "DeltaNet");
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

// Column-parallel gate/up + row-parallel down: the ranks' partial outputs sum to the full MLP
// (dense layer and every expert); row-parallel o: the ranks' heads sum to the full projection.
TEST(TpShard, PartialSumsEqualTheFullBlock) {
  ThreadPool pool(2, false);
  for (const char* name : {"qwen3_moe", "mixtral", "olmoe", "qwen3_moe_yarn"}) {
    auto m = Model::load(fixture(name));
    const ModelConfig& c = m->config();
    const int world = 2;
    const TpPlan p = plan_tensor_parallel(c, world);
    std::vector<std::unique_ptr<Model>> shards;
    for (int r = 0; r < world; ++r) shards.push_back(shard_model(*m, p, r));
    const int64_t n = 3, H = c.hidden;
    const auto x = randv(n * H, 11);
    for (int64_t l = 0; l < c.n_layers; ++l) {
      const LayerWeights& L = m->weights().layers[l];
      std::vector<const ExpertWeights*> full;
      std::vector<std::vector<const ExpertWeights*>> part(world);
      for (size_t e = 0; e < L.experts.size(); ++e) {
        full.push_back(&L.experts[e]);
        for (int r = 0; r < world; ++r) part[r].push_back(&shards[r]->weights().layers[l].experts[e]);
      }
      if (!L.gate.empty()) {
        const auto want = swiglu(pool, x, n, L.gate, L.up, L.down);
        std::vector<float> sum(n * H, 0.f);
        for (int r = 0; r < world; ++r) {
          const LayerWeights& S = shards[r]->weights().layers[l];
          const auto y = swiglu(pool, x, n, S.gate, S.up, S.down);
          for (int64_t i = 0; i < n * H; ++i) sum[i] += y[i];
        }
        expect_near(sum, want, name);
      }
      for (size_t e = 0; e < full.size(); ++e) {
        const auto want = swiglu(pool, x, n, full[e]->gate, full[e]->up, full[e]->down);
        std::vector<float> sum(n * H, 0.f);
        for (int r = 0; r < world; ++r) {
          const auto y = swiglu(pool, x, n, part[r][e]->gate, part[r][e]->up, part[r][e]->down);
          for (int64_t i = 0; i < n * H; ++i) sum[i] += y[i];
        }
        expect_near(sum, want, name);
      }
      const int64_t qd = c.q_dim();
      const auto att = randv(n * qd, 12);
      std::vector<float> want(n * H), sum(n * H, 0.f);
      ops::matmul(pool, att.data(), n, L.o.w, want.data());
      for (int r = 0; r < world; ++r) {
        const TpRank& k = p.ranks[r];
        const int64_t q0 = k.q_heads.begin * c.head_dim, ql = k.q_heads.size() * c.head_dim;
        std::vector<float> a(n * ql), y(n * H);
        for (int64_t t = 0; t < n; ++t)
          std::copy_n(att.begin() + t * qd + q0, ql, a.begin() + t * ql);
        ops::matmul(pool, a.data(), n, shards[r]->weights().layers[l].o.w, y.data());
        for (int64_t i = 0; i < n * H; ++i) sum[i] += y[i];
      }
      expect_near(sum, want, name);
    }
  }
}

}  // namespace
}  // namespace ft
