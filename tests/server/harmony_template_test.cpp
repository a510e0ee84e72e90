// The Harmony chat template of the gpt-oss server test model: an API conversation with
// reasoning, tool calls (string arguments) and tool results renders as Harmony messages, and the
// real o200k_harmony tokenizer keeps every special token a single id.
#include <gtest/gtest.h>

#include <filesystem>

#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

using namespace ft;
using ojson = nlohmann::ordered_json;

namespace {
const std::string k_template = FT_OSS_TEMPLATE;

ojson conversation() {
  return ojson::parse(R"({
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": null, "reasoning_content": "Need the tool.",
       "tool_calls": [{"id": "call_1", "type": "function",
                       "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp_c\": 21}"}],
    "tools": [{"type": "function", "function": {"name": "get_weather",
               "description": "Current weather", "parameters": {"type": "object",
               "properties": {"city": {"type": "string"}}}}}]})");
}
}  // namespace

TEST(HarmonyTemplate, ToolCallRoundTrip) {
  const ChatTemplate t = ChatTemplate::load(k_template);
  const std::string p = t.render(conversation());
  const std::string want_tail =
      "<|start|>user<|message|>Weather in Paris?<|end|>"
      "<|start|>assistant<|channel|>analysis<|message|>Need the tool.<|end|>"
      "<|start|>assistant to=functions.get_weather<|channel|>commentary <|constrain|>json"
      "<|message|>{\"city\": \"Paris\"}<|call|>"
      "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>"
      "{\"temp_c\": 21}<|end|><|start|>assistant";
  ASSERT_GE(p.size(), want_tail.size()) << p;
  EXPECT_EQ(p.substr(p.size() - want_tail.size()), want_tail) << p;
  EXPECT_TRUE(p.starts_with("<|start|>system<|message|>")) << p;
  EXPECT_NE(p.find("Reasoning: medium"), std::string::npos) << p;
  EXPECT_NE(p.find("commentary channel: 'functions'"), std::string::npos) << p;
  EXPECT_NE(p.find("<|start|>developer<|message|># Instructions\n\nBe brief.\n\n# Tools"),
            std::string::npos)
      << p;
  EXPECT_NE(p.find("// Current weather\ntype get_weather = (_: {"), std::string::npos) << p;
}

TEST(HarmonyTemplate, EarlierReasoningDroppedAndEffort) {
  const ChatTemplate t = ChatTemplate::load(k_template);
  ojson c = conversation();
  c["messages"].push_back(
      {{"role", "assistant"}, {"content", "21C."}, {"reasoning_content", "Easy."}});
  c["messages"].push_back({{"role", "user"}, {"content", "Thanks"}});
  c["reasoning_effort"] = "high";
  const std::string p = t.render(c);
  EXPECT_NE(p.find("Reasoning: high"), std::string::npos) << p;
  EXPECT_NE(p.find("<|start|>assistant<|channel|>final<|message|>21C.<|end|>"
                   "<|start|>user<|message|>Thanks<|end|><|start|>assistant"),
            std::string::npos)
      << p;
  // Analysis of finished turns is not shown to the model again.
  EXPECT_EQ(p.find("Need the tool."), std::string::npos) << p;
  EXPECT_EQ(p.find("Easy."), std::string::npos) << p;
}

TEST(HarmonyTemplate, SpecialTokensAreSingleIds) {
  const std::string dir = FT_OSS_TOKENIZER_DIR;
  if (!std::filesystem::exists(dir + "/tokenizer.json")) GTEST_SKIP() << "no " << dir;
  const Tokenizer tok = Tokenizer::load(dir);
  const std::string p = ChatTemplate::load(k_template).render(conversation());
  const auto ids = tok.encode(p, false);
  EXPECT_EQ(tok.decode(ids, false), p);
  int calls = 0, starts = 0;
  for (int32_t id : ids) {
    calls += id == tok.token_id("<|call|>");
    starts += id == tok.token_id("<|start|>");
  }
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(starts, 7);  // system, developer, user, analysis, call, tool result, generation
  EXPECT_EQ(tok.token_id("<|call|>"), 200012);
  EXPECT_EQ(tok.token_id("<|return|>"), 200002);
}
