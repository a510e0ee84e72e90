// Output parsers shared by the API dialects: streaming state machines over text deltas that
// split a model's output into reasoning, content and tool calls, chosen per model.
#pragma once
#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ft::server {

struct ServerContext;

// One piece of a tool call. The first delta of a call carries its name; arguments (JSON text)
// arrive in order and concatenate to the call's arguments object. Calls are numbered from 0 in
// the order they appear. Ids are the adapter's business ("call_…", "toolu_…").
struct ToolCallDelta {
  int index = 0;
  std::string name;       // non-empty only on the call's first delta
  std::string arguments;  // JSON text to append
};

struct ToolParseResult {
  std::string content;  // plain text (outside tool calls)
  std::string reasoning;  // formats that carry reasoning themselves (Harmony's analysis)
  std::vector<ToolCallDelta> calls;
};

// Splits content text into plain text and tool calls. feed() may be called with any split of
// the text (a tag may span deltas: a possible tag prefix is held back); finish() flushes.
// A block that is not a well-formed call is passed through as content (see each format).
class ToolCallParser {
 public:
  virtual ~ToolCallParser() = default;
  virtual ToolParseResult feed(std::string_view delta) = 0;
  virtual ToolParseResult finish() = 0;
  int calls() const { return next_index_; }  // tool calls emitted so far

 protected:
  int next_index_ = 0;
};

enum class ToolFormat {
  NONE,        // the model has no tool-call syntax we know
  QWEN3_JSON,  // <tool_call>\n{"name": …, "arguments": …}\n</tool_call>   (Qwen3, Hermes)
  QWEN3_XML,   // <tool_call>\n<function=NAME>\n<parameter=P>\nv\n</parameter>\n</function>\n</tool_call>
  HARMONY,     // gpt-oss: <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{…}
               // (the parser also splits reasoning and content: see harmony.h)
};

struct ParserChoice {
  bool reasoning = false;  // <think>…</think> is split into reasoning
  ToolFormat tools = ToolFormat::NONE;
};

// The model's formats: Harmony (gpt-oss) when the vocabulary has <|start|>, <|channel|>,
// <|message|> and <|end|> (its parser then does reasoning and content too). Otherwise reasoning when the vocabulary has <think> and </think>; tool calls when
// it has <tool_call> and there is a chat template, in the XML form when the template mentions
// "<function=" (Qwen3.5/3.6, Qwen3-Coder), else the JSON form.
ParserChoice select_parsers(const ServerContext& ctx);

// True when a rendered prompt leaves a <think> open (templates that pre-open it in the
// generation prompt): the output then starts inside reasoning.
bool prompt_opens_reasoning(std::string_view prompt);

// `tools` is the OpenAI chat `tools` list ([{type: function, function: {name, parameters}}]);
// the XML parser types parameter values from it. stream_arguments: hand out argument text as it
// arrives (streaming responses); otherwise each call is released whole when it closes, and a
// call whose arguments turn out malformed falls back to content entirely.
// HARMONY parses calls only when `tools` is a non-empty list (else their text is content).
std::unique_ptr<ToolCallParser> make_tool_parser(ToolFormat format, const nlohmann::json& tools,
                                                 bool stream_arguments);

// Length of the longest suffix of `text` that is a proper prefix of `tag` (text to hold back
// while a tag may be starting).
size_t partial_tag_len(std::string_view text, std::string_view tag);

}  // namespace ft::server
