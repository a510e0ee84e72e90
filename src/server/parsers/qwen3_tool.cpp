// Qwen3 JSON-in-tags tool calls (see qwen3_tool.h).
#include "server/parsers/qwen3_tool.h"

namespace ft::server {

namespace {
enum class Match { NEED_MORE, FAIL, OK };

// Matches `{"name": "NAME", "arguments": ` (any JSON whitespace) at the start of s.
Match match_header(std::string_view s, size_t* len, std::string* name) {
  size_t i = 0;
  auto ws = [&] {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\t' || s[i] == '\r')) ++i;
  };
  auto lit = [&](std::string_view l) {
    const size_t n = std::min(l.size(), s.size() - i);
    if (s.substr(i, n) != l.substr(0, n)) return Match::FAIL;
    if (n < l.size()) return Match::NEED_MORE;
    i += n;
    return Match::OK;
  };
  Match m;
  ws();
  if ((m = lit("{")) != Match::OK) return m;
  ws();
  if ((m = lit("\"name\"")) != Match::OK) return m;
  ws();
  if ((m = lit(":")) != Match::OK) return m;
  ws();
  if ((m = lit("\"")) != Match::OK) return m;
  const size_t q = i - 1;
  for (bool esc = false; i < s.size() && (esc || s[i] != '"'); ++i) {
    if (s[i] == '\n') return Match::FAIL;
    esc = !esc && s[i] == '\\';
  }
  if (i == s.size()) return Match::NEED_MORE;
  ++i;
  const auto parsed = nlohmann::json::parse(s.substr(q, i - q), nullptr, false);
  if (!parsed.is_string() || parsed.get_ref<const std::string&>().empty()) return Match::FAIL;
  *name = parsed.get<std::string>();
  ws();
  if ((m = lit(",")) != Match::OK) return m;
  ws();
  if ((m = lit("\"arguments\"")) != Match::OK) return m;
  ws();
  if ((m = lit(":")) != Match::OK) return m;
  ws();
  *len = i;
  return Match::OK;
}
}  // namespace

TaggedToolParser::Body Qwen3ToolParser::parse_body(bool final) {
  if (header_) {
    size_t len = 0;
    std::string name;
    const Match m = match_header(buf_, &len, &name);
    if (m == Match::FAIL) return Body::MALFORMED;
    if (m == Match::NEED_MORE) return Body::NEED_MORE;
    consume(len);
    begin_call(std::move(name));
    header_ = false;
    json_ = JsonPrefix();
  }
  size_t i = 0;
  while (!json_.started() && i < buf_.size() && (buf_[i] == ' ' || buf_[i] == '\n')) ++i;
  consume(i);  // spaces before the arguments object are not part of it
  i = 0;
  bool closed = false, bad = false;
  for (; i < buf_.size(); ++i) {
    if (!json_.feed(static_cast<unsigned char>(buf_[i]))) {
      (json_.complete() ? closed : bad) = true;  // a top-level number ends at its delimiter
      break;
    }
    if (json_.ended()) {
      ++i;
      closed = true;
      break;
    }
  }
  if (i > 0) {
    add_arguments(std::string_view(buf_).substr(0, i));
    consume(i);
  }
  if (bad) return Body::MALFORMED;
  if (closed || (final && json_.complete())) return Body::CLOSED;
  return Body::NEED_MORE;
}

bool Qwen3ToolParser::parse_block(std::string_view body, std::string* name, std::string* args) {
  const auto j = nlohmann::json::parse(body, nullptr, false);
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
  *name = j["name"].get<std::string>();
  const char* key = j.contains("arguments") ? "arguments" : "parameters";
  const auto a = j.value(key, nlohmann::json::object());
  if (a.is_string()) {
    *args = a.get<std::string>();
  } else if (a.is_object()) {
    *args = a.dump();
  } else {
    return false;
  }
  return !name->empty();
}

}  // namespace ft::server
