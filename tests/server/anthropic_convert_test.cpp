// Anthropic Messages -> chat body conversion: validation errors name the field; blocks map to
// OpenAI messages; the result renders through the real Qwen3 chat template.
#include <gtest/gtest.h>

#include "server/anthropic_convert.h"
#include "server/server.h"
#include "tokenizer/chat_template.h"

namespace ft::server::anthropic {
namespace {

using ojson = nlohmann::ordered_json;

ojson body(ojson extra = ojson::object()) {
  ojson b = {{"model", "m"}, {"max_tokens", 16},
             {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  for (auto& [k, v] : extra.items()) b[k] = v;
  return b;
}

// The 400 a body gets, with the field it names.
std::string error_param(const ojson& b, bool count = false) {
  try {
    parse_messages_request(b, count);
  } catch (const HttpError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.type, "invalid_request_error");
    EXPECT_NE(std::string(e.what()).find(e.param), std::string::npos) << e.what();
    return e.param;
  }
  ADD_FAILURE() << "accepted: " << b.dump();
  return "";
}

TEST(AnthropicConvert, Minimal) {
  const MessagesRequest r = parse_messages_request(body(), false);
  EXPECT_EQ(r.max_tokens, 16);
  EXPECT_FALSE(r.stream);
  EXPECT_FLOAT_EQ(r.temperature, 1.f);
  EXPECT_EQ(r.chat, ojson::parse(R"({"messages": [{"role": "user", "content": "hi"}]})"));
}

TEST(AnthropicConvert, SystemBlocksMergedAndBillingHeaderDropped) {
  ojson sys = {{{"type", "text"}, {"text", "x-anthropic-billing-header: cc_version=2; cch=abc;"}},
               {{"type", "text"}, {"text", "You are helpful."}, {"cache_control", {{"type", "ephemeral"}}}},
               {{"type", "text"}, {"text", "Be brief."}}};
  ojson b = body({{"system", sys}});
  b["messages"].push_back({{"role", "system"}, {"content", "Late system."}});
  const MessagesRequest r = parse_messages_request(b, false);
  EXPECT_EQ(r.dropped_system_blocks, 1);
  ASSERT_EQ(r.chat["messages"].size(), 2u);
  EXPECT_EQ(r.chat["messages"][0], (ojson{{"role", "system"},
                                          {"content", "You are helpful.\n\nBe brief.\n\nLate system."}}));
  const MessagesRequest s = parse_messages_request(
      body({{"system", "x-anthropic-billing-header: cch=1;\nReal prompt"}}), false);
  EXPECT_EQ(s.chat["messages"][0]["content"], "Real prompt");
}

TEST(AnthropicConvert, ToolUseAndResults) {
  ojson b = body({{"tools", {{{"name", "get_weather"}, {"description", "Weather"},
                              {"input_schema", {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}}}}}}});
  b["messages"] = ojson::parse(R"([
    {"role": "user", "content": "Paris?"},
    {"role": "assistant", "content": [
      {"type": "thinking", "thinking": "call it", "signature": "sig"},
      {"type": "redacted_thinking", "data": "xx"},
      {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
    {"role": "user", "content": [
      {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "18C"}]},
      {"type": "tool_result", "tool_use_id": "toolu_1", "content": "boom", "is_error": true},
      {"type": "text", "text": "and?"}]}])");
  const MessagesRequest r = parse_messages_request(b, false);
  const ojson& m = r.chat["messages"];
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(m[1]["role"], "assistant");
  EXPECT_TRUE(m[1]["content"].is_null());
  EXPECT_EQ(m[1]["reasoning_content"], "call it");
  EXPECT_EQ(m[1]["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(m[1]["tool_calls"][0]["function"]["arguments"], R"({"city":"Paris"})");
  EXPECT_EQ(m[2], (ojson{{"role", "tool"}, {"tool_call_id", "toolu_1"}, {"content", "18C"}, {"name", "get_weather"}}));
  EXPECT_EQ(m[3]["content"], "Error: boom");
  EXPECT_EQ(m[4], (ojson{{"role", "user"}, {"content", "and?"}}));
  EXPECT_EQ(r.chat["tools"][0]["function"]["parameters"]["type"], "object");
  EXPECT_EQ(r.tool_names, std::vector<std::string>{"get_weather"});
}

TEST(AnthropicConvert, ToolChoiceAndThinking) {
  const ojson tools = {{{"name", "f"}, {"input_schema", {{"type", "object"}}}}};
  auto none = parse_messages_request(body({{"tools", tools}, {"tool_choice", {{"type", "none"}}}}), false);
  EXPECT_FALSE(none.chat.contains("tools"));
  auto tool = parse_messages_request(body({{"tools", tools}, {"tool_choice", {{"type", "tool"}, {"name", "f"}}}}), false);
  EXPECT_EQ(tool.tool_choice.kind, ToolChoice::Kind::TOOL);
  EXPECT_EQ(tool.tool_choice.name, "f");
  EXPECT_EQ(error_param(body({{"tools", tools}, {"tool_choice", {{"type", "tool"}, {"name", "g"}}}})), "tool_choice.name");
  EXPECT_EQ(error_param(body({{"tool_choice", {{"type", "any"}}}})), "tool_choice");
  auto off = parse_messages_request(body({{"thinking", {{"type", "disabled"}}}}), false);
  EXPECT_EQ(off.chat["chat_template_kwargs"], (ojson{{"enable_thinking", false}}));
  auto on = parse_messages_request(body({{"thinking", {{"type", "enabled"}, {"budget_tokens", 2048}}}}), false);
  EXPECT_EQ(on.chat["chat_template_kwargs"], (ojson{{"enable_thinking", true}}));
}

TEST(AnthropicConvert, ErrorsNameTheField) {
  ojson no_max = body();
  no_max.erase("max_tokens");
  EXPECT_EQ(error_param(no_max), "max_tokens");
  EXPECT_NO_THROW(parse_messages_request(no_max, true));  // count_tokens needs none
  EXPECT_EQ(error_param(body({{"max_tokens", 0}})), "max_tokens");
  EXPECT_EQ(error_param(body({{"max_tokens", "10"}})), "max_tokens");
  EXPECT_EQ(error_param(body({{"frobnicate", 1}})), "frobnicate");
  EXPECT_EQ(error_param(body({{"container", "c"}})), "container");
  EXPECT_NO_THROW(parse_messages_request(body({{"metadata", {{"user_id", "u"}}}, {"service_tier", "auto"}}), false));
  EXPECT_EQ(error_param(body({{"temperature", 3}})), "temperature");
  EXPECT_EQ(error_param(body({{"top_k", -1}})), "top_k");
  EXPECT_EQ(error_param(body({{"stop_sequences", {"a", 1}}})), "stop_sequences.1");
  EXPECT_EQ(error_param(body({{"stream", "yes"}})), "stream");
  EXPECT_EQ(error_param(body({{"messages", {{{"role", "robot"}, {"content", "x"}}}}})), "messages.0.role");
  EXPECT_EQ(error_param(body({{"messages", ojson::array()}})), "messages");
  EXPECT_EQ(error_param(body({{"messages", {{{"role", "user"}, {"content", 3}}}}})), "messages.0.content");
  EXPECT_EQ(error_param(body({{"messages", {{{"role", "user"}, {"content", {{{"type", "image"}, {"source", ojson::object()}}}}}}}})),
            "messages.0.content.0");
  EXPECT_EQ(error_param(body({{"messages", {{{"role", "user"}, {"content", {{{"type", "text"}}}}}}}})),
            "messages.0.content.0.text");
  EXPECT_EQ(error_param(body({{"tools", {{{"type", "bash_20250124"}, {"name", "bash"}}}}})), "tools.0.type");
  EXPECT_EQ(error_param(body({{"system", 42}})), "system");
  EXPECT_EQ(error_param(body({{"output_config", {{"format", ojson::object()}}}})), "output_config.format");
}

TEST(AnthropicConvert, StopReasonAndIds) {
  EXPECT_EQ(stop_reason("length", "", true), "max_tokens");
  EXPECT_EQ(stop_reason("stop", "END", false), "stop_sequence");
  EXPECT_EQ(stop_reason("stop", "", true), "tool_use");
  EXPECT_EQ(stop_reason("stop", "", false), "end_turn");
  const std::string id = make_id("msg_");
  EXPECT_EQ(id.size(), 28u);
  EXPECT_EQ(id.rfind("msg_", 0), 0u);
  EXPECT_NE(id, make_id("msg_"));
}

// The converted body renders in the real Qwen3 template: tool calls, tool responses, reasoning.
TEST(AnthropicConvert, RendersWithQwen3Template) {
  const ChatTemplate tpl = ChatTemplate::load(FT_QWEN3_TOKENIZER_DIR);
  ojson b = body({{"system", "Sys."}, {"tools", {{{"name", "get_weather"}, {"input_schema", {{"type", "object"}}}}}},
                  {"thinking", {{"type", "disabled"}}}});
  b["messages"] = ojson::parse(R"([
    {"role": "user", "content": "Paris?"},
    {"role": "assistant", "content": [
      {"type": "text", "text": "Checking."},
      {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C"}]}])");
  const std::string p = tpl.render(parse_messages_request(b, false).chat);
  EXPECT_EQ(p.rfind("<|im_start|>system\nSys.\n\n# Tools", 0), 0u) << p;
  EXPECT_NE(p.find("<|im_start|>assistant\nChecking.\n<tool_call>\n{\"name\": \"get_weather\", "
                   "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>"), std::string::npos) << p;
  EXPECT_NE(p.find("<|im_start|>user\n<tool_response>\n18C\n</tool_response><|im_end|>"), std::string::npos) << p;
  EXPECT_TRUE(p.ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n")) << p;
}

}  // namespace
}  // namespace ft::server::anthropic
