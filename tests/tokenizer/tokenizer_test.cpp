// Tokenizer unit tests: load errors, added-token flags, generation_config and stop ids.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "base/error.h"
#include "tokenizer/generation_config.h"
#include "tokenizer/tokenizer.h"

namespace fs = std::filesystem;

namespace {

const std::string kFlags = FT_SOURCE_DIR "/tests/tokenizer/fixtures/byte_level_flags";

// A fresh directory holding the given files.
fs::path make_dir(const std::string& name, const std::vector<std::pair<std::string, std::string>>& files) {
  fs::path dir = fs::temp_directory_path() / ("ft_tok_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& [file, text] : files) std::ofstream(dir / file) << text;
  return dir;
}

std::string error_of(const std::string& dir) {
  try {
    ft::Tokenizer::load(dir);
  } catch (const ft::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(TokenizerLoad, MissingFileNamesThePath) {
  auto dir = make_dir("missing", {});
  std::string err = error_of(dir.string());
  EXPECT_NE(err.find("tokenizer.json not found"), std::string::npos) << err;
  EXPECT_NE(err.find(dir.string()), std::string::npos) << err;
}

TEST(TokenizerLoad, MalformedJson) {
  auto dir = make_dir("malformed", {{"tokenizer.json", "{\"model\": {\"type\": \"BPE\", "}});
  std::string err = error_of(dir.string());
  EXPECT_NE(err.find("malformed JSON"), std::string::npos) << err;
  EXPECT_NE(err.find("tokenizer.json"), std::string::npos) << err;
}

TEST(TokenizerLoad, UnsupportedModelType) {
  auto dir = make_dir("unigram", {{"tokenizer.json", R"({"model": {"type": "Unigram", "vocab": []}})"}});
  std::string err = error_of(dir.string());
  EXPECT_NE(err.find("model type 'Unigram' is not supported"), std::string::npos) << err;
}

TEST(TokenizerLoad, UnsupportedPreTokenizerAndBadStructure) {
  auto dir = make_dir("pretok", {{"tokenizer.json",
      R"({"pre_tokenizer": {"type": "BertPreTokenizer"}, "model": {"type": "BPE", "vocab": {}, "merges": []}})"}});
  EXPECT_NE(error_of(dir.string()).find("pre_tokenizer type 'BertPreTokenizer'"), std::string::npos);
  dir = make_dir("structure", {{"tokenizer.json", R"({"model": {"type": "BPE", "vocab": [1, 2]}})"}});
  EXPECT_NE(error_of(dir.string()).find("vocab must be an object"), std::string::npos);
  dir = make_dir("nomodel", {{"tokenizer.json", "[1, 2, 3]"}});
  EXPECT_NE(error_of(dir.string()).find("no \"model\" section"), std::string::npos);
}

// Expected ids come from HF tokenizers (Rust) on the same fixture.
TEST(AddedTokens, LstripRstripSingleWord) {
  auto tok = ft::Tokenizer::load(kFlags);
  using V = std::vector<int32_t>;
  EXPECT_EQ(tok.encode("abc  <mask> b", false), (V{258, 259, 256}));
  EXPECT_EQ(tok.encode("x <r>  b", false), (V{120, 32, 260, 98}));
  EXPECT_EQ(tok.encode("word words aword word.", false),
            (V{261, 32, 119, 111, 114, 100, 115, 32, 97, 119, 111, 114, 100, 32, 261, 46}));
  EXPECT_EQ(tok.encode("abcab b", false), (V{258, 257, 256}));
  EXPECT_TRUE(tok.is_special(259));
  EXPECT_FALSE(tok.is_special(260));
  std::vector<int32_t> ids = tok.encode("abc  <mask> b", false);
  EXPECT_EQ(tok.decode(ids, true), "abc b");
  EXPECT_EQ(tok.decode(ids, false), "abc<mask> b");  // lstrip consumed the spaces
  EXPECT_EQ(tok.decode(tok.encode("x <r>  b", false), false), "x <r>b");
  EXPECT_EQ(tok.token_id("<mask>"), 259);
  EXPECT_EQ(tok.token_id("abc"), 258);
  EXPECT_EQ(tok.token_id("nope"), -1);
  EXPECT_EQ(tok.piece(258), "abc");
  EXPECT_EQ(tok.vocab_size(), 262u);
}

TEST(AddedTokens, InvalidUtf8InputIsRepaired) {
  auto tok = ft::Tokenizer::load(kFlags);
  std::vector<int32_t> ids = tok.encode("a\xff" "b", false);
  EXPECT_EQ(tok.decode(ids, false), "a\xEF\xBF\xBD" "b");
}

TEST(GenerationConfig, ReadsEosListAndSampling) {
  auto dir = make_dir("gen", {{"generation_config.json",
      R"({"bos_token_id": 2, "eos_token_id": [261, 7], "temperature": 0.6, "top_p": 0.95, "top_k": 20, "do_sample": true})"}});
  auto g = ft::GenerationConfig::load(dir.string());
  EXPECT_EQ(g.eos_token_ids, (std::vector<int32_t>{261, 7}));
  EXPECT_EQ(g.bos_token_id, 2);
  EXPECT_FLOAT_EQ(*g.temperature, 0.6f);
  EXPECT_FLOAT_EQ(*g.top_p, 0.95f);
  EXPECT_EQ(g.top_k, 20);
  EXPECT_FALSE(g.min_p.has_value());
  auto tok = ft::Tokenizer::load(kFlags);  // its config names no eos
  EXPECT_EQ(ft::stop_token_ids(g, tok), (std::vector<int32_t>{7, 261}));
}

TEST(GenerationConfig, IntEosMissingFileAndErrors) {
  auto dir = make_dir("gen_int", {{"generation_config.json", R"({"eos_token_id": 5})"}});
  EXPECT_EQ(ft::GenerationConfig::load(dir.string()).eos_token_ids, (std::vector<int32_t>{5}));
  EXPECT_TRUE(ft::GenerationConfig::load(make_dir("gen_none", {}).string()).eos_token_ids.empty());
  dir = make_dir("gen_bad", {{"generation_config.json", R"({"eos_token_id": "x"})"}});
  EXPECT_THROW(ft::GenerationConfig::load(dir.string()), ft::Error);
  dir = make_dir("gen_broken", {{"generation_config.json", "{"}});
  EXPECT_THROW(ft::GenerationConfig::load(dir.string()), ft::Error);
}

TEST(GenerationConfig, StopIdsIncludeTokenizerEos) {
  auto dir = make_dir("gen_tok", {{"tokenizer.json", ""}, {"tokenizer_config.json", R"({"eos_token": "<r>"})"}});
  fs::copy_file(kFlags + "/tokenizer.json", dir / "tokenizer.json", fs::copy_options::overwrite_existing);
  auto tok = ft::Tokenizer::load(dir.string());
  EXPECT_EQ(tok.eos_id(), 260);
  ft::GenerationConfig g;
  g.eos_token_ids = {261, 260};
  EXPECT_EQ(ft::stop_token_ids(g, tok), (std::vector<int32_t>{260, 261}));
}
