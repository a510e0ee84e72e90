// Mixed-format GGUFs (issue #6): ft quantize's Q4_K_M / Q5_K_M mixtures of the demo model put
// Q6_K on attn_v and ffn_down_exps in the layers gguf_more_bits picks; the file loads with each
// tensor in its own type, stays within a stated KL of bf16, and computes what the same model
// with every tensor dequantized to f32 computes. A file whose three expert tensors of one layer
// have three types (and layers differ) does too.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "log_probs.h"

#include "backend/cuda/cuda_ops.h"
#include "io/gguf_writer.h"
#include "model/gguf_export.h"
#include "model/kl_divergence.h"
#include "model/transformer.h"
#include "quant/quant.h"
#include "tokenizer/tokenizer.h"

namespace ft {
namespace {

namespace fs = std::filesystem;
using quant::QuantType;

const std::string k_demo = std::string(FT_FIXTURES) + "/../../models/demo";

uint32_t ggml(QuantType t) { return static_cast<uint32_t>(t); }

class MixedQuant : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    base_ = Model::load(k_demo).release();
    const std::string text =
        "User: What is a harbor?\nAssistant: A harbor is a sheltered part of a body of water "
        "deep enough to provide anchorage for ships.\nUser: What does it mean to wander?\n"
        "Assistant: To wander is to move about without a definite destination or purpose.\n"
        "User: What is a lantern?\nAssistant: A lantern is a light enclosed in a case with "
        "transparent sides, carried by a handle.";
    ids_ = Tokenizer::load(k_demo).encode(text, false);
    base_logp_ = logp_of(*base_);
    root_ = fs::temp_directory_path() / ("ft_mixed_quant_" + std::to_string(::getpid()));
    fs::create_directories(root_);
  }
  static void TearDownTestSuite() {
    delete base_;
    fs::remove_all(root_);
  }

  static std::vector<float> logp_of(const Model& m) { return test::log_probs(m, ids_); }

  static std::unique_ptr<Model> exported(const Model& src, const GgufExportOptions& o,
                                         const std::string& name) {
    GgufWriter w;
    gguf_add_model(w, src, o);
    const std::string path = (root_ / (name + ".gguf")).string();
    w.write(path, 1, nullptr);
    return Model::load(path);
  }

  static KlStats kl(const std::vector<float>& p, const std::vector<float>& q, int64_t V) {
    KlStats s;
    const int64_t T = static_cast<int64_t>(p.size()) / V;
    for (int64_t t = 0; t < T; ++t) s.add(p.data() + t * V, q.data() + t * V, V);
    return s;
  }

  // The mixed model and its twin with every matrix dequantized to f32 (the same values) give
  // the same next-token distributions up to the CPU kernels' int8 activations (the quantized
  // matmuls quantize activations per 16; the f32 twin does not): a small KL, top-1 agreement.
  static void expect_matches_dequantized(const Model& mixed, const std::string& name) {
    auto f32 = exported(mixed, {.type = k_ggml_f32, .name = name + "_f32"}, name + "_f32");
    for (const auto& L : f32->weights().layers)
      for (const auto& e : L.experts) ASSERT_EQ(e.down.dtype, DType::F32);
    const int64_t V = mixed.config().vocab_size;
    const auto lp = logp_of(mixed), lq = logp_of(*f32);
    const KlStats s = kl(lq, lp, V);
    std::printf("[ mixed ] %s vs dequantized: mean KL %.2e max %.2e top1 %.3f\n", name.c_str(),
                s.mean(), s.max(), s.top1_agreement());
    // Measured (AVX-512 table): q4_k_m 4.7e-4 / 0.991, three_types 3.7e-3 / 0.981.
    EXPECT_LE(s.mean(), 1e-2) << name;
    EXPECT_GE(s.top1_agreement(), 0.95) << name;
  }

  static Model* base_;
  static std::vector<int32_t> ids_;
  static std::vector<float> base_logp_;
  static fs::path root_;
};
Model* MixedQuant::base_ = nullptr;
std::vector<int32_t> MixedQuant::ids_;
std::vector<float> MixedQuant::base_logp_;
fs::path MixedQuant::root_;

TEST(GgufMix, MoreBitsRuleAndParse) {
  // 6 layers: n/8 = 0, 7n/8 = 5, every third from 0 at offset 2 -> layers 2 and 5.
  std::vector<int64_t> picked;
  for (int64_t i = 0; i < 6; ++i)
    if (gguf_more_bits(i, 6)) picked.push_back(i);
  EXPECT_EQ(picked, (std::vector<int64_t>{2, 5}));
  // 48 layers: the first 6, the last 6, and 8, 11, ... between.
  int n = 0;
  for (int64_t i = 0; i < 48; ++i) n += gguf_more_bits(i, 48);
  EXPECT_TRUE(gguf_more_bits(0, 48) && gguf_more_bits(5, 48) && !gguf_more_bits(6, 48) &&
              gguf_more_bits(8, 48) && gguf_more_bits(47, 48));
  EXPECT_EQ(n, 6 + 6 + 12);
  EXPECT_EQ(gguf_mix_parse("Q4_K_M"), GgufMix::Q4_K_M);
  EXPECT_EQ(gguf_mix_parse("q5_k_m"), GgufMix::Q5_K_M);
  EXPECT_EQ(gguf_mix_parse("q4_k"), GgufMix::NONE);
  const auto m = GgufMix::Q4_K_M;
  EXPECT_EQ(gguf_mix_type(m, "blk.2.ffn_down_exps.weight", 6), ggml(QuantType::Q6_K));
  EXPECT_EQ(gguf_mix_type(m, "blk.2.ffn_down.weight", 6), ggml(QuantType::Q6_K));
  EXPECT_EQ(gguf_mix_type(m, "blk.5.attn_v.weight", 6), ggml(QuantType::Q6_K));
  EXPECT_EQ(gguf_mix_type(m, "blk.1.ffn_down_exps.weight", 6), ggml(QuantType::Q4_K));
  EXPECT_EQ(gguf_mix_type(m, "blk.2.ffn_gate_exps.weight", 6), ggml(QuantType::Q4_K));
  EXPECT_EQ(gguf_mix_type(m, "blk.2.attn_output.weight", 6), ggml(QuantType::Q4_K));
  EXPECT_EQ(gguf_mix_type(GgufMix::Q5_K_M, "token_embd.weight", 6), ggml(QuantType::Q5_K));
}

// The expert record layout the CUDA expert stacks and slot pools use (plain C++, cuda_ops.h):
// FP8 / NVFP4 records carry their scales after the rows, 16-byte aligned; other formats are
// their rows. A DeviceExperts is uniform (the single-format decode paths) only with one dtype
// without external scales and natural strides.
TEST(ExpertRecord, LayoutAndUniformity) {
  const auto q4 = cuda::expert_record(DType::Q4_K, 224, 256);
  EXPECT_EQ(q4.data, 224u * 144u);
  EXPECT_EQ(q4.bytes, q4.data);
  const auto fp8 = cuda::expert_record(DType::F8_E4M3_B128, 256, 224);  // 2 x 2 tiles
  EXPECT_EQ(fp8.data, 256u * 224u);
  EXPECT_EQ(fp8.scale_offset, fp8.data);
  EXPECT_EQ(fp8.bytes, fp8.data + 16u);
  const auto fp8b = cuda::expert_record(DType::F8_E4M3_B128, 130, 200);  // odd: 2 x 2 tiles
  EXPECT_EQ(fp8b.scale_offset % 16, 0u);
  EXPECT_GE(fp8b.scale_offset, fp8b.data);
  EXPECT_EQ(fp8b.bytes, fp8b.scale_offset + 16u);
  const auto nv = cuda::expert_record(DType::NVFP4, 224, 256);
  EXPECT_EQ(nv.data, 224u * 16u * 9u);
  EXPECT_EQ(nv.bytes, (nv.data + 15) / 16 * 16 + 16);

  cuda::DeviceExperts e{.dtype = DType::Q4_K, .n_experts = 8, .hidden = 256, .inter = 256};
  EXPECT_TRUE(e.uniform());
  EXPECT_EQ(e.expert_stride(2), cuda::expert_record(DType::Q4_K, 256, 256).bytes);
  e.types[2] = DType::Q6_K;  // a Q4_K_M layer's down
  EXPECT_FALSE(e.uniform());
  EXPECT_EQ(e.expert_stride(2), cuda::expert_record(DType::Q6_K, 256, 256).bytes);
  e.types[2] = DType::Q4_K;
  e.stride[2] = cuda::expert_record(DType::Q6_K, 256, 256).bytes;  // a pool sized for Q6_K
  EXPECT_FALSE(e.uniform());
  e.stride[2] = cuda::expert_record(DType::Q4_K, 256, 256).bytes;  // explicit natural stride
  EXPECT_TRUE(e.uniform());
  const cuda::DeviceExperts f{.dtype = DType::F8_E4M3_B128, .n_experts = 8, .hidden = 256,
                              .inter = 256};
  EXPECT_FALSE(f.uniform());  // per-expert scales: the mixed path
}

TEST_F(MixedQuant, Q4KMLoadsEachTensorInItsType) {
  const auto m = exported(*base_, {.type = gguf_mix_base(GgufMix::Q4_K_M), .name = "demo",
                                   .mix = GgufMix::Q4_K_M},
                          "q4_k_m");
  const ModelConfig& c = m->config();
  ASSERT_EQ(c.n_layers, 6);
  // The demo's experts are 224 wide: down rows are not whole 256-blocks, so its Q4_K falls back
  // to IQ4_NL and its Q6_K to Q8_0 (llama.cpp's rule): still two record sizes across layers.
  ASSERT_NE(c.expert_dim % 256, 0);
  int more_downs = 0;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = m->weights().layers[l];
    const bool more = gguf_more_bits(l, c.n_layers);
    EXPECT_EQ(L.v.w.dtype, more ? DType::Q6_K : DType::Q4_K) << l;
    EXPECT_EQ(L.q.w.dtype, DType::Q4_K) << l;
    EXPECT_EQ(L.router.dtype, DType::F32) << l;
    ASSERT_FALSE(L.experts.empty());
    for (const auto& e : L.experts) {
      EXPECT_EQ(e.gate.dtype, DType::Q4_K);
      EXPECT_EQ(e.up.dtype, DType::Q4_K);
      EXPECT_EQ(e.down.dtype, more ? DType::Q8_0 : DType::IQ4_NL);
    }
    more_downs += more;
  }
  EXPECT_EQ(more_downs, 2);
  EXPECT_EQ(m->weights().lm_head.dtype, DType::Q6_K);
  // Quality: plain Q4_K's bound (measured 2.8e-2 / 0.944 on AVX-512; Q4_K alone 2.7e-2 / 0.914).
  const KlStats s = kl(base_logp_, logp_of(*m), c.vocab_size);
  std::printf("[ mixed ] q4_k_m vs bf16: mean KL %.3e  p99 %.3e  top1 %.3f\n", s.mean(),
              s.quantile(0.99), s.top1_agreement());
  EXPECT_LE(s.mean(), 5e-2);
  EXPECT_GE(s.top1_agreement(), 0.87);
  EXPECT_GT(s.mean(), 0.0);
  expect_matches_dequantized(*m, "q4_k_m");
}

TEST_F(MixedQuant, Q5KMIsCloserThanQ4KM) {
  const auto m4 = exported(*base_, {.type = gguf_mix_base(GgufMix::Q4_K_M), .name = "demo",
                                    .mix = GgufMix::Q4_K_M},
                           "q4_k_m_b");
  const auto m5 = exported(*base_, {.type = gguf_mix_base(GgufMix::Q5_K_M), .name = "demo",
                                    .mix = GgufMix::Q5_K_M},
                           "q5_k_m");
  EXPECT_EQ(m5->weights().layers[0].experts[0].gate.dtype, DType::Q5_K);
  EXPECT_EQ(m5->weights().layers[2].experts[0].down.dtype, DType::Q8_0);  // Q6_K's fallback
  EXPECT_EQ(m5->weights().layers[2].v.w.dtype, DType::Q6_K);
  const int64_t V = base_->config().vocab_size;
  const double k4 = kl(base_logp_, logp_of(*m4), V).mean(),
               k5 = kl(base_logp_, logp_of(*m5), V).mean();
  std::printf("[ mixed ] mean KL q4_k_m %.3e  q5_k_m %.3e\n", k4, k5);
  EXPECT_LT(k5, k4);
  EXPECT_LE(k5, 3e-2);
}

// gate, up and down of one layer in three types; another layer's down in a fourth, another's
// gate in bf16; layers differ.
TEST_F(MixedQuant, ThreeExpertTypesInOneLayer) {
  GgufExportOptions o{.type = ggml(QuantType::Q4_K), .name = "demo"};
  o.type_of = [](const std::string& n) -> std::optional<uint32_t> {
    if (n == "blk.0.ffn_gate_exps.weight") return ggml(QuantType::Q4_K);
    if (n == "blk.0.ffn_up_exps.weight") return ggml(QuantType::Q5_K);
    if (n == "blk.0.ffn_down_exps.weight") return ggml(QuantType::Q8_0);  // rows of 224
    if (n == "blk.1.ffn_down_exps.weight") return ggml(QuantType::Q4_0);
    if (n == "blk.3.ffn_gate_exps.weight") return k_ggml_bf16;
    return std::nullopt;
  };
  const auto m = exported(*base_, o, "three_types");
  const auto& Ls = m->weights().layers;
  EXPECT_EQ(Ls[0].experts[3].gate.dtype, DType::Q4_K);
  EXPECT_EQ(Ls[0].experts[3].up.dtype, DType::Q5_K);
  EXPECT_EQ(Ls[0].experts[3].down.dtype, DType::Q8_0);
  EXPECT_EQ(Ls[1].experts[3].down.dtype, DType::Q4_0);
  EXPECT_EQ(Ls[3].experts[3].gate.dtype, DType::BF16);
  EXPECT_EQ(Ls[3].experts[3].up.dtype, DType::Q4_K);
  expect_matches_dequantized(*m, "three_types");
}

}  // namespace
}  // namespace ft
