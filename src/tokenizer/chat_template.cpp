// Chat templates: loading from a model directory and rendering OpenAI chat requests.
#include "tokenizer/chat_template.h"

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "base/error.h"
#include "io/gguf.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/jinja/template.h"

namespace ft {
namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace {

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) fail("cannot read {}", p.string());
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

ojson read_json(const fs::path& p) {
  try {
    return ojson::parse(read_file(p));
  } catch (const nlohmann::json::exception& e) {
    fail("{} is not valid JSON: {}", p.string(), e.what());
  }
}

// A special token in tokenizer_config.json: a string or an AddedToken dict with "content".
std::string token_string(const ojson& cfg, const char* key) {
  if (!cfg.contains(key)) return "";
  const ojson& t = cfg[key];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_object() && t.contains("content") && t["content"].is_string())
    return t["content"].get<std::string>();
  return "";
}

// tokenizer_config.json "chat_template": a string, or [{name, template}] where "default" wins.
std::string template_from_config(const ojson& cfg, const fs::path& where) {
  const ojson& t = cfg["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  if (!t.is_array()) fail("{}: chat_template must be a string or a list", where.string());
  std::string names;
  for (auto& e : t) {
    if (e.value("name", "") == "default" && e.contains("template"))
      return e["template"].get<std::string>();
    names += (names.empty() ? "" : ", ") + e.value("name", "?");
  }
  fail("{}: no chat template named 'default' (found: {})", where.string(), names);
}

}  // namespace

ChatTemplate ChatTemplate::load(const std::string& model_dir) {
  if (is_gguf_path(model_dir)) {  // tokenizer.chat_template (tokenizer/gguf_vocab.cpp)
    std::string source, bos, eos;
    if (!gguf_chat_template(model_dir, &source, &bos, &eos))
      fail("{}: has no tokenizer.chat_template", model_dir);
    return from_string(source, bos, eos);
  }
  fs::path path(model_dir);
  fs::path dir = fs::is_directory(path) ? path : path.parent_path();
  ojson cfg = fs::exists(dir / "tokenizer_config.json") ? read_json(dir / "tokenizer_config.json")
                                                       : ojson::object();
  std::string source;
  if (fs::is_regular_file(path)) {
    source = read_file(path);
  } else if (fs::exists(dir / "chat_template.jinja")) {
    source = read_file(dir / "chat_template.jinja");
  } else if (fs::exists(dir / "chat_template.json")) {
    ojson j = read_json(dir / "chat_template.json");
    source = template_from_config(j, dir / "chat_template.json");
  } else if (cfg.contains("chat_template") && !cfg["chat_template"].is_null()) {
    source = template_from_config(cfg, dir / "tokenizer_config.json");
  } else {
    fail("no chat template in {}: expected chat_template.jinja, chat_template.json or "
         "tokenizer_config.json with a \"chat_template\" entry",
         model_dir);
  }
  return from_string(source, token_string(cfg, "bos_token"), token_string(cfg, "eos_token"));
}

ChatTemplate ChatTemplate::from_string(const std::string& source, std::string bos_token,
                                       std::string eos_token) {
  ChatTemplate t;
  t.source_ = source;
  t.bos_ = std::move(bos_token);
  t.eos_ = std::move(eos_token);
  t.tpl_ = std::make_shared<const jinja::Template>(source);
  t.detect_conventions();
  return t;
}

void ChatTemplate::detect_conventions() {
  const std::string content = R"((\.content|\[\s*['"]content['"]\s*\]))";
  content_parts_ =
      std::regex_search(source_, std::regex(R"(for\s+\w+\s+in\s+\w+)" + content));
  keep_null_content_ =
      std::regex_search(source_, std::regex(content + R"(\s+is\s+(not\s+)?none)"));
  thinking_alias_ = source_.find("reasoning_content") == std::string::npos &&
                    std::regex_search(source_, std::regex(R"((\.thinking\b|\[\s*['"]thinking['"]\s*\]|['"]thinking['"]\s+in\b))"));
  // Probe: one tool call round trip, with object and with string arguments.
  ojson probe = ojson::parse(R"({
    "messages": [
      {"role": "user", "content": "probe"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_0", "type": "function",
        "function": {"name": "probe_fn", "arguments": "{\"probe_arg\": 1}"}}]},
      {"role": "tool", "tool_call_id": "call_0", "content": "ok"}],
    "tools": [{"type": "function", "function": {"name": "probe_fn", "description": "probe",
      "parameters": {"type": "object", "properties": {"probe_arg": {"type": "integer"}}}}}]})");
  auto renders = [&](bool strings) {
    string_arguments_ = strings;
    try {
      render(probe);
      return true;
    } catch (const Error&) {
      return false;
    }
  };
  bool object_ok = renders(false);
  bool string_ok = renders(true);
  string_arguments_ = !object_ok && string_ok;
}

ojson ChatTemplate::normalize_message(const ojson& m) const {
  if (!m.is_object()) fail("each message must be an object");
  ojson out = m;
  if (!m.contains("content") || m["content"].is_null()) {
    if (m.contains("content") || m.value("role", "") == "assistant")
      out["content"] = keep_null_content_ ? ojson(nullptr)
                                          : content_parts_ ? ojson::array() : ojson("");
  } else if (m["content"].is_array() && !content_parts_) {
    std::string text;
    bool first = true;
    for (auto& part : m["content"]) {
      if (part.value("type", "") != "text" || !part.contains("text"))
        fail("message content part of type '{}' is not supported by this chat template",
             part.value("type", "?"));
      text += (first ? "" : "\n") + part["text"].get<std::string>();
      first = false;
    }
    out["content"] = text;
  }
  if (m.contains("tool_calls") && m["tool_calls"].is_array()) {
    for (auto& call : out["tool_calls"]) {
      if (!call.contains("function") || !call["function"].contains("arguments")) continue;
      ojson& args = call["function"]["arguments"];
      if (args.is_string() && !string_arguments_) {
        ojson parsed = ojson::parse(args.get<std::string>(), nullptr, false);
        if (!parsed.is_discarded()) args = parsed;
      } else if (!args.is_string() && string_arguments_) {
        args = args.dump();
      }
    }
  }
  if (thinking_alias_ && m.contains("reasoning_content") && !m.contains("thinking") &&
      !m["reasoning_content"].is_null())
    out["thinking"] = m["reasoning_content"];
  return out;
}

ojson ChatTemplate::context(const ojson& request) const {
  if (!request.is_object() || !request.contains("messages") || !request["messages"].is_array())
    fail("chat request needs a \"messages\" array");
  ojson ctx = ojson::object();
  ojson messages = ojson::array();
  for (auto& m : request["messages"]) messages.push_back(normalize_message(m));
  ctx["messages"] = std::move(messages);
  ctx["tools"] = request.contains("tools") ? request["tools"] : ojson(nullptr);
  ctx["add_generation_prompt"] = request.value("add_generation_prompt", true);
  ctx["bos_token"] = bos_;
  ctx["eos_token"] = eos_;
  if (request.contains("reasoning_effort") && request["reasoning_effort"].is_string())
    ctx["reasoning_effort"] = request["reasoning_effort"];
  if (request.contains("chat_template_kwargs")) {
    const ojson& kw = request["chat_template_kwargs"];
    if (!kw.is_object()) fail("chat_template_kwargs must be an object");
    for (auto& [k, v] : kw.items()) ctx[k] = v;
  }
  return ctx;
}

std::string ChatTemplate::render(const ojson& request) const {
  return tpl_->render(context(request));
}

std::string ChatTemplate::render(const nlohmann::json& request) const {
  return render(ojson::parse(request.dump()));
}

}  // namespace ft
