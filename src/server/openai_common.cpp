// Shared OpenAI request mapping and chat output assembly (see openai_common.h).
#include "server/openai_common.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <random>

#include "server/constraints.h"

namespace ft::server::openai {

// ---- field checking --------------------------------------------------------------------------

void bad_param(const std::string& param, const std::string& msg) {
  throw HttpError(400, "invalid_request_error", msg, param);
}

void check_known_fields(const json& body, std::initializer_list<std::string_view> known) {
  for (const auto& [key, _] : body.items())
    if (std::find(known.begin(), known.end(), key) == known.end())
      bad_param(key, fmt::format("unknown or unsupported field '{}'", key));
}

bool has(const json& b, const char* name) {
  auto it = b.find(name);
  return it != b.end() && !it->is_null();
}

std::optional<double> get_number(const json& b, const char* name, double lo, double hi) {
  if (!has(b, name)) return std::nullopt;
  const json& v = b[name];
  if (!v.is_number()) bad_param(name, fmt::format("'{}' must be a number", name));
  const double x = v.get<double>();
  if (!(x >= lo && x <= hi))
    bad_param(name, fmt::format("'{}' must be between {} and {} (got {})", name, lo, hi, x));
  return x;
}

std::optional<int64_t> get_int(const json& b, const char* name, int64_t lo, int64_t hi) {
  if (!has(b, name)) return std::nullopt;
  const json& v = b[name];
  const bool integral = v.is_number_integer() ||
                        (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>() &&
                         std::abs(v.get<double>()) < 9e18);
  if (!integral) bad_param(name, fmt::format("'{}' must be an integer", name));
  const int64_t x = v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)
                        ? INT64_MAX
                        : (v.is_number_float() ? static_cast<int64_t>(v.get<double>())
                                               : v.get<int64_t>());
  if (x < lo || x > hi)
    bad_param(name, fmt::format("'{}' must be between {} and {} (got {})", name, lo, hi, x));
  return x;
}

std::optional<bool> get_bool(const json& b, const char* name) {
  if (!has(b, name)) return std::nullopt;
  if (!b[name].is_boolean()) bad_param(name, fmt::format("'{}' must be a boolean", name));
  return b[name].get<bool>();
}

std::optional<std::string> get_string(const json& b, const char* name) {
  if (!has(b, name)) return std::nullopt;
  if (!b[name].is_string()) bad_param(name, fmt::format("'{}' must be a string", name));
  return b[name].get<std::string>();
}

void apply_sampling(const json& b, Request& r) {
  r.sampling.temperature = static_cast<float>(get_number(b, "temperature", 0, 2).value_or(1.0));
  r.sampling.top_p = static_cast<float>(get_number(b, "top_p", 0, 1).value_or(1.0));
  if (r.sampling.top_p <= 0) bad_param("top_p", "'top_p' must be greater than 0");
  r.sampling.top_k = std::max<int64_t>(0, get_int(b, "top_k", -1, INT32_MAX).value_or(0));
  r.sampling.min_p = static_cast<float>(get_number(b, "min_p", 0, 1).value_or(0));
  r.presence_penalty = static_cast<float>(get_number(b, "presence_penalty", -2, 2).value_or(0));
  r.frequency_penalty = static_cast<float>(get_number(b, "frequency_penalty", -2, 2).value_or(0));
  r.repetition_penalty =
      static_cast<float>(get_number(b, "repetition_penalty", 1e-3, 100).value_or(1));
  if (auto s = get_int(b, "seed", INT64_MIN, INT64_MAX)) {
    r.sampling.seed = static_cast<uint64_t>(*s);
  } else {
    r.sampling.seed = std::random_device{}() * 0x9E3779B97F4A7C15ull ^ std::random_device{}();
  }
  r.ignore_eos = get_bool(b, "ignore_eos").value_or(false);
  if (has(b, "stop")) {
    const json& s = b["stop"];
    auto add = [&](const json& v) {
      if (!v.is_string()) bad_param("stop", "'stop' must be a string or a list of strings");
      if (!v.get_ref<const std::string&>().empty()) r.stop.push_back(v.get<std::string>());
    };
    if (s.is_array()) {
      for (const auto& v : s) add(v);
    } else {
      add(s);
    }
  }
}

int64_t resolve_max_tokens(const ServerContext& ctx, const json& b,
                           std::initializer_list<const char*> names, int64_t prompt_len,
                           std::optional<int64_t> fallback) {
  const int64_t room = ctx.engine.options().ctx_size - prompt_len;
  for (const char* name : names) {
    auto v = get_int(b, name, 1, INT64_MAX);
    if (!v) continue;
    if (*v > room)
      bad_param(name, fmt::format("'{}' is {}, but this model's context is {} tokens and the "
                                  "prompt uses {}: at most {} can be generated",
                                  name, *v, ctx.engine.options().ctx_size, prompt_len,
                                  std::max<int64_t>(room, 0)));
    return *v;
  }
  if (room < 1)
    throw HttpError(400, "invalid_request_error",
                    fmt::format("the prompt ({} tokens) fills this model's context ({} tokens)",
                                prompt_len, ctx.engine.options().ctx_size));
  return fallback ? std::min(*fallback, room) : room;
}

bool include_usage(const json& b, bool stream) {
  if (!has(b, "stream_options")) return false;
  if (!stream) bad_param("stream_options", "'stream_options' is only allowed with stream: true");
  const json& o = b["stream_options"];
  if (!o.is_object()) bad_param("stream_options", "'stream_options' must be an object");
  check_known_fields(o, {"include_usage", "include_obfuscation"});
  return get_bool(o, "include_usage").value_or(false);
}

std::string random_id(std::string_view prefix) {
  static constexpr char kAlnum[] =
      "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id(prefix);
  for (int i = 0; i < 24; ++i) id += kAlnum[rng() % (sizeof(kAlnum) - 1)];
  return id;
}

int64_t now_s() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch()).count();
}

json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

const char* finish_name(FinishReason r, bool tool_calls) {
  if (r == FinishReason::LENGTH) return "length";
  return tool_calls ? "tool_calls" : "stop";
}

void check_done(const Event& done) {
  if (done.finish == FinishReason::ERROR)
    throw HttpError(500, "server_error", "generation failed: " + done.error);
}

json chat_logprob(const Tokenizer& tok, const TokenLogprobs& lp) {
  const TokenTable& table = token_table(tok);
  auto entry = [&](int32_t id, float logprob) {
    const std::string text = id >= 0 && size_t(id) < table.bytes.size() ? table.bytes[id] : "";
    json bytes = json::array();
    for (unsigned char c : text) bytes.push_back(c);
    return json{{"token", text},
                {"logprob", std::isfinite(logprob) ? logprob : -9999.0f},
                {"bytes", bytes}};
  };
  json e = entry(lp.id, lp.logprob);
  json top = json::array();
  for (auto [id, l] : lp.top) top.push_back(entry(id, l));
  e["top_logprobs"] = top;
  return e;
}

// ---- tools -----------------------------------------------------------------------------------

ojson parse_tools(const ojson& tools, bool flat, const char* param) {
  if (!tools.is_array()) bad_param(param, fmt::format("'{}' must be a list", param));
  ojson out = ojson::array();
  for (const auto& t : tools) {
    if (!t.is_object() || t.value("type", "") != "function")
      bad_param(param, "only tools of type 'function' are supported");
    const ojson& f = flat ? t : t.contains("function") ? t["function"] : ojson();
    if (!f.is_object() || !f.contains("name") || !f["name"].is_string() ||
        f["name"].get_ref<const std::string&>().empty())
      bad_param(param, flat ? "each tool needs a 'name'" : "each tool needs 'function.name'");
    if (f.contains("parameters") && !f["parameters"].is_null() && !f["parameters"].is_object())
      bad_param(param, "a tool's 'parameters' must be a JSON schema object");
    if (f.contains("description") && !f["description"].is_null() && !f["description"].is_string())
      bad_param(param, "a tool's 'description' must be a string");
    ojson fn = ojson::object();
    for (const auto& [k, v] : f.items())
      if (k != "type" && !v.is_null()) fn[k] = v;
    out.push_back({{"type", "function"}, {"function", fn}});
  }
  return out;
}

ToolChoice parse_tool_choice(const json& v, const ojson& tools, const char* param) {
  ToolChoice c;
  if (v.is_null()) {
    c.mode = tools.empty() ? ToolChoice::Mode::NONE : ToolChoice::Mode::AUTO;
    return c;
  }
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s == "auto") c.mode = ToolChoice::Mode::AUTO;
    else if (s == "none") c.mode = ToolChoice::Mode::NONE;
    else if (s == "required") c.mode = ToolChoice::Mode::REQUIRED;
    else bad_param(param, fmt::format("'{}' must be \"auto\", \"none\", \"required\" or a "
                                      "named function", param));
  } else if (v.is_object() && v.value("type", "") == "function") {
    const json& f = v.contains("function") ? v["function"] : v;
    if (!f.is_object() || !f.contains("name") || !f["name"].is_string())
      bad_param(param, fmt::format("'{}' names no function", param));
    c.mode = ToolChoice::Mode::NAMED;
    c.name = f["name"].get<std::string>();
    bool found = false;
    for (const auto& t : tools) found = found || t["function"]["name"] == c.name;
    if (!found)
      bad_param(param, fmt::format("tool_choice names '{}', which is not in tools", c.name));
  } else {
    bad_param(param, fmt::format("'{}' must be \"auto\", \"none\", \"required\" or "
                                 "{{\"type\": \"function\", ...}}", param));
  }
  if (tools.empty() && (c.mode == ToolChoice::Mode::REQUIRED))
    bad_param(param, "tool_choice \"required\" needs tools");
  if (tools.empty()) c.mode = ToolChoice::Mode::NONE;
  return c;
}

// ---- messages --------------------------------------------------------------------------------

namespace {
void check_content(const ojson& c, const std::string& where, bool nullable) {
  if (c.is_string() || (nullable && c.is_null())) return;
  if (!c.is_array())
    bad_param(where, fmt::format("'{}' must be a string or a list of content parts", where));
  for (const auto& p : c) {
    if (!p.is_object() || !p.contains("type") || !p["type"].is_string())
      bad_param(where, "each content part needs a 'type'");
    const std::string type = p["type"].get<std::string>();
    if (type != "text")
      bad_param(where, fmt::format("content parts of type '{}' are not supported (text only)",
                                   type));
    if (!p.contains("text") || !p["text"].is_string())
      bad_param(where, "a text content part needs 'text' (a string)");
  }
}
}  // namespace

ojson check_messages(const ojson& messages) {
  if (!messages.is_array() || messages.empty())
    bad_param("messages", "'messages' must be a non-empty list");
  ojson out = ojson::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    ojson m = messages[i];
    const std::string where = fmt::format("messages[{}]", i);
    if (!m.is_object()) bad_param(where, "each message must be an object");
    if (!m.contains("role") || !m["role"].is_string())
      bad_param(where + ".role", "each message needs a 'role'");
    const std::string role = m["role"].get<std::string>();
    if (role == "developer") m["role"] = "system";
    if (role != "system" && role != "developer" && role != "user" && role != "assistant" &&
        role != "tool")
      bad_param(where + ".role",
                fmt::format("unknown role '{}' (use system, developer, user, assistant or tool)",
                            role));
    const bool assistant = role == "assistant";
    if (!m.contains("content") && !assistant)
      bad_param(where + ".content", "the message needs 'content'");
    if (m.contains("content")) check_content(m["content"], where + ".content", assistant);
    if (m.contains("tool_calls") && !m["tool_calls"].is_null()) {
      if (!assistant) bad_param(where + ".tool_calls", "only assistant messages have tool_calls");
      if (!m["tool_calls"].is_array()) bad_param(where + ".tool_calls", "'tool_calls' must be a list");
      for (const auto& tc : m["tool_calls"]) {
        const ojson* f = tc.is_object() && tc.contains("function") ? &tc["function"] : nullptr;
        if (!f || !f->is_object() || !f->contains("name") || !(*f)["name"].is_string())
          bad_param(where + ".tool_calls", "each tool call needs 'function.name'");
        if (f->contains("arguments") && !(*f)["arguments"].is_string() &&
            !(*f)["arguments"].is_object())
          bad_param(where + ".tool_calls", "'function.arguments' must be a JSON string");
        if (f->contains("arguments") && (*f)["arguments"].is_string() &&
            !json::accept((*f)["arguments"].get<std::string>()))
          bad_param(where + ".tool_calls", "'function.arguments' is not valid JSON");
      }
    }
    if (m.contains("reasoning_content") && !m["reasoning_content"].is_null() &&
        !m["reasoning_content"].is_string())
      bad_param(where + ".reasoning_content", "'reasoning_content' must be a string");
    if (role == "tool" && m.contains("tool_call_id") && !m["tool_call_id"].is_string())
      bad_param(where + ".tool_call_id", "'tool_call_id' must be a string");
    out.push_back(std::move(m));
  }
  return out;
}

// ---- chat generation -------------------------------------------------------------------------

ChatJob prepare_chat(const ServerContext& ctx, ojson chat, const ToolChoice& choice) {
  if (!ctx.chat_template)
    throw HttpError(400, "invalid_request_error",
                    "this model has no chat template; use /v1/completions", "messages");
  ChatJob job;
  job.choice = choice;
  job.parsers = select_parsers(ctx);
  const bool forced =
      choice.mode == ToolChoice::Mode::REQUIRED || choice.mode == ToolChoice::Mode::NAMED;
  if (forced && job.parsers.tools == ToolFormat::NONE)
    bad_param("tool_choice", "this model has no known tool-call format; use tool_choice \"auto\"");
  if (choice.mode == ToolChoice::Mode::NONE) chat.erase("tools");
  if (chat.contains("tools")) job.tools = chat["tools"];
  const std::string prompt = ctx.chat_template->render(chat);
  job.reasoning_open = job.parsers.reasoning && prompt_opens_reasoning(prompt);
  job.req = std::make_shared<Request>();
  job.req->prompt = ctx.engine.tokenizer().encode(prompt, false);
  if (job.parsers.tools == ToolFormat::HARMONY) {
    // The parser reads the channel markup, so special tokens stay in the text; a message ends
    // the turn with <|return|> (final) or <|call|> (a tool call) whatever the eos config says.
    job.req->skip_special = false;
    for (const char* t : {"<|return|>", "<|call|>"})
      if (const int32_t id = ctx.engine.tokenizer().token_id(t); id >= 0)
        job.req->stop_ids.push_back(id);
  }
  return job;
}

void constrain_tools(const ServerContext& ctx, ChatJob& job) {
  const auto mode = job.choice.mode;
  if (mode != ToolChoice::Mode::REQUIRED && mode != ToolChoice::Mode::NAMED) return;
  ToolCallSpec spec;
  spec.format = job.parsers.tools;
  spec.tools = json::parse(job.tools.dump());
  spec.close_reasoning = job.reasoning_open;
  if (mode == ToolChoice::Mode::NAMED) {
    spec.names.push_back(job.choice.name);
  } else {
    for (const auto& t : job.tools) spec.names.push_back(t["function"]["name"].get<std::string>());
  }
  std::vector<int32_t> eos = ctx.engine.eos_ids();
  if (const int32_t call = ctx.engine.tokenizer().token_id("<|call|>");
      spec.format == ToolFormat::HARMONY && call >= 0)
    eos = {call};  // a Harmony call ends with <|call|>
  job.req->processor =
      make_tool_call_constraint(ctx.engine.tokenizer(), spec, std::move(eos), job.req->max_tokens);
}

ChatOutput::ChatOutput(const ChatJob& job, bool stream) {
  if (job.parsers.reasoning) reasoning_ = std::make_unique<ReasoningParser>(job.reasoning_open);
  if (job.choice.mode != ToolChoice::Mode::NONE && !job.tools.empty())
    tools_ = make_tool_parser(job.parsers.tools, json::parse(job.tools.dump()), stream);
  else if (job.parsers.tools == ToolFormat::HARMONY)  // reasoning and content, no calls
    tools_ = make_tool_parser(ToolFormat::HARMONY, json::array(), stream);
}

ChatDelta ChatOutput::feed(std::string_view text) {
  ChatDelta d;
  std::string content(text);
  if (reasoning_) {
    ReasoningDelta r = reasoning_->feed(text);
    d.reasoning = std::move(r.reasoning);
    content = std::move(r.content);
  }
  if (!tools_) {
    d.content = std::move(content);
    return d;
  }
  ToolParseResult t = tools_->feed(content);
  d.reasoning += t.reasoning;
  d.content = std::move(t.content);
  d.calls = std::move(t.calls);
  return d;
}

ChatDelta ChatOutput::finish() {
  ChatDelta d;
  std::string content;
  if (reasoning_) {
    ReasoningDelta r = reasoning_->finish();
    d.reasoning = std::move(r.reasoning);
    content = std::move(r.content);
  }
  if (!tools_) {
    d.content = std::move(content);
    return d;
  }
  ToolParseResult a = tools_->feed(content), b = tools_->finish();
  d.reasoning += a.reasoning + b.reasoning;
  d.content = a.content + b.content;
  d.calls = std::move(a.calls);
  for (auto& c : b.calls) d.calls.push_back(std::move(c));
  return d;
}

}  // namespace ft::server::openai

namespace ft::server {
void register_openai_routes(httplib::Server& http, ServerContext& ctx) {
  openai::register_chat_route(http, ctx);
  openai::register_completions_route(http, ctx);
  openai::register_responses_route(http, ctx);
}
}  // namespace ft::server
