// Golden parity: each fixture family (tiny random checkpoint written by
// tools/reference/make_fixtures.py with transformers) must reproduce the reference logits at
// every prompt position and the 16-token greedy continuation, in one prefill pass, in chunks,
// token by token and in batched steps. Tolerance: max|d| <= 1e-3 * max|ref logit| per row (fp32 compute on both sides).
#include <gtest/gtest.h>

#include <cmath>

#include "backend/cpu/kernels.h"
#include "engine/generate.h"
#include "io/safetensors.h"
#include "model/transformer.h"

namespace ft {
namespace {

struct Reference {
  std::vector<int32_t> prompt, greedy;
  TensorView prefill, decode;  // [T, V], [N, V] f32
};

std::vector<int32_t> ids_of(const TensorView& t) {
  EXPECT_EQ(t.dtype, DType::I64);
  std::vector<int32_t> out(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) out[i] = static_cast<int32_t>(t.as<int64_t>()[i]);
  return out;
}

// Worst max|d| / max|ref| seen by the current test (printed for the record).
thread_local float g_worst_ratio = 0;

// Max |a - ref| over one row, against the row's own scale.
void expect_row_close(const float* got, const float* ref, int64_t n, const std::string& what) {
  float max_ref = 0, max_d = 0;
  int64_t at = 0;
  for (int64_t i = 0; i < n; ++i) {
    max_ref = std::max(max_ref, std::fabs(ref[i]));
    float d = std::fabs(got[i] - ref[i]);
    if (d > max_d) max_d = d, at = i;
  }
  g_worst_ratio = std::max(g_worst_ratio, max_d / max_ref);
  EXPECT_LE(max_d, 1e-3f * max_ref) << what << ": max|d| " << max_d << " at " << at
                                    << " (got " << got[at] << ", ref " << ref[at] << ")";
}

class Parity : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = std::string(FT_FIXTURES) + "/" + GetParam();
    model_ = Model::load(dir_);
    ref_files_ = std::make_unique<SafetensorsSet>(
        SafetensorsSet::open_file(dir_ + "/reference.safetensors"));
    ref_.prompt = ids_of(ref_files_->get("prompt_ids"));
    ref_.greedy = ids_of(ref_files_->get("greedy_ids"));
    ref_.prefill = ref_files_->get("prefill_logits");
    ref_.decode = ref_files_->get("decode_logits");
    g_worst_ratio = 0;
  }
  void TearDown() override {
    std::printf("[ parity ] %s: worst max|d|/max|ref| = %.2e (bound 1e-3, kernels %s)\n",
                GetParam().c_str(), g_worst_ratio, cpu::kernels().isa);
  }
  std::string dir_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<SafetensorsSet> ref_files_;
  Reference ref_;
  ThreadPool pool_{2, false};
};

TEST_P(Parity, PrefillLogitsAtEveryPosition) {
  const auto& c = model_->config();
  const int64_t T = static_cast<int64_t>(ref_.prompt.size()), V = c.vocab_size;
  ASSERT_EQ(ref_.prefill.shape[0], T);
  ASSERT_EQ(ref_.prefill.shape[1], V);
  Transformer tf(*model_, pool_, 7);  // a small chunk also exercises chunked prefill
  KVCache kv(c, T);
  std::vector<float> logits(T * V);
  tf.forward(ref_.prompt.data(), T, 0, kv, logits.data(), true);
  for (int64_t t = 0; t < T; ++t)
    expect_row_close(logits.data() + t * V, ref_.prefill.as<float>() + t * V, V,
                     "prefill position " + std::to_string(t));
}

// The whole prompt in one pass (for the hybrid fixtures: 80 tokens, more than one chunk of the
// chunked delta rule inside a single step).
TEST_P(Parity, OnePassPrefill) {
  const auto& c = model_->config();
  const int64_t T = static_cast<int64_t>(ref_.prompt.size()), V = c.vocab_size;
  Transformer tf(*model_, pool_, T);
  KVCache kv(c, T);
  std::vector<float> logits(T * V);
  tf.forward(ref_.prompt.data(), T, 0, kv, logits.data(), true);
  for (int64_t t = 0; t < T; ++t)
    expect_row_close(logits.data() + t * V, ref_.prefill.as<float>() + t * V, V,
                     "one-pass prefill position " + std::to_string(t));
}

TEST_P(Parity, TokenByTokenDecodeMatchesPrefillAndGreedy) {
  const auto& c = model_->config();
  const int64_t T = static_cast<int64_t>(ref_.prompt.size()), V = c.vocab_size;
  const int64_t N = static_cast<int64_t>(ref_.greedy.size());
  Transformer tf(*model_, pool_);
  KVCache kv(c, T + N);
  std::vector<float> logits(V);
  for (int64_t t = 0; t < T; ++t) {
    tf.forward(&ref_.prompt[t], 1, t, kv, logits.data(), false);
    expect_row_close(logits.data(), ref_.prefill.as<float>() + t * V, V,
                     "decode position " + std::to_string(t));
  }
  for (int64_t i = 0; i < N; ++i) {
    expect_row_close(logits.data(), ref_.decode.as<float>() + i * V, V,
                     "greedy step " + std::to_string(i));
    int32_t next = argmax(logits.data(), V);
    ASSERT_EQ(next, ref_.greedy[i]) << "greedy step " << i;
    if (i + 1 < N) tf.forward(&next, 1, T + i, kv, logits.data(), false);
  }
}

TEST_P(Parity, GenerateGreedyIdsIdentical) {
  Transformer tf(*model_, pool_);
  GenerateParams p;
  p.max_new_tokens = static_cast<int64_t>(ref_.greedy.size());
  EXPECT_EQ(generate(tf, ref_.prompt, p), ref_.greedy);
}

// Continuous batching: three copies of the prompt, started at different steps and prefilled in
// chunks of different sizes, share every step with each other's decodes. Each must match the
// reference exactly as when run alone.
TEST_P(Parity, BatchedStepsMatchReference) {
  const auto& c = model_->config();
  const int64_t T = static_cast<int64_t>(ref_.prompt.size()), V = c.vocab_size;
  const int64_t N = static_cast<int64_t>(ref_.greedy.size());
  Transformer tf(*model_, pool_, 64);
  struct Seq {
    std::unique_ptr<KVCache> kv;
    std::vector<int32_t> tokens;  // prompt + generated so far
    int64_t done = 0, chunk, start;
    std::vector<float> logits;
  };
  std::vector<Seq> seqs;
  for (int64_t i = 0; i < 3; ++i)
    seqs.push_back({std::make_unique<KVCache>(c, T + N), ref_.prompt, 0, 2 * i + 3, i,
                    std::vector<float>(V)});
  for (int64_t step = 0; step < 200; ++step) {
    std::vector<SeqStep> batch;
    std::vector<Seq*> in_batch;
    for (auto& s : seqs) {
      if (step < s.start || static_cast<int64_t>(s.tokens.size()) >= T + N) continue;
      int64_t avail = static_cast<int64_t>(s.tokens.size()) - s.done;
      int64_t n = s.done < T ? std::min(s.chunk, T - s.done) : avail;
      batch.push_back({s.kv.get(), s.tokens.data() + s.done, n, s.done, s.logits.data()});
      in_batch.push_back(&s);
    }
    if (batch.empty()) break;
    tf.forward_batch(batch);
    for (size_t b = 0; b < batch.size(); ++b) {
      Seq& s = *in_batch[b];
      s.done += batch[b].n;
      if (s.done < T) {
        expect_row_close(s.logits.data(), ref_.prefill.as<float>() + (s.done - 1) * V, V,
                         "batched prefill chunk end " + std::to_string(s.done));
        continue;
      }
      const int64_t i = s.done - T;  // greedy step
      expect_row_close(s.logits.data(), ref_.decode.as<float>() + i * V, V,
                       "batched greedy step " + std::to_string(i));
      int32_t next = argmax(s.logits.data(), V);
      ASSERT_EQ(next, ref_.greedy[i]);
      s.tokens.push_back(next);
    }
  }
  for (const auto& s : seqs) EXPECT_EQ(static_cast<int64_t>(s.tokens.size()), T + N);
}

INSTANTIATE_TEST_SUITE_P(Families, Parity,
                         ::testing::Values("qwen3_moe", "qwen3_moe_yarn", "mixtral", "olmoe",
                                           "qwen3_next", "qwen3_5_moe", "gpt_oss"));

}  // namespace
}  // namespace ft
