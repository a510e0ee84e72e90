// Loader and config errors: every broken checkpoint is an ft::Error naming the file and the
// problem, never a crash. Broken copies of the qwen3_moe fixture are made in a temp dir.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "base/error.h"
#include "io/mmap.h"
#include "io/safetensors.h"
#include "model/model.h"

namespace fs = std::filesystem;

namespace ft {
namespace {

const std::string k_fixture = std::string(FT_FIXTURES) + "/qwen3_moe";

class BrokenCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ft_loader_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    fs::copy_file(k_fixture + "/config.json", dir_ / "config.json");
    fs::copy_file(k_fixture + "/model.safetensors", dir_ / "model.safetensors");
  }
  void TearDown() override { fs::remove_all(dir_); }

  void write(const std::string& name, const std::string& data) {
    std::ofstream(dir_ / name, std::ios::binary) << data;
  }
  std::string read(const std::string& name) { return read_file((dir_ / name).string()); }
  // Expects Model::load to throw an ft::Error whose message contains every needle.
  void expect_error(std::initializer_list<std::string> needles) {
    try {
      Model::load(dir_.string());
      FAIL() << "expected an error";
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line: " << msg;
      for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << msg;
    }
  }
  void edit_config(const std::function<void(nlohmann::json&)>& fn) {
    auto j = nlohmann::json::parse(read("config.json"));
    fn(j);
    write("config.json", j.dump());
  }
  fs::path dir_;
};

TEST_F(BrokenCheckpoint, LoadsWhenIntact) { EXPECT_NO_THROW(Model::load(dir_.string())); }

TEST_F(BrokenCheckpoint, TruncatedFile) {
  std::string data = read("model.safetensors");
  write("model.safetensors", data.substr(0, data.size() - 1000));
  expect_error({"model.safetensors", "truncated"});
}

TEST_F(BrokenCheckpoint, TruncatedHeader) {
  write("model.safetensors", read("model.safetensors").substr(0, 100));
  expect_error({"model.safetensors"});
}

TEST_F(BrokenCheckpoint, TinyFile) {
  write("model.safetensors", "abc");
  expect_error({"model.safetensors", "too small"});
}

TEST_F(BrokenCheckpoint, GarbageHeader) {
  std::string data = read("model.safetensors");
  for (int i = 8; i < 40; ++i) data[i] = '#';
  write("model.safetensors", data);
  expect_error({"model.safetensors", "JSON"});
}

TEST_F(BrokenCheckpoint, MissingTensor) {
  edit_config([](auto& j) { j["num_hidden_layers"] = 5; });
  expect_error({"model.layers.4.input_layernorm.weight", "missing"});
}

TEST_F(BrokenCheckpoint, WrongShape) {
  edit_config([](auto& j) { j["moe_intermediate_size"] = 48; });
  expect_error({"shape", "[32, 64]", "[48, 64]"});
}

TEST_F(BrokenCheckpoint, UnsupportedModelType) {
  edit_config([](auto& j) { j["model_type"] = "llama_moe_xl"; });
  expect_error({"llama_moe_xl", "not supported", "qwen3_moe"});
}

TEST_F(BrokenCheckpoint, MissingConfigField) {
  edit_config([](auto& j) { j.erase("hidden_size"); });
  expect_error({"config.json", "hidden_size"});
}

TEST_F(BrokenCheckpoint, BadConfigValues) {
  edit_config([](auto& j) { j["num_key_value_heads"] = 3; });
  expect_error({"num_key_value_heads"});
  edit_config([](auto& j) {
    j["num_key_value_heads"] = 2;
    j["num_experts_per_tok"] = 99;
  });
  expect_error({"num_experts_per_tok"});
  edit_config([](auto& j) {
    j["num_experts_per_tok"] = 2;
    j["rope_parameters"] = {{"rope_type", "dynamic-ntk-xyz"}, {"rope_theta", 1.0}};
  });
  expect_error({"rope type", "dynamic-ntk-xyz"});
}

TEST_F(BrokenCheckpoint, ConfigNotJson) {
  write("config.json", "{not json");
  expect_error({"config.json", "JSON"});
}

TEST_F(BrokenCheckpoint, NoWeights) {
  fs::remove(dir_ / "model.safetensors");
  expect_error({"no .safetensors"});
}

TEST_F(BrokenCheckpoint, MissingShard) {
  write("model.safetensors.index.json",
        R"({"weight_map": {"a": "model-00001-of-00002.safetensors"}})");
  expect_error({"model-00001-of-00002.safetensors", "missing"});
}

TEST_F(BrokenCheckpoint, ShardNameEscapingDirectory) {
  write("model.safetensors.index.json", R"({"weight_map": {"a": "../etc/passwd"}})");
  expect_error({"plain file name"});
}

TEST(Config, MissingDirectory) {
  EXPECT_THROW(Model::load("/nonexistent/model/dir"), Error);
}

TEST(Safetensors, ShardedFixtureAndStackedExperts) {
  // qwen3_moe_yarn is written in two shards with transformers-5 stacked experts.
  auto set = SafetensorsSet::open_dir(std::string(FT_FIXTURES) + "/qwen3_moe_yarn");
  EXPECT_TRUE(set.has("model.layers.1.mlp.experts.gate_up_proj"));
  auto m = Model::load(std::string(FT_FIXTURES) + "/qwen3_moe_yarn");
  const auto& L = m->weights().layers[1];
  ASSERT_EQ(L.experts.size(), 6u);
  EXPECT_EQ(L.experts[2].gate.shape[0], 24);
  EXPECT_EQ(L.experts[2].up.shape[1], 64);
  EXPECT_EQ(L.experts[2].down.shape[0], 64);
  EXPECT_TRUE(m->weights().layers[0].experts.empty());  // decoder_sparse_step 2: dense
}

// The benchmarks' synthetic weights: every row of a matrix is its own. (One table offset per
// tensor repeated [rows, 2048] rows every 32: four identical copies of each router row, so the
// top-k's ties sent every token to experts 0..31.)
TEST(SyntheticModel, RowsAreDistinct) {
  const ModelConfig c = synthetic_moe_config({.layers = 1, .experts = 128, .top_k = 8,
                                              .hidden = 2048, .expert_dim = 8, .heads = 4,
                                              .kv_heads = 1, .head_dim = 64, .vocab = 64});
  auto m = Model::synthetic(c, 42);
  for (const TensorView* t : {&m->weights().layers[0].router, &m->weights().embed}) {
    ASSERT_EQ(t->dtype, DType::BF16);
    const int64_t rows = t->shape[0], bytes = t->shape[1] * 2;
    const auto* p = static_cast<const char*>(t->data);
    for (int64_t a = 0; a < rows; ++a)
      for (int64_t b = a + 1; b < rows; ++b)
        ASSERT_NE(std::memcmp(p + a * bytes, p + b * bytes, bytes), 0)
            << t->name << " rows " << a << " and " << b;
  }
}

}  // namespace
}  // namespace ft
