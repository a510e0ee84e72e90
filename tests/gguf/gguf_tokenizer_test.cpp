// GGUF tokenizers: the demo model's tokenizer.json written as tokenizer.ggml.* metadata encodes
// the tokenizer corpus identically; the qwen2 and llama-bpe pre-tokenizers round-trip through
// their GGUF names; a SentencePiece-style "llama" vocabulary merges by score with byte fallback;
// the chat template comes from tokenizer.chat_template.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../io/gguf_test_util.h"
#include "base/error.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/tokenizer.h"

namespace ft {
namespace {

namespace fs = std::filesystem;
using test::TempDir;

const std::string k_demo = FT_SOURCE_DIR "/models/demo";
const std::string k_corpus = FT_SOURCE_DIR "/tests/tokenizer/corpus";

std::string tokenizer_gguf(const std::string& hf_dir, const std::string& path) {
  GgufWriter w;
  w.set("general.architecture", GgufValue::str("qwen3moe"));
  gguf_add_hf_tokenizer(w, hf_dir);
  w.write(path);
  return path;
}

// Every corpus file whole and line by line, with and without special tokens.
void expect_same_encoding(const Tokenizer& a, const Tokenizer& b, const std::string& what) {
  size_t checked = 0;
  for (const auto& e : fs::directory_iterator(k_corpus)) {
    const std::string text = test::slurp(e.path().string());
    std::vector<std::string> pieces{text};
    std::string line;
    std::istringstream in(text);
    while (std::getline(in, line)) pieces.push_back(line);
    for (const auto& p : pieces)
      for (bool special : {false, true}) {
        const auto ia = a.encode(p, special), ib = b.encode(p, special);
        ASSERT_EQ(ia, ib) << what << ": " << e.path().filename() << " '" << p.substr(0, 60) << "'";
        EXPECT_EQ(a.decode(ia, false), b.decode(ib, false));
        EXPECT_EQ(a.decode(ia, true), b.decode(ib, true));
        checked += ia.size();
      }
  }
  EXPECT_GT(checked, 1000u) << what;
}

TEST(GgufTokenizer, DemoTokenizerEncodesTheCorpusIdentically) {
  TempDir tmp;
  const std::string path = tokenizer_gguf(k_demo, tmp.file("tok.gguf"));
  auto g = GgufSet::open(path);
  EXPECT_EQ(g->get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(g->get_string("tokenizer.ggml.pre"), "gpt2");
  const Tokenizer hf = Tokenizer::load(k_demo);
  const Tokenizer gg = Tokenizer::load(path);
  EXPECT_EQ(gg.vocab_size(), hf.vocab_size());
  EXPECT_EQ(gg.bos_id(), hf.bos_id());
  EXPECT_EQ(gg.eos_id(), hf.eos_id());
  EXPECT_EQ(gg.prefix_ids(), hf.prefix_ids());
  EXPECT_EQ(gg.suffix_ids(), hf.suffix_ids());
  for (int32_t id = 0; id < static_cast<int32_t>(hf.vocab_size()); ++id) {
    ASSERT_EQ(gg.piece(id), hf.piece(id)) << id;
    ASSERT_EQ(gg.is_special(id), hf.is_special(id)) << id;
  }
  expect_same_encoding(hf, gg, "demo");
}

TEST(GgufTokenizer, ChatTemplateComesFromMetadata) {
  TempDir tmp;
  const std::string path = tokenizer_gguf(k_demo, tmp.file("tok.gguf"));
  nlohmann::ordered_json req = {{"messages", {{{"role", "user"}, {"content", "hello there"}}}},
                                {"add_generation_prompt", true}};
  const std::string a = ChatTemplate::load(k_demo).render(req);
  const std::string b = ChatTemplate::load(path).render(req);
  EXPECT_EQ(a, b);
  EXPECT_NE(b.find("<|im_start|>assistant"), std::string::npos) << b;
  GgufWriter w;
  w.write(tmp.file("none.gguf"));
  EXPECT_THROW(ChatTemplate::load(tmp.file("none.gguf")), Error);
}

// The demo vocabulary under another byte-level pre-tokenizer: the GGUF names it, and loading
// the name gives back the same splits as the tokenizer.json.
void check_pre(const std::string& regex, const std::string& gguf_name, bool ignore_merges) {
  TempDir tmp;
  nlohmann::json j = nlohmann::json::parse(test::slurp(k_demo + "/tokenizer.json"));
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers",
                         {{{"type", "Split"},
                           {"pattern", {{"Regex", regex}}},
                           {"behavior", "Isolated"},
                           {"invert", false}},
                          {{"type", "ByteLevel"},
                           {"add_prefix_space", false},
                           {"trim_offsets", false},
                           {"use_regex", false}}}}};
  j["model"]["ignore_merges"] = ignore_merges;
  fs::create_directories(tmp.path / "hf");
  test::spit(tmp.file("hf/tokenizer.json"), j.dump());
  fs::copy_file(k_demo + "/tokenizer_config.json", tmp.file("hf/tokenizer_config.json"));
  const std::string path = tokenizer_gguf(tmp.file("hf"), tmp.file("tok.gguf"));
  EXPECT_EQ(GgufSet::open(path)->get_string("tokenizer.ggml.pre"), gguf_name);
  expect_same_encoding(Tokenizer::load(tmp.file("hf")), Tokenizer::load(path), gguf_name);
}

TEST(GgufTokenizer, Qwen2PreTokenizer) {
  check_pre(
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
      "qwen2", false);
}

TEST(GgufTokenizer, LlamaBpePreTokenizer) {
  check_pre(
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
      "llama-bpe", true);
}

// A small SentencePiece-style vocabulary written by hand as GGUF metadata.
std::string spm_gguf(const TempDir& tmp) {
  std::vector<std::string> tokens{"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types{2, 3, 3};
  std::vector<float> scores{0, 0, 0};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    tokens.push_back(buf);
    types.push_back(6);
    scores.push_back(0);
  }
  const std::vector<std::pair<std::string, float>> pieces{{"\xe2\x96\x81", -1},
                                                          {"h", -2},
                                                          {"e", -3},
                                                          {"l", -4},
                                                          {"o", -5},
                                                          {"w", -6},
                                                          {"r", -7},
                                                          {"d", -8},
                                                          {"ll", -9},
                                                          {"\xe2\x96\x81h", -10},
                                                          {"\xe2\x96\x81he", -11},
                                                          {"llo", -12},
                                                          {"\xe2\x96\x81hello", -13},
                                                          {"\xe2\x96\x81w", -14},
                                                          {"or", -15},
                                                          {"\xe2\x96\x81wor", -16},
                                                          {"he", -100}};
  for (const auto& [p, s] : pieces) {
    tokens.push_back(p);
    types.push_back(1);
    scores.push_back(s);
  }
  GgufWriter w;
  w.set("tokenizer.ggml.model", GgufValue::str("llama"));
  w.set("tokenizer.ggml.tokens", GgufValue::strings(tokens));
  w.set("tokenizer.ggml.scores", GgufValue::f32s(scores));
  w.set("tokenizer.ggml.token_type", GgufValue::i32s(types));
  w.set("tokenizer.ggml.bos_token_id", GgufValue::u32(1));
  w.set("tokenizer.ggml.eos_token_id", GgufValue::u32(2));
  w.set("tokenizer.ggml.unknown_token_id", GgufValue::u32(0));
  return w.write(tmp.file("spm.gguf")).front();
}

TEST(GgufTokenizer, SentencePieceMergesByScoreWithByteFallback) {
  TempDir tmp;
  const Tokenizer tok = Tokenizer::load(spm_gguf(tmp));
  auto id = [&](const char* t) { return tok.token_id(t); };
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.prefix_ids(), (std::vector<int32_t>{1}));  // "llama" adds bos by default
  // "▁h"+"e" (score -11) beats "h"+"e" (-100); "l"+"l" then "ll"+"o"; then the whole word.
  EXPECT_EQ(tok.encode("hello", false), (std::vector<int32_t>{id("\xe2\x96\x81hello")}));
  EXPECT_EQ(
      tok.encode("hello world", true),
      (std::vector<int32_t>{1, id("\xe2\x96\x81hello"), id("\xe2\x96\x81wor"), id("l"), id("d")}));
  // Characters outside the vocabulary fall back to their UTF-8 bytes.
  const auto ids = tok.encode("h\xc3\xa9", false);
  EXPECT_EQ(ids, (std::vector<int32_t>{id("\xe2\x96\x81h"), id("<0xC3>"), id("<0xA9>")}));
  EXPECT_EQ(tok.decode(ids, true), "h\xc3\xa9");
  EXPECT_EQ(tok.decode(tok.encode("hello world", true), true), "hello world");
}

TEST(GgufTokenizer, BadVocabulariesAreErrors) {
  TempDir tmp;
  auto err = [&](GgufWriter& w) {
    w.write(tmp.file("bad.gguf"));
    try {
      Tokenizer::load(tmp.file("bad.gguf"));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  {
    GgufWriter w;
    EXPECT_NE(err(w).find("tokenizer.ggml.model is missing"), std::string::npos);
  }
  {
    GgufWriter w;
    w.set("tokenizer.ggml.model", GgufValue::str("bert"));
    w.set("tokenizer.ggml.tokens", GgufValue::strings({"a"}));
    EXPECT_NE(err(w).find("'bert' is not supported"), std::string::npos);
  }
  {
    GgufWriter w;
    w.set("tokenizer.ggml.model", GgufValue::str("gpt2"));
    w.set("tokenizer.ggml.pre", GgufValue::str("klingon"));
    w.set("tokenizer.ggml.tokens", GgufValue::strings({"a"}));
    std::string e = err(w);
    EXPECT_NE(e.find("'klingon' is not supported"), std::string::npos) << e;
    EXPECT_NE(e.find("qwen2"), std::string::npos) << e;
  }
  {
    GgufWriter w;
    w.set("tokenizer.ggml.model", GgufValue::str("gpt2"));
    w.set("tokenizer.ggml.tokens", GgufValue::strings({"a", "b"}));
    w.set("tokenizer.ggml.token_type", GgufValue::i32s({1}));
    EXPECT_NE(err(w).find("token_type has 1 entries for 2 tokens"), std::string::npos);
  }
  {
    GgufWriter w;
    w.set("tokenizer.ggml.model", GgufValue::str("gpt2"));
    w.set("tokenizer.ggml.tokens", GgufValue::strings({"a", "b"}));
    w.set("tokenizer.ggml.eos_token_id", GgufValue::u32(7));
    EXPECT_NE(err(w).find("outside the vocabulary"), std::string::npos);
  }
}

}  // namespace
}  // namespace ft
