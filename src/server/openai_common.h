// Shared by the OpenAI routes (chat.completions, completions, responses): field checking,
// sampling/stop/limit fields -> engine Request, tools and tool_choice, the chat generation
// pipeline (template -> prompt -> parsers/constraint) and its output assembly, ids and usage.
#pragma once
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "server/parsers/parsers.h"
#include "server/parsers/reasoning.h"
#include "server/server.h"

namespace ft::server::openai {

using ojson = nlohmann::ordered_json;
using json = nlohmann::json;

// ---- field checking (each throws HttpError 400 naming the field) ---------------------------

[[noreturn]] void bad_param(const std::string& param, const std::string& msg);
// Every key of body must be in `known`; null values count as absent everywhere.
void check_known_fields(const json& body, std::initializer_list<std::string_view> known);
bool has(const json& b, const char* name);  // present and not null
std::optional<double> get_number(const json& b, const char* name, double lo, double hi);
std::optional<int64_t> get_int(const json& b, const char* name, int64_t lo, int64_t hi);
std::optional<bool> get_bool(const json& b, const char* name);
std::optional<std::string> get_string(const json& b, const char* name);

// The sampling fields every route shares (temperature, top_p, top_k, min_p, presence_penalty,
// frequency_penalty, repetition_penalty, seed, stop, ignore_eos) applied to r.
void apply_sampling(const json& b, Request& r);
#define FT_OPENAI_SAMPLING_FIELDS                                                            \
  "temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty",          \
      "repetition_penalty", "seed", "stop", "ignore_eos"

// New-token limit from the first present field in `names`, else what the context leaves.
// 400 naming the field when prompt + limit exceeds the context.
int64_t resolve_max_tokens(const ServerContext& ctx, const json& b,
                           std::initializer_list<const char*> names, int64_t prompt_len,
                           std::optional<int64_t> fallback = {});

// stream_options.include_usage (stream_options only with stream: true).
bool include_usage(const json& b, bool stream);

std::string random_id(std::string_view prefix);  // prefix + 24 random alphanumerics
int64_t now_s();

json usage_json(const Usage& u);  // {prompt_tokens, completion_tokens, total_tokens, details}
const char* finish_name(FinishReason r, bool tool_calls);  // "stop" | "length" | "tool_calls"
// Throws HttpError 500 for an engine error (non-streaming responses).
void check_done(const Event& done);

// Logprobs of one token in the chat format ({token, logprob, bytes, top_logprobs}).
json chat_logprob(const Tokenizer& tok, const TokenLogprobs& lp);

// ---- tools --------------------------------------------------------------------------------

struct ToolChoice {
  enum class Mode { AUTO, NONE, REQUIRED, NAMED };
  Mode mode = Mode::AUTO;
  std::string name;  // NAMED
};
// Validates `tools` (chat form [{type: function, function: {name, description, parameters}}],
// or with flat=true the Responses form [{type: function, name, parameters}]) and returns them
// in chat form. `param` names the field in errors.
ojson parse_tools(const ojson& tools, bool flat, const char* param);
// Validates tool_choice against the chat-form tools ("auto" | "none" | "required" | a named
// function: {type: function, function: {name}}, or flat {type: function, name}).
ToolChoice parse_tool_choice(const json& v, const ojson& tools, const char* param);

// ---- chat generation ----------------------------------------------------------------------

// A chat request ready to submit: the rendered prompt's ids, the model's parsers and whether
// its output starts inside <think>.
struct ChatJob {
  std::shared_ptr<Request> req;
  ParserChoice parsers;
  bool reasoning_open = false;
  ToolChoice choice;
  ojson tools;  // chat form; empty when none
};

// Renders `chat` ({messages, tools?, chat_template_kwargs?, reasoning_effort?}, messages
// already validated; tools in chat form) with the model's template and tokenizes it. With
// tool_choice none the tools are not rendered (the model is not told about them) and calls
// are never parsed.
ChatJob prepare_chat(const ServerContext& ctx, ojson chat, const ToolChoice& choice);
// After max_tokens is set: installs the tool-call constraint for required / named tool_choice.
void constrain_tools(const ServerContext& ctx, ChatJob& job);

// Validates OpenAI chat messages (roles, content types, tool_calls) and returns them as the
// template expects (developer -> system).
ojson check_messages(const ojson& messages);

// The pieces one piece of output text became.
struct ChatDelta {
  std::string reasoning, content;
  std::vector<ToolCallDelta> calls;
  bool empty() const { return reasoning.empty() && content.empty() && calls.empty(); }
};

// Output assembly: text -> reasoning parser -> tool parser (when tools are parsed).
class ChatOutput {
 public:
  ChatOutput(const ChatJob& job, bool stream);
  ChatDelta feed(std::string_view text);
  ChatDelta finish();
  int tool_calls() const { return tools_ ? tools_->calls() : 0; }

 private:
  std::unique_ptr<ReasoningParser> reasoning_;
  std::unique_ptr<ToolCallParser> tools_;
};

// Route registration, one per file (register_openai_routes in openai_common.cpp calls them).
void register_chat_route(httplib::Server& http, ServerContext& ctx);         // openai_chat.cpp
void register_completions_route(httplib::Server& http, ServerContext& ctx);  // openai_completions.cpp
void register_responses_route(httplib::Server& http, ServerContext& ctx);    // openai_responses.cpp

}  // namespace ft::server::openai
