// Anchors: special ids looked up in a real tokenizer's vocabulary, boundary positions in
// rendered conversations (after <|im_end|>, around tool calls and thinking, every N, the end).
#include "engine/anchors.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"

namespace ft {
namespace {

// The demo tokenizer with Qwen-style tool and thinking tokens added after its vocabulary.
Tokenizer agent_tokenizer() {
  std::ifstream f(std::string(FT_DEMO) + "/tokenizer.json");
  nlohmann::json j = nlohmann::json::parse(f);
  int32_t next = 0;
  for (auto& [k, v] : j["model"]["vocab"].items()) next = std::max(next, v.get<int32_t>() + 1);
  for (auto& a : j["added_tokens"]) next = std::max(next, a["id"].get<int32_t>() + 1);
  for (const char* t : {"<tool_call>", "</tool_call>", "<think>", "</think>", "<tool_response>",
                        "</tool_response>"})
    j["added_tokens"].push_back({{"id", next++},
                                 {"content", t},
                                 {"single_word", false},
                                 {"lstrip", false},
                                 {"rstrip", false},
                                 {"normalized", false},
                                 {"special", true}});
  return Tokenizer::from_json(j, "agent tokenizer");
}

TEST(Anchors, SpecialIdsComeFromTheVocabulary) {
  const Tokenizer tok = agent_tokenizer();
  const AnchorTokens a = anchor_tokens(tok);
  auto has = [](const std::vector<int32_t>& v, int32_t id) {
    return id >= 0 && std::find(v.begin(), v.end(), id) != v.end();
  };
  EXPECT_TRUE(has(a.after, tok.token_id("<|im_end|>")));
  EXPECT_TRUE(has(a.after, tok.token_id("</tool_call>")));
  EXPECT_TRUE(has(a.after, tok.token_id("</think>")));
  EXPECT_TRUE(has(a.before, tok.token_id("<tool_call>")));
  EXPECT_TRUE(has(a.before, tok.token_id("<|im_start|>")));
  for (int32_t id : a.after) EXPECT_TRUE(tok.is_special(id));
  // A vocabulary without the tool tokens yields only what it has.
  const AnchorTokens plain = anchor_tokens(Tokenizer::load(FT_DEMO));
  EXPECT_EQ(plain.after.size(), 1u);   // <|im_end|>
  EXPECT_EQ(plain.before.size(), 1u);  // <|im_start|>
}

TEST(Anchors, BoundariesOfARenderedAgentTurn) {
  const Tokenizer tok = agent_tokenizer();
  const std::string text =
      "<|im_start|>user\nfix the bug<|im_end|>\n<|im_start|>assistant\n<think>\nlook at it\n"
      "</think>\n\n<tool_call>\n{\"name\": \"read\"}\n</tool_call><|im_end|>\n<|im_start|>user\n"
      "<tool_response>\nok\n</tool_response><|im_end|>\n";
  const std::vector<int32_t> ids = tok.encode(text, false);
  const AnchorTokens a = anchor_tokens(tok);
  const auto pos = find_anchors(ids, a, 0);
  // Expected: every boundary computed independently from the ids.
  std::vector<int64_t> want;
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string_view p = tok.piece(ids[i]);
    if (p == "<|im_start|>" || p == "<think>" || p == "<tool_call>" || p == "<tool_response>")
      if (i > 0) want.push_back(static_cast<int64_t>(i));
    if (p == "<|im_end|>" || p == "</think>" || p == "</tool_call>" || p == "</tool_response>")
      want.push_back(static_cast<int64_t>(i + 1));
  }
  want.push_back(static_cast<int64_t>(ids.size()) - 1);
  want.push_back(static_cast<int64_t>(ids.size()));
  std::sort(want.begin(), want.end());
  want.erase(std::unique(want.begin(), want.end()), want.end());
  EXPECT_EQ(pos, want);
  EXPECT_GE(pos.size(), 10u);
  // Only boundaries after `from` are reported.
  const auto later = find_anchors(ids, a, 0, want[3]);
  EXPECT_EQ(later, std::vector<int64_t>(want.begin() + 4, want.end()));
}

TEST(Anchors, EveryNTokensAndTheEnd) {
  const AnchorTokens a{.after = {7}, .before = {9}};
  const std::vector<int32_t> ids{1, 7, 2, 3, 9, 4, 5, 6, 8, 8};
  EXPECT_EQ(find_anchors(ids, a, 0), (std::vector<int64_t>{2, 4, 9, 10}));
  EXPECT_EQ(find_anchors(ids, a, 4), (std::vector<int64_t>{2, 4, 8, 9, 10}));
  EXPECT_EQ(find_anchors(ids, a, 3, 4), (std::vector<int64_t>{6, 9, 10}));
  EXPECT_TRUE(find_anchors(ids, a, 3, 10).empty());
}

}  // namespace
}  // namespace ft
