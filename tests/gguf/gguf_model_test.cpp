// GGUF models: a GGUF written from each fixture checkpoint gives bit-identical logits to the
// safetensors one (single file and split), quantized GGUFs (Q8_0, Q4_K) stay within a stated
// KL divergence of the bf16 logits, and broken GGUF models are clear errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "../io/gguf_test_util.h"
#include "../models/log_probs.h"
#include "base/error.h"
#include "io/gguf.h"
#include "io/safetensors.h"
#include "model/gguf_arch.h"
#include "model/gguf_export.h"
#include "model/transformer.h"
#include "quant/quant.h"

namespace ft {
namespace {

using test::TempDir;

std::vector<int32_t> reference_prompt(const std::string& dir) {
  auto ref = SafetensorsSet::open_file(dir + "/reference.safetensors");
  const TensorView& t = ref.get("prompt_ids");
  std::vector<int32_t> ids(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) ids[i] = static_cast<int32_t>(t.as<int64_t>()[i]);
  return ids;
}

using test::all_logits;

std::string write_gguf(const Model& m, const std::string& path, std::optional<uint32_t> type,
                       int split = 1) {
  GgufWriter w;
  gguf_add_model(w, m, {.type = type, .name = "test"});
  return w.write(path, split).front();
}

// Mean over rows of KL(softmax(ref) || softmax(got)), in nats.
double mean_kl(const std::vector<float>& ref, const std::vector<float>& got, int64_t V) {
  const int64_t n = static_cast<int64_t>(ref.size()) / V;
  double total = 0;
  for (int64_t r = 0; r < n; ++r) {
    const float* a = ref.data() + r * V;
    const float* b = got.data() + r * V;
    double ma = a[0], mb = b[0];
    for (int64_t i = 0; i < V; ++i)
      ma = std::max(ma, double(a[i])), mb = std::max(mb, double(b[i]));
    double za = 0, zb = 0;
    for (int64_t i = 0; i < V; ++i) za += std::exp(a[i] - ma), zb += std::exp(b[i] - mb);
    double kl = 0;
    for (int64_t i = 0; i < V; ++i) {
      const double lp = a[i] - ma - std::log(za), lq = b[i] - mb - std::log(zb);
      kl += std::exp(lp) * (lp - lq);
    }
    total += kl;
  }
  return total / static_cast<double>(n);
}

class GgufFixture : public ::testing::TestWithParam<std::string> {
 protected:
  std::string dir() const { return std::string(FT_FIXTURES) + "/" + GetParam(); }
  ThreadPool pool_{2, false};
};

TEST_P(GgufFixture, UnquantizedGgufLogitsAreBitIdentical) {
  TempDir tmp;
  auto st = Model::load(dir());
  const std::string path = write_gguf(*st, tmp.file("m.gguf"), std::nullopt);
  auto gg = Model::load(path);
  const ModelConfig &a = st->config(), &b = gg->config();
  EXPECT_EQ(b.model_type, a.model_type);
  EXPECT_EQ(b.vocab_size, a.vocab_size);
  EXPECT_EQ(b.n_layers, a.n_layers);
  EXPECT_EQ(b.n_kv_heads, a.n_kv_heads);
  EXPECT_EQ(b.head_dim, a.head_dim);
  EXPECT_EQ(b.n_experts, a.n_experts);
  EXPECT_EQ(b.top_k, a.top_k);
  EXPECT_EQ(b.expert_dim, a.expert_dim);
  EXPECT_EQ(b.norm_topk_prob, a.norm_topk_prob);
  EXPECT_EQ(b.layer_is_moe, a.layer_is_moe);
  EXPECT_EQ(b.qk_norm, a.qk_norm);
  EXPECT_EQ(b.rope.type, a.rope.type);
  EXPECT_FLOAT_EQ(static_cast<float>(b.rope.theta), static_cast<float>(a.rope.theta));
  EXPECT_EQ(b.tie_embeddings, a.tie_embeddings);
  const auto ids = reference_prompt(dir());
  const auto ref = all_logits(*st, ids, pool_);
  const auto got = all_logits(*gg, ids, pool_);
  ASSERT_EQ(ref.size(), got.size());
  EXPECT_EQ(std::memcmp(ref.data(), got.data(), ref.size() * sizeof(float)), 0)
      << GetParam() << ": GGUF logits differ from the safetensors ones";
}

TEST_P(GgufFixture, SplitGgufLoadsFromAnyPart) {
  TempDir tmp;
  auto st = Model::load(dir());
  GgufWriter w;
  gguf_add_model(w, *st, {});
  auto files = w.write(tmp.file("m.gguf"), 3);
  ASSERT_EQ(files.size(), 3u);
  const auto ids = reference_prompt(dir());
  const auto ref = all_logits(*st, ids, pool_);
  for (const auto& f : {files[0], files[2]}) {
    auto gg = Model::load(f);
    const auto got = all_logits(*gg, ids, pool_);
    EXPECT_EQ(std::memcmp(ref.data(), got.data(), ref.size() * sizeof(float)), 0) << f;
  }
}

TEST_P(GgufFixture, Q8_0StaysCloseToBf16) {
  TempDir tmp;
  auto st = Model::load(dir());
  auto gg = Model::load(write_gguf(*st, tmp.file("q8.gguf"), uint32_t(quant::QuantType::Q8_0)));
  // Matrices are quantized views of the file; the router stays f32.
  EXPECT_EQ(gg->weights().layers[0].q.w.dtype, DType::Q8_0);
  EXPECT_EQ(gg->weights().layers[0].router.dtype, DType::F32);
  const auto ids = reference_prompt(dir());
  const double kl =
      mean_kl(all_logits(*st, ids, pool_), all_logits(*gg, ids, pool_), st->config().vocab_size);
  // Random-weight fixtures have near-tied routers, so small perturbations (Q8_0 weights, int8
  // activations) flip expert choices: measured 0.0014..0.1 nats. The trained demo model below is
  // the tight gate.
  std::printf("[ gguf ] %s Q8_0: mean KL vs bf16 = %.3g nats (bound 0.2)\n", GetParam().c_str(),
              kl);
  EXPECT_LT(kl, 0.2);
  EXPECT_GT(kl, 0.0);
}

INSTANTIATE_TEST_SUITE_P(Families, GgufFixture,
                         ::testing::Values("qwen3_moe", "qwen3_moe_yarn", "mixtral", "olmoe",
                                           "gpt_oss"));

// The demo model (hidden 256: whole Q4_K blocks) quantized to Q8_0 and Q4_K, on a prompt of
// own vocabulary. Measured: Q8_0 5.5e-4, Q4_K 0.042 nats; the bounds leave ~2.5-4x.
TEST(GgufDemo, QuantizedKlDivergence) {
  TempDir tmp;
  ThreadPool pool(2, false);
  auto st = Model::load(std::string(FT_SOURCE_DIR) + "/models/demo");
  std::vector<int32_t> ids;
  for (int i = 0; i < 48; ++i) ids.push_back((i * 131 + 17) % 6000 + 3);
  const auto ref = all_logits(*st, ids, pool);
  struct Case {
    quant::QuantType type;
    DType expert_dtype;
    double bound;
  };
  for (const Case& c : {Case{quant::QuantType::Q8_0, DType::Q8_0, 2e-3},
                        Case{quant::QuantType::Q4_K, DType::Q4_K, 0.1}}) {
    const std::string name(quant::name(c.type));
    auto gg = Model::load(write_gguf(*st, tmp.file(name + ".gguf"), uint32_t(c.type)));
    EXPECT_EQ(gg->weights().layers[0].experts[0].gate.dtype, c.expert_dtype);
    const double kl = mean_kl(ref, all_logits(*gg, ids, pool), st->config().vocab_size);
    std::printf("[ gguf ] demo %s: mean KL vs bf16 = %.3g nats (bound %.g)\n", name.c_str(), kl,
                c.bound);
    EXPECT_LT(kl, c.bound) << name;
    EXPECT_GT(kl, 0.0) << name << ": quantization changed nothing?";
  }
}

TEST(GgufExportType, FollowsLlamaCppRules) {
  using Q = quant::QuantType;
  auto t = [](Q target, const char* name, int64_t cols, bool tied = false) {
    return static_cast<Q>(gguf_export_type(uint32_t(target), name, cols, tied));
  };
  EXPECT_EQ(t(Q::Q4_K, "blk.0.ffn_gate_inp.weight", 256), Q::F32);
  EXPECT_EQ(t(Q::Q4_K, "output.weight", 256), Q::Q6_K);
  EXPECT_EQ(t(Q::Q4_K, "token_embd.weight", 256, true), Q::Q6_K);
  EXPECT_EQ(t(Q::Q4_K, "token_embd.weight", 256, false), Q::Q4_K);
  EXPECT_EQ(t(Q::Q4_K, "blk.0.attn_q.weight", 64), Q::IQ4_NL);
  EXPECT_EQ(t(Q::Q6_K, "blk.0.attn_q.weight", 96), Q::Q8_0);
  EXPECT_EQ(t(Q::Q8_0, "blk.0.attn_q.weight", 48), Q::F16);
  EXPECT_EQ(t(Q::Q8_0, "output.weight", 64), Q::Q8_0);
}

std::string load_error(const std::string& path) {
  try {
    Model::load(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(GgufModelErrors, NameTheProblem) {
  TempDir tmp;
  auto st = Model::load(std::string(FT_FIXTURES) + "/qwen3_moe");
  {
    GgufWriter w;
    gguf_add_model(w, *st, {});
    w.set("general.architecture", GgufValue::str("mamba"));
    w.write(tmp.file("arch.gguf"));
    std::string e = load_error(tmp.file("arch.gguf"));
    EXPECT_NE(e.find("'mamba' is not supported"), std::string::npos) << e;
    EXPECT_NE(e.find("qwen3moe"), std::string::npos) << e;
  }
  {
    GgufWriter w;
    gguf_add_model(w, *st, {});
    w.set("qwen3moe.embedding_length", GgufValue::u32(80));
    w.write(tmp.file("shape.gguf"));
    std::string e = load_error(tmp.file("shape.gguf"));
    EXPECT_NE(e.find("metadata implies"), std::string::npos) << e;
  }
  {
    GgufWriter w;
    gguf_add_model(w, *st, {});
    w.set("qwen3moe.expert_used_count", GgufValue::u32(99));
    w.write(tmp.file("topk.gguf"));
    EXPECT_NE(load_error(tmp.file("topk.gguf")).find("exceeds the number of experts"),
              std::string::npos);
  }
  {
    GgufWriter w;  // metadata only: the first tensor looked up is missing
    w.set("general.architecture", GgufValue::str("qwen3moe"));
    w.write(tmp.file("empty.gguf"));
    EXPECT_NE(load_error(tmp.file("empty.gguf")).find("token_embd.weight"), std::string::npos);
  }
  EXPECT_NE(load_error(tmp.file("absent.gguf")).find("does not exist"), std::string::npos);
}

TEST(GgufPermute, RoundTripsAndInterleaves) {
  // 2 heads of head_dim 4, one byte per row: HF rows [0..7] -> GGUF order per head 0,2,1,3.
  const char src[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  char g[8], back[8];
  permute_qk_rows(src, g, 2, 4, 1, true);
  EXPECT_EQ(std::string(g, 8), std::string("\0\2\1\3\4\6\5\7", 8));
  permute_qk_rows(g, back, 2, 4, 1, false);
  EXPECT_EQ(std::string(back, 8), std::string(src, 8));
}

}  // namespace
}  // namespace ft
