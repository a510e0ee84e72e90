// Anthropic Messages request -> OpenAI-style chat body: system blocks merged into one leading
// system message, tool_use -> tool_calls, tool_result -> role "tool", thinking ->
// reasoning_content, tools -> function tools. Every field is validated with its path in errors.
#include "server/anthropic_convert.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>

#include "server/server.h"

namespace ft::server::anthropic {

using ojson = nlohmann::ordered_json;

namespace {

[[noreturn]] void bad(const std::string& field, const std::string& msg) {
  throw HttpError(400, "invalid_request_error", fmt::format("{}: {}", field, msg), field);
}

const char* type_name(const ojson& v) {
  switch (v.type()) {
    case ojson::value_t::null: return "null";
    case ojson::value_t::boolean: return "a boolean";
    case ojson::value_t::string: return "a string";
    case ojson::value_t::array: return "an array";
    case ojson::value_t::object: return "an object";
    default: return "a number";
  }
}

const std::string& get_string(const ojson& v, const std::string& field) {
  if (!v.is_string()) bad(field, fmt::format("expected a string, got {}", type_name(v)));
  return v.get_ref<const std::string&>();
}

const ojson& get_object(const ojson& v, const std::string& field) {
  if (!v.is_object()) bad(field, fmt::format("expected an object, got {}", type_name(v)));
  return v;
}

const ojson& get_array(const ojson& v, const std::string& field) {
  if (!v.is_array()) bad(field, fmt::format("expected an array, got {}", type_name(v)));
  return v;
}

double get_number(const ojson& v, const std::string& field, double lo, double hi) {
  if (!v.is_number()) bad(field, fmt::format("expected a number, got {}", type_name(v)));
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi)
    bad(field, fmt::format("must be between {} and {}", lo, hi));
  return x;
}

int64_t get_int(const ojson& v, const std::string& field, int64_t lo) {
  if (!v.is_number_integer()) bad(field, fmt::format("expected an integer, got {}", type_name(v)));
  const int64_t x = v.is_number_unsigned()
                        ? static_cast<int64_t>(std::min<uint64_t>(
                              v.get<uint64_t>(), std::numeric_limits<int64_t>::max()))
                        : v.get<int64_t>();
  if (x < lo) bad(field, fmt::format("must be at least {}", lo));
  return x;
}

// Keys of an object block other than `allowed` are rejected: a typo should not pass silently.
void check_keys(const ojson& obj, const std::string& field,
                std::initializer_list<std::string_view> allowed) {
  for (const auto& [k, v] : obj.items())
    if (std::find(allowed.begin(), allowed.end(), k) == allowed.end())
      bad(field + "." + k, "unexpected field");
}

// {"type": "text", "text": "..."} -> the text (cache_control and citations are ignored).
const std::string& text_of_block(const ojson& b, const std::string& field) {
  check_keys(b, field, {"type", "text", "cache_control", "citations"});
  if (!b.contains("text")) bad(field + ".text", "field required");
  return get_string(b["text"], field + ".text");
}

[[noreturn]] void unsupported_block(const std::string& type, const std::string& field) {
  if (type == "image" || type == "document")
    bad(field, fmt::format("{} blocks are not supported: this server is text-only", type));
  bad(field + ".type", fmt::format("unsupported content block type '{}'", type));
}

// The block's "type", required.
const std::string& block_type(const ojson& b, const std::string& field) {
  get_object(b, field);
  if (!b.contains("type")) bad(field + ".type", "field required");
  return get_string(b["type"], field + ".type");
}

// System prompt: a string or text blocks; volatile blocks dropped. Returns the merged text.
std::string system_text(const ojson& sys, int& dropped) {
  if (sys.is_string()) {
    std::string s = sys.get<std::string>();
    if (is_volatile_system_text(s)) {  // a string system prompt led by the header line
      const size_t nl = s.find('\n');
      s = nl == std::string::npos ? "" : s.substr(nl + 1);
      ++dropped;
    }
    return s;
  }
  if (!sys.is_array()) bad("system", fmt::format("expected a string or text blocks, got {}", type_name(sys)));
  std::string out;
  for (size_t i = 0; i < sys.size(); ++i) {
    const std::string field = fmt::format("system.{}", i);
    const std::string& type = block_type(sys[i], field);
    if (type != "text") bad(field + ".type", "system blocks must be text blocks");
    const std::string& t = text_of_block(sys[i], field);
    if (is_volatile_system_text(t)) {
      ++dropped;
      continue;
    }
    if (!out.empty()) out += "\n\n";
    out += t;
  }
  return out;
}

// tool_result content: a string or text blocks.
std::string tool_result_text(const ojson& b, const std::string& field) {
  check_keys(b, field, {"type", "tool_use_id", "content", "is_error", "cache_control"});
  std::string text;
  if (b.contains("content") && !b["content"].is_null()) {
    const ojson& c = b["content"];
    if (c.is_string()) {
      text = c.get<std::string>();
    } else if (c.is_array()) {
      for (size_t i = 0; i < c.size(); ++i) {
        const std::string f = fmt::format("{}.content.{}", field, i);
        const std::string& type = block_type(c[i], f);
        if (type != "text") unsupported_block(type, f);
        if (!text.empty()) text += "\n";
        text += text_of_block(c[i], f);
      }
    } else {
      bad(field + ".content", fmt::format("expected a string or blocks, got {}", type_name(c)));
    }
  }
  if (b.contains("is_error") && !b["is_error"].is_null()) {
    if (!b["is_error"].is_boolean()) bad(field + ".is_error", "expected a boolean");
    if (b["is_error"].get<bool>()) text = "Error: " + text;
  }
  return text;
}

// Text parts as OpenAI content: one string, or a list of text parts ChatTemplate joins.
ojson content_of(const std::vector<std::string>& parts) {
  if (parts.size() == 1) return parts[0];
  ojson out = ojson::array();
  for (const auto& p : parts) out.push_back({{"type", "text"}, {"text", p}});
  return out;
}

struct Converter {
  ojson messages = ojson::array();
  std::string system;
  int dropped = 0;
  std::map<std::string, std::string> tool_names_by_id;  // tool_use id -> name, for tool results

  void user(const ojson& content, const std::string& field) {
    if (content.is_string()) {
      messages.push_back({{"role", "user"}, {"content", content}});
      return;
    }
    std::vector<std::string> texts;
    auto flush = [&] {
      if (texts.empty()) return;
      messages.push_back({{"role", "user"}, {"content", content_of(texts)}});
      texts.clear();
    };
    for (size_t i = 0; i < content.size(); ++i) {
      const std::string f = fmt::format("{}.{}", field, i);
      const std::string& type = block_type(content[i], f);
      if (type == "text") {
        texts.push_back(text_of_block(content[i], f));
      } else if (type == "tool_result") {
        const ojson& b = content[i];
        if (!b.contains("tool_use_id")) bad(f + ".tool_use_id", "field required");
        const std::string& id = get_string(b["tool_use_id"], f + ".tool_use_id");
        flush();  // keep the order of text and results
        ojson m = {{"role", "tool"}, {"tool_call_id", id}, {"content", tool_result_text(b, f)}};
        if (auto it = tool_names_by_id.find(id); it != tool_names_by_id.end()) m["name"] = it->second;
        messages.push_back(std::move(m));
      } else {
        unsupported_block(type, f);
      }
    }
    flush();
  }

  void assistant(const ojson& content, const std::string& field) {
    if (content.is_string()) {
      messages.push_back({{"role", "assistant"}, {"content", content}});
      return;
    }
    std::vector<std::string> texts;
    std::string reasoning;
    ojson calls = ojson::array();
    for (size_t i = 0; i < content.size(); ++i) {
      const std::string f = fmt::format("{}.{}", field, i);
      const ojson& b = content[i];
      const std::string& type = block_type(b, f);
      if (type == "text") {
        texts.push_back(text_of_block(b, f));
      } else if (type == "thinking") {
        check_keys(b, f, {"type", "thinking", "signature", "cache_control"});
        if (!b.contains("thinking")) bad(f + ".thinking", "field required");
        if (!reasoning.empty()) reasoning += "\n";
        reasoning += get_string(b["thinking"], f + ".thinking");
      } else if (type == "redacted_thinking") {
        continue;  // opaque provider data: nothing to replay
      } else if (type == "tool_use") {
        check_keys(b, f, {"type", "id", "name", "input", "cache_control"});
        for (const char* k : {"id", "name", "input"})
          if (!b.contains(k)) bad(f + "." + k, "field required");
        const std::string& id = get_string(b["id"], f + ".id");
        const std::string& name = get_string(b["name"], f + ".name");
        get_object(b["input"], f + ".input");
        tool_names_by_id[id] = name;
        calls.push_back({{"id", id}, {"type", "function"},
                         {"function", {{"name", name}, {"arguments", b["input"].dump()}}}});
      } else {
        unsupported_block(type, f);
      }
    }
    std::string text;
    for (const auto& t : texts) text += t;  // an assistant turn is one continuous text
    ojson m = {{"role", "assistant"}};
    m["content"] = text.empty() && !calls.empty() ? ojson(nullptr) : ojson(text);
    if (!reasoning.empty()) m["reasoning_content"] = reasoning;
    if (!calls.empty()) m["tool_calls"] = std::move(calls);
    messages.push_back(std::move(m));
  }

  void message(const ojson& m, const std::string& field) {
    get_object(m, field);
    check_keys(m, field, {"role", "content"});
    if (!m.contains("role")) bad(field + ".role", "field required");
    if (!m.contains("content")) bad(field + ".content", "field required");
    const std::string& role = get_string(m["role"], field + ".role");
    const ojson& content = m["content"];
    if (!content.is_string() && !content.is_array())
      bad(field + ".content", fmt::format("expected a string or blocks, got {}", type_name(content)));
    const std::string cf = field + ".content";
    if (role == "user") {
      user(content, cf);
    } else if (role == "assistant") {
      assistant(content, cf);
    } else if (role == "system") {
      // Claude Code sends system-role messages; strict templates allow one leading system
      // message, so they are merged into it.
      int d = 0;
      const std::string t = system_text(content, d);
      dropped += d;
      if (!t.empty()) system += (system.empty() ? "" : "\n\n") + t;
    } else {
      bad(field + ".role", fmt::format("unknown role '{}'; use \"user\" or \"assistant\"", role));
    }
  }
};

ojson convert_tools(const ojson& tools, std::vector<std::string>& names) {
  ojson out = ojson::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string f = fmt::format("tools.{}", i);
    const ojson& t = get_object(tools[i], f);
    if (t.contains("type") && !t["type"].is_null() && get_string(t["type"], f + ".type") != "custom")
      bad(f + ".type", fmt::format("server tool '{}' is not supported; declare client tools with "
                                   "name, description and input_schema",
                                   t["type"].get<std::string>()));
    check_keys(t, f, {"type", "name", "description", "input_schema", "cache_control", "strict"});
    if (!t.contains("name")) bad(f + ".name", "field required");
    const std::string& name = get_string(t["name"], f + ".name");
    if (name.empty()) bad(f + ".name", "must not be empty");
    if (std::find(names.begin(), names.end(), name) != names.end())
      bad(f + ".name", fmt::format("duplicate tool name '{}'", name));
    names.push_back(name);
    ojson fn = {{"name", name}};
    if (t.contains("description") && !t["description"].is_null())
      fn["description"] = get_string(t["description"], f + ".description");
    if (!t.contains("input_schema")) bad(f + ".input_schema", "field required");
    fn["parameters"] = get_object(t["input_schema"], f + ".input_schema");
    out.push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  return out;
}

ToolChoice parse_tool_choice(const ojson& tc, const std::vector<std::string>& names) {
  get_object(tc, "tool_choice");
  check_keys(tc, "tool_choice", {"type", "name", "disable_parallel_tool_use"});
  if (!tc.contains("type")) bad("tool_choice.type", "field required");
  const std::string& type = get_string(tc["type"], "tool_choice.type");
  ToolChoice c;
  if (type == "auto") c.kind = ToolChoice::Kind::AUTO;
  else if (type == "any") c.kind = ToolChoice::Kind::ANY;
  else if (type == "tool") c.kind = ToolChoice::Kind::TOOL;
  else if (type == "none") c.kind = ToolChoice::Kind::NONE;
  else bad("tool_choice.type", fmt::format("unknown '{}'; use auto, any, tool or none", type));
  if (tc.contains("disable_parallel_tool_use")) {
    if (!tc["disable_parallel_tool_use"].is_boolean())
      bad("tool_choice.disable_parallel_tool_use", "expected a boolean");
    c.disable_parallel = tc["disable_parallel_tool_use"].get<bool>();
  }
  if (c.kind == ToolChoice::Kind::TOOL) {
    if (!tc.contains("name")) bad("tool_choice.name", "field required for type \"tool\"");
    c.name = get_string(tc["name"], "tool_choice.name");
    if (std::find(names.begin(), names.end(), c.name) == names.end())
      bad("tool_choice.name", fmt::format("no tool named '{}' in tools", c.name));
  } else if (tc.contains("name")) {
    bad("tool_choice.name", "only allowed with type \"tool\"");
  }
  if ((c.kind == ToolChoice::Kind::ANY || c.kind == ToolChoice::Kind::TOOL) && names.empty())
    bad("tool_choice", fmt::format("type \"{}\" needs tools", type));
  return c;
}

std::optional<bool> parse_thinking(const ojson& t) {
  get_object(t, "thinking");
  if (!t.contains("type")) bad("thinking.type", "field required");
  const std::string& type = get_string(t["type"], "thinking.type");
  if (type == "enabled") {
    check_keys(t, "thinking", {"type", "budget_tokens", "display"});
    if (t.contains("budget_tokens")) get_int(t["budget_tokens"], "thinking.budget_tokens", 0);
    return true;  // the budget is not enforced: the model ends its reasoning itself
  }
  if (type == "disabled") {
    check_keys(t, "thinking", {"type"});
    return false;
  }
  if (type == "adaptive") {
    check_keys(t, "thinking", {"type", "display"});
    return std::nullopt;  // the template's default
  }
  bad("thinking.type", fmt::format("unknown '{}'; use enabled, disabled or adaptive", type));
}

constexpr std::string_view k_fields[] = {
    "model", "messages", "max_tokens", "system", "stop_sequences", "stream", "temperature",
    "top_p", "top_k", "tools", "tool_choice", "thinking", "output_config"};

}  // namespace

bool is_volatile_system_text(std::string_view text) {
  return text.starts_with("x-anthropic-billing-header");
}

std::string make_id(std::string_view prefix) {
  static constexpr char k_chars[] =
      "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id(prefix);
  for (int i = 0; i < 24; ++i) id += k_chars[rng() % 62];
  return id;
}

std::string stop_reason(std::string_view finish, const std::string& matched_stop, bool tool_use) {
  if (finish == "length") return "max_tokens";
  if (!matched_stop.empty()) return "stop_sequence";
  return tool_use ? "tool_use" : "end_turn";
}

MessagesRequest parse_messages_request(const ojson& body, bool count_tokens) {
  for (const auto& [k, v] : body.items()) {
    const bool known = std::find(std::begin(k_fields), std::end(k_fields), k) != std::end(k_fields);
    const bool ignored = std::find(std::begin(k_ignored_fields), std::end(k_ignored_fields), k) !=
                         std::end(k_ignored_fields);
    if (!known && !ignored) bad(k, "unknown field");
  }
  MessagesRequest r;
  if (!body.contains("model")) bad("model", "field required");
  r.model = get_string(body["model"], "model");
  if (!count_tokens) {
    if (!body.contains("max_tokens")) bad("max_tokens", "field required");
    r.max_tokens = get_int(body["max_tokens"], "max_tokens", 1);
  } else if (body.contains("max_tokens")) {
    get_int(body["max_tokens"], "max_tokens", 1);
  }
  if (body.contains("stream") && !body["stream"].is_null()) {
    if (!body["stream"].is_boolean()) bad("stream", "expected a boolean");
    r.stream = body["stream"].get<bool>();
    if (r.stream && count_tokens) bad("stream", "count_tokens does not stream");
  }
  auto opt = [&](const char* k) { return body.contains(k) && !body[k].is_null(); };
  if (opt("temperature")) r.temperature = static_cast<float>(get_number(body["temperature"], "temperature", 0, 2));
  if (opt("top_p")) r.top_p = static_cast<float>(get_number(body["top_p"], "top_p", 0, 1));
  if (opt("top_k")) r.top_k = get_int(body["top_k"], "top_k", 0);
  if (opt("stop_sequences")) {
    const ojson& s = get_array(body["stop_sequences"], "stop_sequences");
    for (size_t i = 0; i < s.size(); ++i) {
      const std::string& t = get_string(s[i], fmt::format("stop_sequences.{}", i));
      if (t.empty()) bad(fmt::format("stop_sequences.{}", i), "must not be empty");
      r.stop_sequences.push_back(t);
    }
  }
  if (opt("thinking")) r.thinking = parse_thinking(body["thinking"]);

  Converter conv;
  if (opt("system")) conv.system = system_text(body["system"], conv.dropped);
  if (!body.contains("messages")) bad("messages", "field required");
  const ojson& msgs = get_array(body["messages"], "messages");
  if (msgs.empty()) bad("messages", "at least one message is required");
  for (size_t i = 0; i < msgs.size(); ++i) conv.message(msgs[i], fmt::format("messages.{}", i));
  r.dropped_system_blocks = conv.dropped;

  ojson tools;
  if (opt("tools")) tools = convert_tools(get_array(body["tools"], "tools"), r.tool_names);
  if (opt("tool_choice")) r.tool_choice = parse_tool_choice(body["tool_choice"], r.tool_names);

  ojson& chat = r.chat;
  chat = ojson::object();
  ojson messages = ojson::array();
  if (!conv.system.empty()) messages.push_back({{"role", "system"}, {"content", conv.system}});
  for (auto& m : conv.messages) messages.push_back(std::move(m));
  chat["messages"] = std::move(messages);
  if (!tools.is_null() && !tools.empty() && r.tool_choice.kind != ToolChoice::Kind::NONE)
    chat["tools"] = std::move(tools);
  if (r.thinking) chat["chat_template_kwargs"] = {{"enable_thinking", *r.thinking}};
  if (opt("output_config")) {
    const ojson& oc = get_object(body["output_config"], "output_config");
    check_keys(oc, "output_config", {"effort"});  // "format" (JSON schema output): unsupported
    if (oc.contains("effort") && !oc["effort"].is_null())
      chat["reasoning_effort"] = get_string(oc["effort"], "output_config.effort");
  }
  return r;
}

}  // namespace ft::server::anthropic
