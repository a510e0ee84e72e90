// Output parsers: reasoning split, Qwen3 JSON and XML tool calls, Harmony (gpt-oss) channels,
// fed with every split of the text (tags spanning deltas), streamed and whole, with malformed
// blocks falling back to content.
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
    out.reasoning += r.reasoning;
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

// ---- Harmony (gpt-oss) ----------------------------------------------------------------------

namespace {
Parsed harmony(const std::string& text, const std::vector<size_t>& cuts, bool stream,
               const json& tools = kTools) {
  return run(text, cuts, false, false, ToolFormat::HARMONY, stream, tools);
}
bool has_markup(const Parsed& p) {
  auto bad = [](const std::string& s) { return s.find("<|") != std::string::npos; };
  bool b = bad(p.content) || bad(p.reasoning);
  for (const auto& c : p.calls) b = b || bad(c.first) || bad(c.second);
  return b;
}
}  // namespace

TEST(HarmonyParser, AnalysisThenFinalAtEveryBoundary) {
  // As generated after `<|start|>assistant`; <|return|> is a stop token, so the text ends
  // without it (and with it, when a caller keeps it).
  const std::string base =
      "<|channel|>analysis<|message|>User says hi. Reply <b>briefly</b>.<|end|>"
      "<|start|>assistant<|channel|>final<|message|>Hello! How can I help?";
  for (const std::string& text : {base, base + "<|return|>"})
    for (bool stream : {true, false})
      for (const json& tools : {kTools, json::array()})
        for (const auto& cuts : all_splits(text.size())) {
          Parsed p = harmony(text, cuts, stream, tools);
          ASSERT_EQ(p.reasoning, "User says hi. Reply <b>briefly</b>.");
          ASSERT_EQ(p.content, "Hello! How can I help?");
          ASSERT_TRUE(p.calls.empty());
        }
}

TEST(HarmonyParser, ToolCallsAtEveryBoundary) {
  // Recipient after the channel with <|constrain|>, then before the channel with a bare content
  // type; a commentary preamble (no recipient) is content; the last call ends the output.
  const std::string text =
      "<|channel|>analysis<|message|>Need weather and time.<|end|>"
      "<|start|>assistant<|channel|>commentary<|message|>Checking both.<|end|>"
      "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
      "<|message|>{\"city\": \"Paris\", \"q\": \"a\\\"} <|x\", \"days\": [1, 2.5e1]}<|call|>"
      "<|start|>assistant to=functions.get_time<|channel|>commentary json<|message|>{}";
  for (bool stream : {true, false})
    for (const auto& cuts : all_splits(text.size())) {
      Parsed p = harmony(text, cuts, stream);
      ASSERT_EQ(p.reasoning, "Need weather and time.");
      ASSERT_EQ(p.content, "Checking both.");
      ASSERT_EQ(p.calls.size(), 2u);
      EXPECT_EQ(p.calls[0].first, "get_weather");
      expect_json_eq(p.calls[0].second,
                     {{"city", "Paris"}, {"q", "a\"} <|x"}, {"days", {1, 25.0}}});
      EXPECT_EQ(p.calls[1].first, "get_time");
      expect_json_eq(p.calls[1].second, json::object());
    }
}

TEST(HarmonyParser, RecipientFirstRightAfterThePrompt) {
  // The generation prompt ends `<|start|>assistant`, so the output may open with the recipient.
  const std::string text =
      " to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>"
      "{\"city\":\"Oslo\"}";
  for (bool stream : {true, false})
    for (const auto& cuts : all_splits(text.size())) {
      Parsed p = harmony(text, cuts, stream);
      ASSERT_EQ(p.content, "");
      ASSERT_EQ(p.calls.size(), 1u);
      EXPECT_EQ(p.calls[0].first, "get_weather");
      expect_json_eq(p.calls[0].second, {{"city", "Oslo"}});
    }
}

TEST(HarmonyParser, SeveralMessagesOfAKindAreSeparated) {
  const std::string text =
      "<|channel|>analysis<|message|>one<|end|><|start|>assistant to=browser.search"
      "<|channel|>analysis<|message|>{\"query\": \"x\"}<|call|><|start|>assistant<|channel|>"
      "analysis<|message|>two<|end|><|start|>assistant<|channel|>final<|message|>A<|end|>"
      "<|start|>assistant<|channel|>final<|message|>B";
  for (bool stream : {true, false})
    for (const auto& cuts : all_splits(text.size())) {
      Parsed p = harmony(text, cuts, stream);
      // A built-in tool's call (browser) is the model's own business: reasoning.
      ASSERT_EQ(p.reasoning, "one\n\n{\"query\": \"x\"}\n\ntwo");
      ASSERT_EQ(p.content, "A\n\nB");
      ASSERT_TRUE(p.calls.empty());
    }
}

TEST(HarmonyParser, MalformedOutputIsContentWithoutMarkup) {
  // No Harmony at all: content verbatim (also text that merely starts like a tag).
  for (std::string text : {"Hello world", "<b>bold</b> and to be", "t", "<|"})
    for (bool stream : {true, false})
      for (const auto& cuts : all_splits(text.size())) {
        Parsed p = harmony(text, cuts, stream);
        ASSERT_EQ(p.content, text);
        ASSERT_EQ(p.reasoning, "");
        ASSERT_TRUE(p.calls.empty());
      }
  // Arguments that are not a JSON object: the whole call falls back to content.
  for (std::string args : {"not json", "[1, 2]", "{\"a\": }", ""}) {
    const std::string text = std::string("<|channel|>commentary to=functions.get_time ") +
                             "<|constrain|>json<|message|>" + args + "<|call|>";
    for (const auto& cuts : all_splits(text.size())) {
      Parsed p = harmony(text, cuts, false);
      ASSERT_TRUE(p.calls.empty()) << args;
      ASSERT_EQ(p.content, args);
    }
  }
  // Streamed: arguments stop at the first bad byte and are closed to valid JSON.
  const std::string text =
      "<|channel|>commentary to=functions.f<|message|>{\"a\": [1, tru}<|call|>";
  for (const auto& cuts : all_splits(text.size())) {
    Parsed p = harmony(text, cuts, true);
    ASSERT_EQ(p.calls.size(), 1u);
    ASSERT_TRUE(json::accept(p.calls[0].second)) << p.calls[0].second;
    ASSERT_EQ(p.content, "");
  }
  // A header cut off by the end of the output is dropped; a header that never reaches
  // <|message|> within 256 bytes is content, without its special tokens.
  Parsed cut = harmony("<|channel|>analysis<|message|>x<|end|><|start|>assistant<|chan", {9}, true);
  EXPECT_EQ(cut.reasoning, "x");
  EXPECT_EQ(cut.content, "");
  EXPECT_EQ(harmony("<|channel|>final", {3}, true).content, "");
  const std::string rambling = "<|channel|>" + std::string(300, 'z') + "<|end|>";
  Parsed p = harmony(rambling, {11, 200}, true);
  EXPECT_EQ(p.content, std::string(300, 'z'));
  // Tools not offered (tool_choice none): a call's text is content.
  p = harmony("<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\":1}<|call|>",
              {20, 60}, true, json::array());
  EXPECT_TRUE(p.calls.empty());
  EXPECT_EQ(p.content, "{\"a\":1}");
}

TEST(HarmonyParser, HeaderTokensInsideABodyAreDropped) {
  // <|message|> / <|constrain|> where a body is expected (a glitch, or a header too long to be
  // one) never reach the output, and the result does not depend on where the stream splits.
  const std::string glitch =
      "<|channel|>final<|message|>a<|message|>b<|constrain|>c<|end|> <|constrain|>json<|message|>d";
  const std::string rambling =
      "to=commentary" + std::string(300, 'z') + "<|message|>x<|channel|> analysis";
  for (bool stream : {true, false}) {
    for (const auto& cuts : all_splits(glitch.size())) {
      Parsed p = harmony(glitch, cuts, stream);
      ASSERT_FALSE(has_markup(p));
      ASSERT_EQ(p.content, "abc\n\n jsond");
      ASSERT_EQ(p.reasoning, "");
    }
    // The 300-byte "header" is content; the cut-off header after it is dropped.
    for (size_t cut = 1; cut < rambling.size(); ++cut) {
      Parsed p = harmony(rambling, {cut}, stream);
      ASSERT_FALSE(has_markup(p)) << cut;
      ASSERT_EQ(p.content, "to=commentary" + std::string(300, 'z') + "x") << cut;
    }
  }
}

TEST(HarmonyParser, NoMarkupLeaks) {
  const std::string text =
      "<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>commentary "
      "to=functions.get_time <|constrain|>json<|message|>{}<|call|><|start|>assistant"
      "<|channel|>final<|message|>b<|return|>";
  for (bool stream : {true, false})
    for (const auto& cuts : all_splits(text.size())) {
      Parsed p = harmony(text, cuts, stream);
      ASSERT_FALSE(has_markup(p));
      ASSERT_EQ(p.reasoning + "|" + p.content, "a|b");
      ASSERT_EQ(p.calls.size(), 1u);
    }
}
