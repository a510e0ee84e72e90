// Detokenizer tests: UTF-8 hold-back, byte-fallback tokens, skip_special, flush.
#include <gtest/gtest.h>

#include <filesystem>

#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace {

const std::string kModels = FT_TOKENIZER_MODELS;

// Loads a reference tokenizer shipped by the npm test packages, or skips the test.
#define LOAD_OR_SKIP(var, name)                                                              \
  std::string dir_##var = kModels + "/tokenizer-" name "/models";                            \
  if (!std::filesystem::exists(dir_##var)) GTEST_SKIP() << "run npm ci in tests/js first"; \
  ft::Tokenizer var = ft::Tokenizer::load(dir_##var)

std::string stream_all(const ft::Tokenizer& tok, const std::vector<int32_t>& ids, bool skip,
                       std::vector<std::string>* deltas = nullptr) {
  ft::Detokenizer d(tok, skip);
  std::string out;
  for (int32_t id : ids) {
    std::string delta = d.feed(id);
    EXPECT_TRUE(ft::utf8::is_valid(delta));
    if (deltas) deltas->push_back(delta);
    out += delta;
  }
  return out + d.flush();
}

}  // namespace

TEST(Detokenizer, ByteLevelHoldsBackSplitCharacters) {
  LOAD_OR_SKIP(tok, "qwen3");
  const std::string text = "héllo 你好 😀 𪚥 👨‍👩‍👧 done";
  auto ids = tok.encode(text, false);
  std::vector<std::string> deltas;
  EXPECT_EQ(stream_all(tok, ids, false, &deltas), text);
  // 𪚥 (4 bytes) is spelled by more than one byte-level token: the first emits nothing.
  auto rare = tok.encode("𪚥", false);
  ASSERT_GT(rare.size(), 1u);
  ft::Detokenizer d(tok, false);
  EXPECT_EQ(d.feed(rare[0]), "");
  std::string rest;
  for (size_t i = 1; i < rare.size(); ++i) rest += d.feed(rare[i]);
  EXPECT_EQ(rest, "𪚥");
  EXPECT_EQ(d.flush(), "");
}

TEST(Detokenizer, ByteFallbackTokens) {
  LOAD_OR_SKIP(tok, "gemma3");
  int32_t e2 = tok.token_id("<0xE2>"), x82 = tok.token_id("<0x82>"), xac = tok.token_id("<0xAC>");
  ASSERT_GE(e2, 0);
  ft::Detokenizer d(tok, false);
  EXPECT_EQ(d.feed(e2), "");
  EXPECT_EQ(d.feed(x82), "");
  EXPECT_EQ(d.feed(xac), "€");
  // An unfinished run cut by a normal token becomes one U+FFFD per byte, as HF's ByteFallback.
  EXPECT_EQ(d.feed(e2), "");
  EXPECT_EQ(d.feed(x82), "");
  EXPECT_EQ(d.feed(tok.token_id("a")), "\xEF\xBF\xBD\xEF\xBF\xBD" "a");
  EXPECT_EQ(d.feed(e2), "");
  EXPECT_EQ(d.flush(), "\xEF\xBF\xBD");
  std::vector<int32_t> ids{e2, x82, xac, tok.token_id("▁b"), e2};
  EXPECT_EQ(stream_all(tok, ids, false), tok.decode(ids, false));
}

TEST(Detokenizer, ByteLevelInvalidBytesMatchDecode) {
  LOAD_OR_SKIP(tok, "llama3_1");
  const auto& b2c = ft::utf8::byte_to_char();
  auto byte_id = [&](unsigned char b) {
    std::string s;
    ft::utf8::append(s, b2c[b]);
    return tok.token_id(s);
  };
  std::vector<int32_t> ids;
  for (unsigned char b : std::string("ok \xE2\x82 \xF0\x9F\x98\x80 \xFF\xC0\xAF end \xE4\xBD"))
    ids.push_back(byte_id(b));
  EXPECT_EQ(stream_all(tok, ids, false), tok.decode(ids, false));
}

TEST(Detokenizer, SkipSpecialTokens) {
  LOAD_OR_SKIP(tok, "qwen3");
  auto ids = tok.encode("<|im_start|>user\nhi<|im_end|><think>", false);
  EXPECT_EQ(stream_all(tok, ids, true), "user\nhi<think>");  // <think> is not special
  EXPECT_EQ(stream_all(tok, ids, false), "<|im_start|>user\nhi<|im_end|><think>");
  EXPECT_EQ(tok.decode(ids, true), "user\nhi<think>");
}

TEST(Detokenizer, GemmaStreamMatchesDecode) {
  LOAD_OR_SKIP(tok, "gemma3");
  const std::string text = "  Hello\n\nworld ▁ <start_of_turn>x  y\t😀 𪚥 ";
  auto ids = tok.encode(text, true);
  for (bool skip : {false, true}) EXPECT_EQ(stream_all(tok, ids, skip), tok.decode(ids, skip));
}
