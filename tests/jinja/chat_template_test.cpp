// ChatTemplate tests: loading conventions and the request -> template-variables mapping.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "base/error.h"
#include "tokenizer/chat_template.h"

using ft::ChatTemplate;
using ojson = nlohmann::ordered_json;

namespace {

std::string node_modules() { return std::string(FT_SOURCE_DIR) + "/tests/js/node_modules"; }
std::string lenml(const std::string& m) {
  return node_modules() + "/@lenml/tokenizer-" + m + "/models";
}

ojson request(const char* json) { return ojson::parse(json); }

TEST(ChatTemplate, LoadsTokenizerConfigAndSpecialTokens) {
  if (!std::filesystem::exists(lenml("deepseek_v3"))) GTEST_SKIP() << "npm packages not installed";
  auto t = ChatTemplate::load(lenml("deepseek_v3"));
  EXPECT_EQ(t.bos_token(), "<｜begin▁of▁sentence｜>");  // AddedToken dict with "content"
  EXPECT_EQ(t.render(request(R"({"messages": [{"role": "user", "content": "hi"}]})")),
            "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜>");
}

TEST(ChatTemplate, LoadsChatTemplateJinja) {
  // A model dir whose template lives in chat_template.jinja (as gpt-oss ships it).
  auto dir = std::filesystem::temp_directory_path() / "ft_chat_template_jinja_test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer_config.json") << R"({"eos_token": "<|return|>"})";
  std::ofstream(dir / "chat_template.jinja")
      << "{%- for m in messages %}<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>"
         "{%- endfor %}{%- if add_generation_prompt %}<|start|>assistant{%- endif %}";
  auto t = ChatTemplate::load(dir.string());
  EXPECT_EQ(t.eos_token(), "<|return|>");
  std::string p = t.render(request(R"({"messages": [{"role": "user", "content": "hi"}]})"));
  EXPECT_EQ(p, "<|start|>user<|message|>hi<|end|><|start|>assistant");
  std::filesystem::remove_all(dir);
}

TEST(ChatTemplate, NamedTemplateListPicksDefault) {
  auto dir = std::filesystem::temp_directory_path() / "ft_chat_template_test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer_config.json") << R"({"bos_token": "<s>", "chat_template": [
      {"name": "tool_use", "template": "TOOLS"},
      {"name": "default", "template": "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}"}]})";
  auto t = ChatTemplate::load(dir.string());
  EXPECT_EQ(t.render(request(R"({"messages": [{"role": "user", "content": "x"}]})")), "<s>x");
  std::filesystem::remove_all(dir);
  EXPECT_THROW(ChatTemplate::load(dir.string()), ft::Error);
}

TEST(ChatTemplate, DefaultsAndKwargs) {
  auto t = ChatTemplate::from_string(
      "{{ add_generation_prompt }}|{{ tools }}|{{ enable_thinking }}|{{ reasoning_effort }}");
  EXPECT_EQ(t.render(request(R"({"messages": []})")), "True|None||");
  EXPECT_EQ(t.render(request(R"({"messages": [], "add_generation_prompt": false,
      "reasoning_effort": "low", "chat_template_kwargs": {"enable_thinking": false}})")),
            "False|None|False|low");
}

TEST(ChatTemplate, ContentPartsJoinedUnlessTemplateIteratesContent) {
  auto req = request(R"({"messages": [{"role": "user", "content": [
      {"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]})");
  auto flat = ChatTemplate::from_string("{% for m in messages %}{{ m.content }}{% endfor %}");
  EXPECT_EQ(flat.render(req), "a\nb");
  auto parts = ChatTemplate::from_string(
      "{% for m in messages %}{% for p in m['content'] %}[{{ p.text }}]{% endfor %}{% endfor %}");
  EXPECT_EQ(parts.render(req), "[a][b]");
}

TEST(ChatTemplate, ToolCallArgumentsBecomeObjects) {
  auto req = request(R"({"messages": [{"role": "assistant", "content": null, "tool_calls": [
      {"id": "1", "type": "function", "function": {"name": "f", "arguments": "{\"b\": 1, \"a\": [2]}"}}]}]})");
  auto obj = ChatTemplate::from_string(
      "{% for m in messages %}{{ m.content|tojson }}{{ m.tool_calls[0].function.arguments|tojson }}"
      "{% endfor %}");
  EXPECT_EQ(obj.render(req), R"(""{"b": 1, "a": [2]})");
  // A template that concatenates arguments as a string keeps them as the request's string.
  auto str = ChatTemplate::from_string(
      "{% for m in messages %}{% if m.content is none %}{{ 'args=' + m.tool_calls[0].function.arguments }}"
      "{% endif %}{% endfor %}");
  EXPECT_EQ(str.render(req), R"(args={"b": 1, "a": [2]})");
}

TEST(ChatTemplate, ReasoningAliasedToThinkingForTemplatesThatReadIt) {
  auto req = request(R"({"messages": [{"role": "assistant", "content": "x", "reasoning_content": "r"}]})");
  auto t = ChatTemplate::from_string("{% for m in messages %}{{ m.thinking }}{% endfor %}");
  EXPECT_EQ(t.render(req), "r");
  auto q = ChatTemplate::from_string(
      "{% for m in messages %}{{ m.thinking }}|{{ m.reasoning_content }}{% endfor %}");
  EXPECT_EQ(q.render(req), "|r");
}

TEST(ChatTemplate, KeyOrderOfToolSchemasIsKept) {
  auto t = ChatTemplate::from_string("{% for t in tools %}{{ t|tojson }}{% endfor %}");
  auto req = request(R"({"messages": [], "tools": [{"z": 1, "a": 2}]})");
  EXPECT_EQ(t.render(req), R"({"z": 1, "a": 2})");
}

}  // namespace
