// Quantization quality gate: the demo model (trained weights, 256-wide so every block format
// applies) converted to each weight format — GGUF Q8_0 ... Q2_K, IQ4_NL/XS, MXFP4 through
// ft quantize's exporter, FP8 128x128 and ModelOpt NVFP4 through their HF layouts — must keep
// KL(bf16 || quantized) over a text within the per-format bounds below, and finer formats must
// stay closer than coarser ones.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>

#include "hf_quant_writer.h"
#include "log_probs.h"
#include "io/gguf_writer.h"
#include "model/gguf_export.h"
#include "model/kl_divergence.h"
#include "model/transformer.h"
#include "tokenizer/tokenizer.h"

namespace ft {
namespace {

namespace fs = std::filesystem;

const std::string k_demo = std::string(FT_FIXTURES) + "/../../models/demo";

// Stated bounds on the mean KL (nats) over the text and on top-1 agreement. Measured (AVX-512
// table, printed by the test): q8_0 1.95e-3 / 0.971, q6_k 6.4e-3 / 0.950, q5_k 1.5e-2 / 0.921,
// q4_k 2.7e-2 / 0.914, q4_1 5.4e-2 / 0.856, q4_0 7.9e-2 / 0.842, iq4_nl 7.2e-2 / 0.863,
// iq4_xs 4.3e-2 / 0.871, q3_k 0.10 / 0.770, q2_k 0.37 / 0.647, mxfp4 0.12 / 0.835,
// fp8 7.5e-3 / 0.964, nvfp4 4.2e-2 / 0.885. The bounds leave 2x on KL and ~0.05 on top-1. The
// block formats' kernels also quantize activations to int8 per 16 (FP8 keeps f32), which is
// part of what is measured; a 6-layer 256-wide model is more sensitive than a large one.
struct Bound {
  const char* type;
  double max_mean_kl;
  double min_top1;
};
const Bound k_bounds[] = {
    {"q8_0", 4e-3, 0.93},     {"q6_k", 1.2e-2, 0.91},  {"q5_k", 3e-2, 0.88},
    {"q4_k", 5e-2, 0.87},     {"q4_1", 1e-1, 0.81},    {"q4_0", 1.5e-1, 0.80},
    {"iq4_nl", 1.5e-1, 0.82}, {"iq4_xs", 9e-2, 0.83},  {"q3_k", 2e-1, 0.72},
    {"q2_k", 7e-1, 0.60},     {"mxfp4", 2.3e-1, 0.79}, {"fp8", 1.5e-2, 0.92},
    {"nvfp4", 8.5e-2, 0.84},
};

class KlQuant : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    base_ = Model::load(k_demo).release();
    const std::string text =
        "User: What is a harbor?\nAssistant: A harbor is a sheltered part of a body of water "
        "deep enough to provide anchorage for ships.\nUser: What does it mean to wander?\n"
        "Assistant: To wander is to move about without a definite destination or purpose.\n"
        "User: What is a lantern?\nAssistant: A lantern is a light enclosed in a case with "
        "transparent sides, carried by a handle.\nUser: Tell me about a meadow.\nAssistant: A "
        "meadow is a field where grass grows and animals graze.";
    ids_ = Tokenizer::load(k_demo).encode(text, false);
    base_logp_ = logp_of(*base_);
  }
  static void TearDownTestSuite() { delete base_; }

  static std::vector<float> logp_of(const Model& m) { return test::log_probs(m, ids_); }

  static std::unique_ptr<Model> quantized(const std::string& type, const std::string& tmp) {
    if (type == "fp8" || type == "nvfp4") {
      test::HfQuantWriter(type == "fp8" ? test::HfQuant::FP8_BLOCK : test::HfQuant::NVFP4, true)
          .write(k_demo, tmp);
      return Model::load(tmp);
    }
    GgufWriter w;
    gguf_add_model(w, *base_, {.type = static_cast<uint32_t>(quant::parse(type)), .name = "demo"});
    w.write(tmp + ".gguf", 1, nullptr);
    return Model::load(tmp + ".gguf");
  }

  static Model* base_;
  static std::vector<int32_t> ids_;
  static std::vector<float> base_logp_;

  static KlStats kl_of(const std::string& type) {
    const int64_t T = static_cast<int64_t>(ids_.size()), V = base_->config().vocab_size;
    const fs::path root = fs::temp_directory_path() / ("ft_kl_quant_" + std::to_string(::getpid()));
    fs::create_directories(root);
    auto m = quantized(type, (root / type).string());
    const auto lp = logp_of(*m);
    fs::remove_all(root);
    KlStats kl;
    for (int64_t t = 0; t < T; ++t) kl.add(base_logp_.data() + t * V, lp.data() + t * V, V);
    return kl;
  }
};
Model* KlQuant::base_ = nullptr;
std::vector<int32_t> KlQuant::ids_;
std::vector<float> KlQuant::base_logp_;

class KlQuantFormat : public KlQuant, public ::testing::WithParamInterface<Bound> {};

TEST_P(KlQuantFormat, WithinItsBound) {
  const Bound& b = GetParam();
  ASSERT_GE(ids_.size(), 64u);
  const KlStats kl = kl_of(b.type);
  std::printf("[ kl ] %-7s mean %.3e  p99 %.3e  max %.3e  top1 %.3f  (bound %.1e, top1 >= %.2f)\n",
              b.type, kl.mean(), kl.quantile(0.99), kl.max(), kl.top1_agreement(), b.max_mean_kl,
              b.min_top1);
  EXPECT_LE(kl.mean(), b.max_mean_kl) << b.type;
  EXPECT_GE(kl.top1_agreement(), b.min_top1) << b.type;
  EXPECT_GT(kl.mean(), 0.0) << b.type << ": not quantized?";
}

INSTANTIATE_TEST_SUITE_P(Formats, KlQuantFormat, ::testing::ValuesIn(k_bounds),
                         [](const auto& i) { return std::string(i.param.type); });

// More bits, closer to bf16 (the quick formats: no K-quant scale search).
TEST_F(KlQuant, FinerFormatsAreCloser) {
  EXPECT_LT(kl_of("q8_0").mean(), kl_of("q4_0").mean());
  EXPECT_LT(kl_of("fp8").mean(), kl_of("nvfp4").mean());
}

}  // namespace
}  // namespace ft
