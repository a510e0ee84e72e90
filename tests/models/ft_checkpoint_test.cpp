// Fast-load checkpoint: every fixture family, a quantized HF checkpoint, a re-typed write and a
// GGUF source round-trip through write_ft_checkpoint / Model::load with bit-identical logits
// to the model they were written from; the layout is 4 KiB aligned; broken files fail by name.
#include "model/ft_checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "base/error.h"
#include "hf_quant_writer.h"
#include "io/gguf_writer.h"
#include "model/gguf_export.h"
#include "model/transformer.h"
#include "tokenizer/gguf_hf_files.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/tokenizer.h"

namespace ft {
namespace {

namespace fs = std::filesystem;

std::string tmp_dir(const std::string& what) {
  const fs::path p =
      fs::temp_directory_path() / ("ft_ftc_test_" + std::to_string(::getpid()) + "_" + what);
  fs::remove_all(p);
  return p.string();
}

const std::vector<int32_t> k_ids = {1, 5, 9, 33, 2, 17, 64, 100, 7, 3, 250, 12};

std::vector<float> logits_of(const Model& m) {
  ThreadPool pool(2, false);
  Transformer tf(m, pool, 5);
  const int64_t T = static_cast<int64_t>(k_ids.size());
  KVCache kv(m.config(), T);
  std::vector<float> lg(T * m.config().vocab_size);
  tf.forward(k_ids.data(), T, 0, kv, lg.data(), true);
  return lg;
}

void expect_same_model(const Model& a, const Model& b) {
  EXPECT_EQ(config_to_json(a.config()), config_to_json(b.config()));
  EXPECT_EQ(a.matrix_bytes(), b.matrix_bytes());
  const auto la = logits_of(a), lb = logits_of(b);
  ASSERT_EQ(la.size(), lb.size());
  for (size_t i = 0; i < la.size(); ++i) ASSERT_EQ(la[i], lb[i]) << "logit " << i;
}

class FtcFamily : public ::testing::TestWithParam<std::string> {};

TEST_P(FtcFamily, RoundTripIsBitIdentical) {
  const std::string src = std::string(FT_FIXTURES) + "/" + GetParam();
  const std::string dir = tmp_dir(GetParam());
  auto m = Model::load(src);
  write_ft_checkpoint(*m, src, dir);
  ASSERT_TRUE(is_ft_checkpoint(dir));
  auto f = Model::load(dir);  // detected by its index
  expect_same_model(*m, *f);
  // Every matrix starts on a 4 KiB boundary of the data buffer.
  const char* base = static_cast<const char*>(f->weights().embed.data);
  f->weights().for_each_matrix([&](const TensorView& t) {
    EXPECT_EQ((static_cast<const char*>(t.data) - base) % 4096, 0) << t.name;
  });
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Families, FtcFamily,
                         ::testing::Values("qwen3_moe", "mixtral", "olmoe", "qwen3_5_moe",
                                           "qwen3_next", "gpt_oss"));

TEST(Ftc, QuantizedSourcesKeepTheirFormat) {
  const std::string src = std::string(FT_FIXTURES) + "/qwen3_next";
  for (auto kind : {test::HfQuant::FP8_BLOCK, test::HfQuant::NVFP4}) {
    const std::string q = tmp_dir(std::string("q_") + test::hf_quant_name(kind));
    const std::string dir = q + "_ftc";
    test::HfQuantWriter(kind, true).write(src, q);
    auto m = Model::load(q);
    write_ft_checkpoint(*m, q, dir);
    auto f = Model::load(dir);
    EXPECT_EQ(f->weights().layers[0].experts[0].gate.dtype,
              kind == test::HfQuant::NVFP4 ? DType::NVFP4 : DType::F8_E4M3_B128);
    expect_same_model(*m, *f);
    fs::remove_all(q);
    fs::remove_all(dir);
  }
}

// --type q8_0 gives the same bytes, hence logits, as the GGUF exporter's Q8_0.
TEST(Ftc, RetypedWriteMatchesGgufQuantization) {
  const std::string src = std::string(FT_FIXTURES) + "/qwen3_moe";
  const std::string dir = tmp_dir("q8");
  auto m = Model::load(src);
  write_ft_checkpoint(*m, src, dir, {.type = "q8_0", .progress = {}});
  GgufWriter w;
  gguf_add_model(w, *m, {.type = static_cast<uint32_t>(quant::QuantType::Q8_0), .name = "t"});
  w.write(dir + ".gguf", 1, {});
  auto f = Model::load(dir);
  auto g = Model::load(dir + ".gguf");
  EXPECT_EQ(f->weights().layers[0].experts[2].down.dtype, DType::Q8_0);
  EXPECT_EQ(f->weights().layers[0].router.dtype, DType::F32);
  // Same bytes for every matrix but the embedding (GGUF quantizes token_embd and expands it at
  // load; the checkpoint keeps the float table the lookup reads).
  std::vector<TensorView> mf, mg;
  f->weights().for_each_matrix([&](const TensorView& t) { mf.push_back(t); });
  g->weights().for_each_matrix([&](const TensorView& t) { mg.push_back(t); });
  ASSERT_EQ(mf.size(), mg.size());
  for (size_t i = 1; i < mf.size(); ++i) {
    ASSERT_EQ(mf[i].dtype, mg[i].dtype) << mf[i].name;
    ASSERT_EQ(mf[i].nbytes(), mg[i].nbytes()) << mf[i].name;
    ASSERT_EQ(std::memcmp(mf[i].data, mg[i].data, mf[i].nbytes()), 0) << mf[i].name;
  }
  const auto lf = logits_of(*f);
  // NVFP4 and FP8 targets load as those formats.
  for (const char* t : {"nvfp4", "fp8"}) {
    const std::string d = tmp_dir(t);
    write_ft_checkpoint(*m, src, d, {.type = t, .progress = {}});
    auto q = Model::load(d);
    EXPECT_EQ(q->weights().layers[0].q.w.dtype,
              std::string(t) == "fp8" ? DType::F8_E4M3_B128 : DType::NVFP4);
    EXPECT_EQ(logits_of(*q).size(), lf.size());
    fs::remove_all(d);
  }
  fs::remove_all(dir);
  fs::remove(dir + ".gguf");
}

// A GGUF source: config from its metadata, the tokenizer written as tokenizer.json.
TEST(Ftc, FromGgufWithTokenizer) {
  const std::string demo = std::string(FT_FIXTURES) + "/../../models/demo";
  const std::string gg = tmp_dir("demo") + ".gguf", dir = tmp_dir("demo_ftc");
  {
    auto m = Model::load(demo);
    GgufWriter w;
    gguf_add_model(w, *m, {.type = static_cast<uint32_t>(quant::QuantType::Q4_K), .name = "d"});
    gguf_add_hf_tokenizer(w, demo);
    w.write(gg, 1, {});
  }
  auto g = Model::load(gg);
  size_t last = 0, calls = 0;
  write_ft_checkpoint(*g, gg, dir, {.type = "", .progress = [&](size_t d, size_t t) {
                                      EXPECT_LE(d, t);
                                      EXPECT_GE(d, last);
                                      last = d;
                                      ++calls;
                                    }});
  EXPECT_GT(calls, 1u);
  write_gguf_tokenizer_as_hf(gg, dir);
  size_t seen = 0;
  auto f = Model::load_ftc(dir, [&](size_t d, size_t) { seen = d; });
  EXPECT_EQ(seen, fs::file_size(dir + "/weights.ftw"));
  expect_same_model(*g, *f);
  const std::string text = "User: What is a harbor?\nAssistant:";
  EXPECT_EQ(Tokenizer::load(dir).encode(text, true), Tokenizer::load(gg).encode(text, true));
  fs::remove_all(dir);
  fs::remove(gg);
}

TEST(Ftc, BrokenCheckpointsFailByName) {
  const std::string src = std::string(FT_FIXTURES) + "/olmoe";
  const std::string dir = tmp_dir("broken");
  write_ft_checkpoint(*Model::load(src), src, dir);
  auto expect_error = [&](const std::string& needle) {
    try {
      Model::load(dir);
      FAIL() << "loaded";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  fs::resize_file(dir + "/weights.ftw", 4096);
  expect_error("shorter than the");
  std::ofstream(dir + "/ft_checkpoint.json") << R"({"format": "ft-checkpoint", "version": 99})";
  expect_error("not an ft checkpoint of version 1");
  std::ofstream(dir + "/ft_checkpoint.json") << "{nope";
  expect_error("not valid JSON");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ft
