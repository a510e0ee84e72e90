// Vocab-split lm_head on the CPU (parallel/tp_vocab.cpp): the ranks' padded row ranges tile the
// vocabulary, shards hold views of their lm_head rows (embedding replicated), and the ranks'
// logits pieces laid out as the CUDA all-gather + strided copies lay them out give the full
// logits.
#include <gtest/gtest.h>

#include <random>

#include "backend/cpu/thread_pool.h"
#include "base/error.h"
#include "model/model.h"
#include "ops/ops.h"
#include "parallel/tp_plan.h"

namespace ft {
namespace {

TEST(TpVocab, PaddedRangesTileTheVocabulary) {
  for (int64_t V : {int64_t{6}, int64_t{7}, int64_t{151936}, int64_t{6144}, int64_t{201088}})
    for (int world : {1, 2, 3, 4, 8}) {
      if (V < world) continue;
      const int64_t P = tp_vocab_pad(V, world);
      EXPECT_EQ(P, (V + world - 1) / world);
      int64_t at = 0;
      for (int r = 0; r < world; ++r) {
        const TpRange v = tp_vocab_range(V, world, r);
        EXPECT_EQ(v.begin, std::min(V, at));
        EXPECT_LE(v.size(), P);
        at = v.end;
      }
      EXPECT_EQ(at, V);
    }
}

TEST(TpVocab, RefusesWhenARankGetsNoRows) {
  TpPlan p;
  p.world = 4;
  for (int r = 0; r < 4; ++r) p.ranks.push_back({.rank = r, .world = 4});
  EXPECT_THROW(split_vocab(p, 3), Error);  // fewer rows than ranks
  EXPECT_THROW(split_vocab(p, 5), Error);  // pieces of 2: the last rank none
  split_vocab(p, 8);
  EXPECT_EQ(p.ranks[3].vocab.begin, 6);
  EXPECT_EQ(p.ranks[3].vocab.end, 8);
}

// The shards' lm_head pieces, gathered with the CUDA layout (piece r: [rows, its size] sent as
// rows * pad floats, copied to columns tp_vocab_range(r)), equal the full lm_head's logits.
TEST(TpVocab, GatheredPiecesEqualTheFullLogits) {
  auto m = Model::load(std::string(FT_FIXTURES) + "/qwen3_moe");
  const ModelConfig& c = m->config();
  ThreadPool pool(2, false);
  for (int world : {2, 4}) {
    TpPlan p = plan_tensor_parallel(*m, world);
    split_vocab(p, c.vocab_size);
    const int64_t rows = 3, V = c.vocab_size, H = c.hidden, P = tp_vocab_pad(V, world);
    std::mt19937 rng(5);
    std::normal_distribution<float> d(0.f, 1.f);
    std::vector<float> x(rows * H), want(rows * V), got(rows * V, -1.f), all(world * rows * P);
    for (auto& v : x) v = d(rng);
    ops::matmul(pool, x.data(), rows, m->weights().lm_head, want.data());
    for (int r = 0; r < world; ++r) {
      auto s = shard_model(*m, p, r);
      const TensorView& lm = s->weights().lm_head;
      ASSERT_EQ(lm.shape[0], p.ranks[r].vocab.size());
      EXPECT_EQ(s->weights().embed.data, m->weights().embed.data);  // replicated
      EXPECT_EQ(s->config().vocab_size, V);
      std::vector<float> piece(rows * lm.shape[0]);
      ops::matmul(pool, x.data(), rows, lm, piece.data());
      std::copy(piece.begin(), piece.end(), all.begin() + r * rows * P);  // the all-gather
    }
    for (int r = 0; r < world; ++r) {  // the strided copies
      const TpRange v = tp_vocab_range(V, world, r);
      for (int64_t t = 0; t < rows; ++t)
        for (int64_t j = 0; j < v.size(); ++j)
          got[t * V + v.begin + j] = all[r * rows * P + t * v.size() + j];
    }
    for (int64_t i = 0; i < rows * V; ++i) ASSERT_NEAR(got[i], want[i], 1e-5f) << i;
  }
}

}  // namespace
}  // namespace ft
