// Output parsers: reasoning split, Qwen3 JSON and XML tool calls, fed with every split of the
// text (tags spanning deltas), streamed and whole, with malformed blocks falling back to content.
#include <gtest/gtest.h>

#include <map>

#include "server/parsers/parsers.h"
#include "server/parsers/qwen3_xml_tool.h"
#include "server/parsers/reasoning.h"

using namespace ft::server;
using json = nlohmann::json;

namespace {

struct Parsed {
  std::string reasoning, content;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
};

// Feeds `text` cut at `cuts` (sorted offsets) through a reasoning parser and/or a tool parser.
Parsed run(const std::string& text, const std::vector<size_t>& cuts, bool reasoning,
           bool start_in_reasoning, ToolFormat fmt, bool stream, const json& tools = {}) {
  Parsed out;
  ReasoningParser rp(start_in_reasoning);
  auto tp = make_tool_parser(fmt, tools, stream);
  auto take_tools = [&](const ToolParseResult& r) {
    out.content += r.content;
    for (const auto& c : r.calls) {
      if (c.index == static_cast<int>(out.calls.size())) {
        EXPECT_FALSE(c.name.empty()) << "the first delta of a call carries its name";
        out.calls.push_back({c.name, ""});
      } else {
        EXPECT_EQ(c.index, static_cast<int>(out.calls.size()) - 1);
        EXPECT_TRUE(c.name.empty());
      }
      out.calls.back().second += c.arguments;
    }
  };
  auto take = [&](std::string content) {
    if (tp) take_tools(tp->feed(content));
    else out.content += content;
  };
  size_t at = 0;
  std::vector<size_t> ends = cuts;
  ends.push_back(text.size());
  for (size_t e : ends) {
    const std::string piece = text.substr(at, e - at);
    at = e;
    if (reasoning) {
      ReasoningDelta d = rp.feed(piece);
      out.reasoning += d.reasoning;
      take(d.content);
    } else {
      take(piece);
    }
  }
  if (reasoning) {
    ReasoningDelta d = rp.finish();
    out.reasoning += d.reasoning;
    take(d.content);
  }
  if (tp) take_tools(tp->finish());
  return out;
}

// Every single cut, every pair of cuts, and one byte at a time.
std::vector<std::vector<size_t>> all_splits(size_t n) {
  std::vector<std::vector<size_t>> s{{}};
  for (size_t i = 1; i < n; ++i) s.push_back({i});
  for (size_t i = 1; i < n; i += 3)
    for (size_t j = i + 1; j < n; j += 2) s.push_back({i, j});
  std::vector<size_t> bytes;
  for (size_t i = 1; i < n; ++i) bytes.push_back(i);
  s.push_back(bytes);
  return s;
}

void expect_json_eq(const std::string& got, const json& want) {
  ASSERT_TRUE(json::accept(got)) << got;
  EXPECT_EQ(json::parse(got), want) << got;
}

const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                   "flag": {"type": "boolean"}, "opts": {"type": "object"},
                   "ratio": {"type": ["number", "null"]}, "tags": {"type": "array"}}}}},
  {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}])");

}  // namespace

TEST(ReasoningParser, SplitsThinkAtEveryBoundary) {
  const std::string text = "<think>\nLet me think.\n</think>\n\nThe answer is 4.";
  for (const auto& cuts : all_splits(text.size())) {
    Parsed p = run(text, cuts, true, false, ToolFormat::NONE, true);
    ASSERT_EQ(p.reasoning, "Let me think.");
    ASSERT_EQ(p.content, "The answer is 4.");
  }
}

TEST(ReasoningParser, PreOpenedThinkAndUnclosedThink) {
  const std::string text = "step 1\nstep 2\n</think>\n\nDone";
  for (const auto& cuts : all_splits(text.size())) {
    Parsed p = run(text, cuts, true, true, ToolFormat::NONE, true);
    ASSERT_EQ(p.reasoning, "step 1\nstep 2");
    ASSERT_EQ(p.content, "Done");
  }
  Parsed p = run("<think>still thinking ", {5, 12}, true, false, ToolFormat::NONE, true);
  EXPECT_EQ(p.reasoning, "still thinking");
  EXPECT_EQ(p.content, "");
}

TEST(ReasoningParser, ContentWithoutThinkIsUntouched) {
  for (std::string text : {"Hello <think> world", "  plain", "<thi", "</think> x"}) {
    for (const auto& cuts : all_splits(text.size())) {
      Parsed p = run(text, cuts, true, false, ToolFormat::NONE, true);
      ASSERT_EQ(p.content, text);
      ASSERT_EQ(p.reasoning, "");
    }
  }
}

TEST(ReasoningParser, PromptTail) {
  EXPECT_TRUE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n"));
}

TEST(Qwen3ToolParser, ParallelCallsAtEveryBoundary) {
  const std::string text =
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\", \"days\": [1, 2.5e1], \"q\": \"a\\\"}</tool_call>\"}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
  for (bool stream : {true, false})
    for (const auto& cuts : all_splits(text.size())) {
      Parsed p = run(text, cuts, false, false, ToolFormat::QWEN3_JSON, stream);
      ASSERT_EQ(p.content, "Let me check.");
      ASSERT_EQ(p.calls.size(), 2u);
      EXPECT_EQ(p.calls[0].first, "get_weather");
      expect_json_eq(p.calls[0].second,
                     {{"city", "Paris"}, {"days", {1, 25.0}}, {"q", "a\"}</tool_call>"}});
      EXPECT_EQ(p.calls[1].first, "get_time");
      expect_json_eq(p.calls[1].second, json::object());
    }
}

TEST(Qwen3ToolParser, AfterReasoningAndTrailingContent) {
  const std::string text =
      "<think>hmm</think>\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"n\": 1}}\n"
      "</tool_call>\nafter";
  for (const auto& cuts : all_splits(text.size())) {
    Parsed p = run(text, cuts, true, false, ToolFormat::QWEN3_JSON, true);
    ASSERT_EQ(p.reasoning, "hmm");
    ASSERT_EQ(p.content, "after");
    ASSERT_EQ(p.calls.size(), 1u);
    expect_json_eq(p.calls[0].second, {{"n", 1}});
  }
}

TEST(Qwen3ToolParser, MalformedBlocksStayContent) {
  for (std::string text : {"a <tool_call>\nnot json\n</tool_call> b",
                           "<tool_call>\n{\"name\": 5, \"arguments\": {}}\n</tool_call>",
                           "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": }}\n</tool_call>",
                           "x <tool_call>\n{\"name\": \"f\""}) {
    for (const auto& cuts : all_splits(text.size())) {
      Parsed p = run(text, cuts, false, false, ToolFormat::QWEN3_JSON, false);
      ASSERT_TRUE(p.calls.empty()) << text;
      ASSERT_EQ(p.content, text);
    }
  }
  // Streamed: a block that never becomes a call is content too.
  Parsed p = run("<tool_call>\nnope\n</tool_call>", {3, 15}, false, false,
                 ToolFormat::QWEN3_JSON, true);
  EXPECT_TRUE(p.calls.empty());
  EXPECT_EQ(p.content, "<tool_call>\nnope\n</tool_call>");
}

TEST(Qwen3ToolParser, OtherKeyOrderParsedWhole) {
  const std::string text =
      "<tool_call>\n{\"arguments\": {\"x\": 1}, \"name\": \"f\"}\n</tool_call>";
  for (bool stream : {true, false})
    for (const auto& cuts : all_splits(text.size())) {
      Parsed p = run(text, cuts, false, false, ToolFormat::QWEN3_JSON, stream);
      ASSERT_EQ(p.content, "");
      ASSERT_EQ(p.calls.size(), 1u);
      EXPECT_EQ(p.calls[0].first, "f");
      expect_json_eq(p.calls[0].second, {{"x", 1}});
    }
}

TEST(Qwen3ToolParser, PartialTagAtTheEndIsContent) {
  Parsed p = run("abc <tool_", {5}, false, false, ToolFormat::QWEN3_JSON, true);
  EXPECT_EQ(p.content, "abc <tool_");
  EXPECT_TRUE(p.calls.empty());
}

TEST(Qwen3XmlToolParser, TypedParametersAtEveryBoundary) {
  const std::string text =
      "Checking.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n</parameter>\n"
      "<parameter=days>\n3\n</parameter>\n<parameter=flag>\nTrue\n</parameter>\n"
      "<parameter=opts>\n{\"a\": [1]}\n</parameter>\n<parameter=ratio>\nnull\n</parameter>\n"
      "<parameter=tags>\nnot a list\n</parameter>\n<parameter=other>\n42\n</parameter>\n"
      "</function>\n</tool_call>\n<tool_call>\n<function=get_time>\n</function>\n</tool_call>";
  const json want = {{"city", "New York"}, {"days", 3}, {"flag", true}, {"opts", {{"a", {1}}}},
                     {"ratio", nullptr}, {"tags", "not a list"}, {"other", "42"}};
  for (bool stream : {true, false})
    for (const auto& cuts : all_splits(text.size())) {
      Parsed p = run(text, cuts, false, false, ToolFormat::QWEN3_XML, stream, kTools);
      ASSERT_EQ(p.content, "Checking.");
      ASSERT_EQ(p.calls.size(), 2u);
      EXPECT_EQ(p.calls[0].first, "get_weather");
      expect_json_eq(p.calls[0].second, want);
      EXPECT_EQ(p.calls[1].first, "get_time");
      expect_json_eq(p.calls[1].second, json::object());
    }
}

TEST(Qwen3XmlToolParser, MultilineValuesAndMalformed) {
  const std::string text =
      "<tool_call>\n<function=f>\n<parameter=code>\nline 1\n\nline 3\n</parameter>\n</function>\n"
      "</tool_call>";
  Parsed p = run(text, {20, 41}, false, false, ToolFormat::QWEN3_XML, true, kTools);
  ASSERT_EQ(p.calls.size(), 1u);
  expect_json_eq(p.calls[0].second, {{"code", "line 1\n\nline 3"}});
  const std::string bad = "<tool_call>\n{\"name\": \"f\"}\n</tool_call>";
  p = run(bad, {7}, false, false, ToolFormat::QWEN3_XML, false, kTools);
  EXPECT_TRUE(p.calls.empty());
  EXPECT_EQ(p.content, bad);
}

TEST(Qwen3XmlToolParser, TypedValue) {
  const json i = {{"type", "integer"}}, n = {{"type", "number"}}, b = {{"type", "boolean"}};
  EXPECT_EQ(Qwen3XmlToolParser::typed_value(&i, "12"), 12);
  EXPECT_EQ(Qwen3XmlToolParser::typed_value(&i, "1.5"), "1.5");
  EXPECT_EQ(Qwen3XmlToolParser::typed_value(&n, "1.5"), 1.5);
  EXPECT_EQ(Qwen3XmlToolParser::typed_value(&b, "false"), false);
  EXPECT_EQ(Qwen3XmlToolParser::typed_value(&b, "maybe"), "maybe");
  EXPECT_EQ(Qwen3XmlToolParser::typed_value(nullptr, "12"), "12");
}
