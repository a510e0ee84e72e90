// tool_choice constraints: the JSON prefix validator, the tool-call grammar, and forced tool
// calls through the real engine on the tiny random model (random weights must still produce
// a call that parses).
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "model/model.h"
#include "server/constraints.h"
#include "server/parsers/json_prefix.h"
#include "server/parsers/parsers.h"
#include "tokenizer/chat_template.h"

using namespace ft;
using namespace ft::server;
using json = nlohmann::json;

namespace {
const std::vector<std::string> kValid = {
    R"({})", R"([])", R"({"a": 1, "b": [true, false, null], "c": {"d": "e\"\\\/\b\f\n\r\t"}})",
    R"([-0, 0.5, -1.25e+10, 3E-2, 12345678901234567890])", R"("\u00e9\uD83D\uDE00 é 😀")",
    R"(  { "k" :  [ 1 , [ ] , { } ] }  )", R"(0)", R"(-12.5e3)", R"(true)", R"("")"};
const std::vector<std::string> kInvalid = {
    R"({a: 1})", R"([1,])", R"({"a" 1})", R"(01)", R"(-)", R"(1.)", R"(1e)", R"(tru e)",
    R"("\x")", R"("\u12G4")", "\"\x01\"", "\"\xC3\x28\"", "\"\xC0\x80\"", "\"\xED\xA0\x80\"",
    R"({"a": 1}})", R"([}])", R"(nul)"};

bool accepts_all(const std::string& s, JsonPrefix j = JsonPrefix()) { return j.feed(s); }
}  // namespace

TEST(JsonPrefix, AcceptsEveryPrefixOfValidJson) {
  for (const auto& doc : kValid) {
    JsonPrefix j;
    for (size_t i = 0; i < doc.size(); ++i) {
      ASSERT_TRUE(j.feed(static_cast<unsigned char>(doc[i]))) << doc << " at " << i;
      // Every prefix completes to valid JSON.
      const std::string done = doc.substr(0, i + 1) + j.completion();
      ASSERT_TRUE(json::accept(done)) << doc.substr(0, i + 1) << " + " << j.completion();
    }
    EXPECT_TRUE(j.complete()) << doc;
    EXPECT_EQ(j.completion(), "");
  }
  EXPECT_TRUE(json::accept(JsonPrefix().completion()));
}

TEST(JsonPrefix, RejectsInvalidJson) {
  for (const auto& doc : kInvalid) {
    JsonPrefix j;
    bool ok = j.feed(doc);
    EXPECT_FALSE(ok && j.complete()) << doc;
    EXPECT_FALSE(json::accept(doc)) << "fixture " << doc << " should be invalid";
  }
}

TEST(JsonPrefix, ObjectOnlyDepthAndStateKeptOnReject) {
  EXPECT_FALSE(accepts_all("[1]", JsonPrefix(true)));
  EXPECT_TRUE(accepts_all(" {\"a\": []}", JsonPrefix(true)));
  EXPECT_FALSE(accepts_all(std::string(40, '['), JsonPrefix(false, 32)));
  JsonPrefix j;
  ASSERT_TRUE(j.feed("{\"a\""));
  EXPECT_FALSE(j.feed('}'));   // refused ...
  EXPECT_TRUE(j.feed(": 1}"));  // ... without changing the state
  EXPECT_TRUE(j.ended());
}

TEST(ToolCallGrammar, JsonFormCompletesFromEveryPrefix) {
  ToolCallSpec spec;
  spec.names = {"get_weather", "get_time"};
  const std::string call =
      "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"UTC\", \"n\": [1, 2]}}\n"
      "</tool_call>";
  ToolCallGrammar g(spec);
  for (size_t i = 0; i < call.size(); ++i) {
    ASSERT_FALSE(g.at_end());
    ASSERT_TRUE(g.feed(static_cast<unsigned char>(call[i]))) << call.substr(0, i + 1);
    ToolCallGrammar c = g;
    ASSERT_TRUE(c.feed(c.completion())) << call.substr(0, i + 1);
    ASSERT_TRUE(c.at_end());
    auto p = make_tool_parser(ToolFormat::QWEN3_JSON, {}, false);
    ToolParseResult r = p->feed(call.substr(0, i + 1) + g.completion()), f = p->finish();
    r.calls.insert(r.calls.end(), f.calls.begin(), f.calls.end());
    ASSERT_EQ(r.calls.size(), 1u) << call.substr(0, i + 1) + g.completion();
    ASSERT_TRUE(json::accept(r.calls[0].arguments));
  }
  EXPECT_TRUE(g.at_end());
  ToolCallGrammar bad(spec);
  EXPECT_FALSE(bad.feed("<tool_call>\n{\"name\": \"other"));
  ToolCallGrammar ws(spec);
  EXPECT_FALSE(ws.feed("<tool_call>\n{\"name\": \"get_time\", \"arguments\":  "));
}

TEST(ToolCallGrammar, XmlFormUsesSchemaParameters) {
  ToolCallSpec spec;
  spec.format = ToolFormat::QWEN3_XML;
  spec.names = {"f"};
  spec.tools = json::parse(R"([{"type": "function", "function": {"name": "f", "parameters":
      {"type": "object", "properties": {"city": {"type": "string"}, "n": {"type": "integer"}}}}}])");
  const std::string call =
      "<tool_call>\n<function=f>\n<parameter=n>\n3\n</parameter>\n<parameter=city>\nParis\n"
      "</parameter>\n</function>\n</tool_call>";
  ToolCallGrammar g(spec);
  for (size_t i = 0; i < call.size(); ++i) {
    ASSERT_TRUE(g.feed(static_cast<unsigned char>(call[i]))) << call.substr(0, i + 1);
    ToolCallGrammar c = g;
    ASSERT_TRUE(c.feed(c.completion()) && c.at_end()) << call.substr(0, i + 1);
  }
  EXPECT_TRUE(g.at_end());
  ToolCallGrammar bad(spec);
  EXPECT_FALSE(bad.feed("<tool_call>\n<function=f>\n<parameter=zzz"));
}

// ---- through the engine -----------------------------------------------------------------------

namespace {
struct TinyEngine {
  std::unique_ptr<Engine> engine;
  std::unique_ptr<ChatTemplate> chat;
  TinyEngine() {
    chat = std::make_unique<ChatTemplate>(ChatTemplate::load(FT_TEST_MODEL));
    engine = std::make_unique<Engine>(Model::load(FT_TEST_MODEL),
                                      std::make_unique<Tokenizer>(Tokenizer::load(FT_TEST_MODEL)),
                                      EngineOptions{.max_running = 4, .ctx_size = 1024, .threads = 2});
  }
};

const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}},
  {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object",
    "properties": {"tz": {"type": "string"}}}}}])");

// Runs one forced request; returns the parsed calls and the finish reason.
std::pair<std::vector<ToolCallDelta>, FinishReason> forced_call(TinyEngine& t, ToolFormat fmt,
                                                                 std::vector<std::string> names,
                                                                 uint64_t seed, int64_t max_tokens) {
  json body = {{"messages", {{{"role", "user"}, {"content", "What is the weather in Paris?"}}}},
               {"tools", kTools}};
  auto req = std::make_shared<Request>();
  req->prompt = t.engine->tokenizer().encode(t.chat->render(body), false);
  req->max_tokens = max_tokens;
  req->sampling.temperature = 1.0f;
  req->sampling.seed = seed;
  ToolCallSpec spec{.format = fmt, .names = std::move(names), .tools = kTools};
  req->processor = make_tool_call_constraint(t.engine->tokenizer(), spec, t.engine->eos_ids(),
                                             max_tokens);
  t.engine->submit(req);
  std::string text;
  Event e;
  for (;;) {
    EXPECT_TRUE(req->events.pop(e, 120000));
    if (e.kind == Event::Kind::DONE) break;
    text += e.text;
  }
  auto p = make_tool_parser(fmt, kTools, false);
  ToolParseResult r = p->feed(text), f = p->finish();
  EXPECT_EQ(r.content + f.content, "") << text;
  r.calls.insert(r.calls.end(), f.calls.begin(), f.calls.end());
  return {r.calls, e.finish};
}
}  // namespace

TEST(ToolCallConstraint, ForcesParseableCallsFromRandomWeights) {
  TinyEngine t;
  for (uint64_t seed : {1, 2, 3}) {
    auto [calls, finish] = forced_call(t, ToolFormat::QWEN3_JSON, {"get_weather", "get_time"},
                                       seed, 48);
    ASSERT_EQ(calls.size(), 1u) << "seed " << seed;
    EXPECT_TRUE(calls[0].name == "get_weather" || calls[0].name == "get_time");
    EXPECT_TRUE(json::accept(calls[0].arguments)) << calls[0].arguments;
    EXPECT_TRUE(json::parse(calls[0].arguments).is_object());
    EXPECT_EQ(finish, FinishReason::STOP) << "the call ends with EOS inside the budget";
  }
  auto [named, finish] = forced_call(t, ToolFormat::QWEN3_JSON, {"get_time"}, 7, 24);
  ASSERT_EQ(named.size(), 1u);
  EXPECT_EQ(named[0].name, "get_time");
  EXPECT_TRUE(json::accept(named[0].arguments));
  auto [xml, xfinish] = forced_call(t, ToolFormat::QWEN3_XML, {"get_weather"}, 5, 40);
  ASSERT_EQ(xml.size(), 1u);
  EXPECT_EQ(xml[0].name, "get_weather");
  EXPECT_TRUE(json::accept(xml[0].arguments)) << xml[0].arguments;
}

TEST(ToolCallGrammar, HarmonyFormCompletesFromEveryPrefix) {
  ToolCallSpec spec;
  spec.format = ToolFormat::HARMONY;
  spec.names = {"get_weather", "get_time"};
  const std::string call =
      "<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>{\"tz\": \"UTC\"}";
  ToolCallGrammar g(spec);
  EXPECT_EQ(g.forced(), "<|channel|>commentary to=functions.get_");
  for (size_t i = 0; i < call.size(); ++i) {
    ASSERT_FALSE(g.at_end());
    ASSERT_TRUE(g.feed(static_cast<unsigned char>(call[i]))) << call.substr(0, i + 1);
    ToolCallGrammar c = g;
    ASSERT_TRUE(c.feed(c.completion()) && c.at_end()) << call.substr(0, i + 1);
    // What the constraint could end on parses as one call (the <|call|> stop token is not text).
    auto p = make_tool_parser(ToolFormat::HARMONY, kTools, i % 2 == 0);
    ToolParseResult r = p->feed(call.substr(0, i + 1) + g.completion()), f = p->finish();
    r.calls.insert(r.calls.end(), f.calls.begin(), f.calls.end());
    ASSERT_EQ(r.content + f.content, "");
    ASSERT_FALSE(r.calls.empty());
    EXPECT_EQ(r.calls[0].name, "get_time");  // completions take the first (sorted) name
  }
  EXPECT_TRUE(g.at_end());
  EXPECT_FALSE(g.in_literal());
  ToolCallGrammar bad(spec);
  EXPECT_FALSE(bad.feed("<|channel|>analysis"));
}
