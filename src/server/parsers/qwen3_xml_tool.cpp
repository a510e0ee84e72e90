// Qwen3.5-style XML tool calls with schema-typed parameter values (see qwen3_xml_tool.h).
#include "server/parsers/qwen3_xml_tool.h"

#include <algorithm>

namespace ft::server {

namespace {
constexpr std::string_view kFunction = "<function=", kFunctionEnd = "</function>",
                           kParam = "<parameter=", kParamEnd = "</parameter>";
bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
std::string trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return std::string(s);
}
std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The schema's type: "type" (a string, or a list whose first non-null entry counts), or the
// first typed alternative of anyOf/oneOf. "string" when unknown.
std::string schema_type(const nlohmann::json* schema) {
  if (!schema || !schema->is_object()) return "string";
  if (auto t = schema->find("type"); t != schema->end()) {
    if (t->is_string()) return t->get<std::string>();
    if (t->is_array())
      for (const auto& e : *t)
        if (e.is_string() && e != "null") return e.get<std::string>();
  }
  for (const char* k : {"anyOf", "oneOf"})
    if (auto a = schema->find(k); a != schema->end() && a->is_array())
      for (const auto& alt : *a) {
        std::string t = schema_type(&alt);
        if (alt.is_object() && alt.contains("type") && t != "null") return t;
      }
  if (schema->contains("properties")) return "object";
  return "string";
}
}  // namespace

nlohmann::json Qwen3XmlToolParser::typed_value(const nlohmann::json* schema,
                                               const std::string& text) {
  const std::string type = schema_type(schema);
  const std::string t = trim(text);
  if (lower(t) == "null" && type != "string") return nullptr;
  if (type == "integer" || type == "number") {
    auto v = nlohmann::json::parse(t, nullptr, false);
    if (v.is_number() && (type == "number" || !v.is_number_float())) return v;
    if (type == "integer" && v.is_number_float() && v.get<double>() == static_cast<double>(
                                                        static_cast<int64_t>(v.get<double>())))
      return static_cast<int64_t>(v.get<double>());
  } else if (type == "boolean") {
    if (lower(t) == "true") return true;
    if (lower(t) == "false") return false;
  } else if (type == "object" || type == "array") {
    auto v = nlohmann::json::parse(t, nullptr, false);
    if ((type == "object" && v.is_object()) || (type == "array" && v.is_array())) return v;
  } else if (type == "null") {
    if (lower(t) == "null") return nullptr;
  }
  return text;
}

TaggedToolParser::Body Qwen3XmlToolParser::close_args(Body b) {
  add_arguments(first_ ? "{}" : "}");
  return b;
}

TaggedToolParser::Body Qwen3XmlToolParser::parse_body(bool final) {
  if (header_) {
    size_t i = 0;
    while (i < buf_.size() && is_space(buf_[i])) ++i;
    const std::string_view rest = std::string_view(buf_).substr(i);
    if (rest.size() < kFunction.size())
      return kFunction.starts_with(rest) ? Body::NEED_MORE : Body::MALFORMED;
    if (!rest.starts_with(kFunction)) return Body::MALFORMED;
    const size_t gt = rest.find('>');
    const size_t bad = rest.find_first_of("<\n", kFunction.size());
    if (bad < gt) return Body::MALFORMED;
    if (gt == std::string_view::npos) return Body::NEED_MORE;
    std::string name = trim(rest.substr(kFunction.size(), gt - kFunction.size()));
    if (name.empty()) return Body::MALFORMED;
    consume(i + gt + 1);
    for (const auto& t : tools_) {
      const auto& f = t.contains("function") ? t["function"] : t;
      if (f.is_object() && f.value("name", "") == name && f.contains("parameters") &&
          f["parameters"].is_object() && f["parameters"].contains("properties"))
        props_ = &f["parameters"]["properties"];
    }
    begin_call(std::move(name));
    header_ = false;
  }
  for (;;) {
    size_t i = 0;
    while (i < buf_.size() && is_space(buf_[i])) ++i;
    const std::string_view rest = std::string_view(buf_).substr(i);
    if (rest.starts_with(kFunctionEnd)) {
      consume(i + kFunctionEnd.size());
      return close_args(Body::CLOSED);
    }
    if (!rest.starts_with(kParam)) {
      if (rest.empty() || kParam.starts_with(rest) || kFunctionEnd.starts_with(rest))
        return final ? close_args(Body::CLOSED) : Body::NEED_MORE;
      return close_args(Body::MALFORMED);
    }
    const size_t gt = rest.find('>');
    if (gt == std::string_view::npos)
      return final ? close_args(Body::CLOSED) : Body::NEED_MORE;
    const std::string pname = trim(rest.substr(kParam.size(), gt - kParam.size()));
    // The value ends at </parameter>, or (tolerated) at the next tag when that is missing.
    size_t end = std::string_view::npos, skip = 0;
    for (std::string_view tag : {kParamEnd, kParam, kFunctionEnd}) {
      const size_t p = rest.find(tag, gt + 1);
      if (p < end) end = p, skip = tag == kParamEnd ? tag.size() : 0;
    }
    if (end == std::string_view::npos) {
      if (!final) return Body::NEED_MORE;
      end = rest.size();
    }
    std::string value(rest.substr(gt + 1, end - gt - 1));
    if (value.starts_with('\n')) value.erase(0, 1);
    if (value.ends_with('\n')) value.pop_back();
    const nlohmann::json* schema =
        props_ && props_->is_object() && props_->contains(pname) ? &(*props_)[pname] : nullptr;
    add_arguments((first_ ? "{" : ", ") + nlohmann::json(pname).dump() + ": " +
                  typed_value(schema, value).dump(-1, ' ', false,
                                                  nlohmann::json::error_handler_t::replace));
    first_ = false;
    consume(i + end + skip);
  }
}

}  // namespace ft::server
