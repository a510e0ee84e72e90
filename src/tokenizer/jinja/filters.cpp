// Jinja filters with jinja2 3.x semantics; tojson follows transformers' override
// (json.dumps(x, ensure_ascii=False, indent, separators, sort_keys), no HTML escaping).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "base/error.h"
#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/pystr.h"

namespace ft::jinja {
namespace {

using Filter = Value (*)(const Value& v, const Args& a);

int64_t int_of(const Value& v, const char* what) {
  if (v.is_bool()) return v.as_bool();
  if (!v.is_int()) fail("{} must be an integer, got {}", what, type_name(v));
  return v.as_int();
}

Value py_len_of(const Value& v) {
  if (v.is_undefined()) return Value(int64_t(0));
  if (v.is_string()) return Value(int64_t(py_len(v.str())));
  if (v.is_list()) return Value(int64_t(v.list().items.size()));
  if (v.is_dict()) return Value(int64_t(v.dict().items.size()));
  fail("object of type '{}' has no len()", type_name(v));
}

// make_attrgetter: dotted attribute path resolved with subscript semantics.
Value attr_path(const Value& item, const std::string& path) {
  Value cur = item;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    cur = digits ? get_item(cur, Value(int64_t(std::stoll(part)))) : get_item(cur, Value(part));
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

Value ignore_case(const Value& v) { return v.is_string() ? Value(py_lower(v.str())) : v; }

Value sort_key(const Value& item, const Value& attribute, bool case_sensitive) {
  Value k = attribute.is_undefined() || attribute.is_none() ? item : attr_path(item, to_str(attribute));
  return case_sensitive ? k : ignore_case(k);
}

Value f_default(const Value& v, const Args& a) {
  bool boolean = truthy(a.get(1, "boolean", Value(false)));
  if (v.is_undefined() || (boolean && !truthy(v))) return a.get(0, "default_value", Value(""));
  return v;
}

Value f_first(const Value& v, const Args&) {
  auto items = iterate(v);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}

Value f_last(const Value& v, const Args&) {
  auto items = iterate(v);
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

Value f_join(const Value& v, const Args& a) {
  std::string sep = to_str(a.get(0, "d", Value("")));
  Value attribute = a.get(1, "attribute");
  std::string out;
  bool first = true;
  for (auto& item : iterate(v)) {
    if (!first) out += sep;
    out += to_str(attribute.is_undefined() || attribute.is_none() ? item : attr_path(item, to_str(attribute)));
    first = false;
  }
  return Value(out);
}

Value f_trim(const Value& v, const Args& a) {
  Value chars = a.get(0, "chars");
  std::optional<std::string> c;
  if (!chars.is_undefined() && !chars.is_none()) c = to_str(chars);
  return Value(py_strip(to_str(v), c, true, true));
}

Value f_replace(const Value& v, const Args& a) {
  Value count = a.get(2, "count");
  int64_t n = count.is_undefined() || count.is_none() ? -1 : int_of(count, "count");
  return Value(py_replace(to_str(v), to_str(a.get(0, "old")), to_str(a.get(1, "new")), n));
}

Value f_items(const Value& v, const Args&) {
  if (v.is_undefined()) return make_list();
  if (!v.is_dict()) fail("Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (auto& [k, x] : v.dict().items) out.push_back(make_list({Value(k), x}, true));
  return make_list(std::move(out));
}

Value f_int(const Value& v, const Args& a) {
  Value def = a.get(0, "default", Value(int64_t(0)));
  int base = int(int_of(a.get(1, "base", Value(int64_t(10))), "base"));
  if (v.is_int()) return v;
  if (v.is_bool()) return Value(int64_t(v.as_bool()));
  if (v.is_float()) return std::isfinite(v.as_float()) ? Value(int64_t(v.as_float())) : def;
  if (!v.is_string()) return def;
  std::string s = py_strip(v.str(), std::nullopt, true, true);
  std::string digits;
  for (char c : s)
    if (c != '_') digits += c;
  char* end = nullptr;
  errno = 0;
  long long n = std::strtoll(digits.c_str(), &end, base);
  if (!digits.empty() && *end == 0 && errno == 0) return Value(int64_t(n));
  double d = std::strtod(s.c_str(), &end);
  if (!s.empty() && *end == 0 && std::isfinite(d)) return Value(int64_t(d));
  return def;
}

Value f_float(const Value& v, const Args& a) {
  Value def = a.get(0, "default", Value(0.0));
  if (v.is_float()) return v;
  if (v.is_int() || v.is_bool()) return Value(double(v.is_bool() ? v.as_bool() : v.as_int()));
  if (!v.is_string()) return def;
  std::string s = py_strip(v.str(), std::nullopt, true, true);
  char* end = nullptr;
  double d = std::strtod(s.c_str(), &end);
  return !s.empty() && *end == 0 ? Value(d) : def;
}

Value f_abs(const Value& v, const Args&) {
  if (v.is_float()) return Value(std::fabs(v.as_float()));
  if (v.is_int() || v.is_bool()) return Value(int64_t(std::llabs(v.is_bool() ? v.as_bool() : v.as_int())));
  fail("bad operand type for abs(): '{}'", type_name(v));
}

Value f_round(const Value& v, const Args& a) {
  int64_t prec = int_of(a.get(0, "precision", Value(int64_t(0))), "precision");
  std::string method = to_str(a.get(1, "method", Value("common")));
  if (!v.is_number()) fail("type {} doesn't define __round__ method", type_name(v));
  if (method == "common") {
    if (!v.is_float()) return Value(v.is_bool() ? int64_t(v.as_bool()) : v.as_int());
    char buf[512];
    snprintf(buf, sizeof buf, "%.*f", int(std::max<int64_t>(prec, 0)), v.as_float());
    return Value(std::strtod(buf, nullptr));
  }
  double x = v.is_float() ? v.as_float() : double(v.is_bool() ? v.as_bool() : v.as_int());
  double scale = std::pow(10.0, double(prec));
  if (method == "ceil") return Value(std::ceil(x * scale) / scale);
  if (method == "floor") return Value(std::floor(x * scale) / scale);
  fail("method must be common, ceil or floor");
}

Value f_list(const Value& v, const Args&) { return make_list(iterate(v)); }

Value f_reverse(const Value& v, const Args&) {
  if (v.is_string()) {
    std::u32string u = utf8_decode(v.str());
    std::reverse(u.begin(), u.end());
    return Value(utf8_encode(u));
  }
  auto items = iterate(v);
  std::reverse(items.begin(), items.end());
  return make_list(std::move(items));
}

Value f_sort(const Value& v, const Args& a) {
  bool reverse = truthy(a.get(0, "reverse", Value(false)));
  bool cs = truthy(a.get(1, "case_sensitive", Value(false)));
  Value attribute = a.get(2, "attribute");
  auto items = iterate(v);
  std::vector<std::pair<Value, Value>> keyed;
  for (auto& it : items) keyed.emplace_back(sort_key(it, attribute, cs), it);
  std::stable_sort(keyed.begin(), keyed.end(), [&](auto& x, auto& y) {
    return reverse ? less(y.first, x.first) : less(x.first, y.first);
  });
  std::vector<Value> out;
  for (auto& [k, it] : keyed) out.push_back(it);
  return make_list(std::move(out));
}

Value f_dictsort(const Value& v, const Args& a) {
  bool cs = truthy(a.get(0, "case_sensitive", Value(false)));
  std::string by = to_str(a.get(1, "by", Value("key")));
  bool reverse = truthy(a.get(2, "reverse", Value(false)));
  if (by != "key" && by != "value") fail("You can only sort by either 'key' or 'value'");
  auto items = f_items(v, Args{}).list().items;
  size_t idx = by == "key" ? 0 : 1;
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    Value kx = x.list().items[idx], ky = y.list().items[idx];
    if (!cs) {
      kx = ignore_case(kx);
      ky = ignore_case(ky);
    }
    return reverse ? less(ky, kx) : less(kx, ky);
  });
  return make_list(std::move(items));
}

Value f_unique(const Value& v, const Args& a) {
  bool cs = truthy(a.get(0, "case_sensitive", Value(false)));
  Value attribute = a.get(1, "attribute");
  std::vector<Value> out, seen;
  for (auto& it : iterate(v)) {
    Value k = sort_key(it, attribute, cs);
    if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, k); })) {
      seen.push_back(k);
      out.push_back(it);
    }
  }
  return make_list(std::move(out));
}

Value f_minmax(const Value& v, const Args& a, bool is_max) {
  bool cs = truthy(a.get(0, "case_sensitive", Value(false)));
  Value attribute = a.get(1, "attribute");
  auto items = iterate(v);
  if (items.empty()) return Value::undefined(std::string("No aggregated item, sequence was empty."));
  size_t best = 0;
  for (size_t i = 1; i < items.size(); ++i) {
    Value ki = sort_key(items[i], attribute, cs), kb = sort_key(items[best], attribute, cs);
    if (is_max ? less(kb, ki) : less(ki, kb)) best = i;
  }
  return items[best];
}

Value f_sum(const Value& v, const Args& a) {
  Value attribute = a.get(0, "attribute");
  Value total = a.get(1, "start", Value(int64_t(0)));
  for (auto& it : iterate(v))
    total = binary_op("+", total, attribute.is_undefined() || attribute.is_none() ? it : attr_path(it, to_str(attribute)));
  return total;
}

Value f_batch(const Value& v, const Args& a) {
  int64_t n = int_of(a.get(0, "linecount"), "linecount");
  if (n <= 0) fail("batch size must be positive");
  Value fill = a.get(1, "fill_with", Value(None{}));
  std::vector<Value> out, cur;
  for (auto& it : iterate(v)) {
    cur.push_back(it);
    if (int64_t(cur.size()) == n) {
      out.push_back(make_list(std::move(cur)));
      cur.clear();
    }
  }
  if (!cur.empty()) {
    if (!fill.is_none())
      while (int64_t(cur.size()) < n) cur.push_back(fill);
    out.push_back(make_list(std::move(cur)));
  }
  return make_list(std::move(out));
}

Value f_indent(const Value& v, const Args& a) {
  Value w = a.get(0, "width", Value(int64_t(4)));
  std::string ind = w.is_string() ? w.str() : std::string(size_t(int_of(w, "width")), ' ');
  bool first = truthy(a.get(1, "first", Value(false)));
  bool blank = truthy(a.get(2, "blank", Value(false)));
  std::vector<std::string> lines = py_splitlines(to_str(v) + "\n", false);
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + ind : "") + lines[i];
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) rv += "\n" + (lines[i].empty() ? "" : ind) + lines[i];
  }
  return Value(first ? ind + rv : rv);
}

Value f_wordcount(const Value& v, const Args&) {
  int64_t n = 0;
  bool in_word = false;
  for (char32_t c : utf8_decode(to_str(v))) {
    bool w = c == '_' || (c < 0x80 ? std::isalnum(int(c)) != 0 : !py_isspace(c));
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value(n);
}

Value f_escape(const Value& v, const Args&) {
  std::string out;
  for (char c : to_str(v)) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return Value(out);
}

Value f_tojson(const Value& v, const Args& a) {
  DumpOptions o;
  o.ensure_ascii = truthy(a.get(0, "ensure_ascii", Value(false)));
  Value indent = a.get(1, "indent", Value(None{}));
  if (!indent.is_none() && !indent.is_undefined()) {
    o.has_indent = true;
    o.indent = indent.is_string() ? indent.str() : std::string(size_t(std::max<int64_t>(int_of(indent, "indent"), 0)), ' ');
    o.item_sep = ",";
  }
  Value seps = a.get(2, "separators", Value(None{}));
  if (seps.is_list()) {
    if (seps.list().items.size() != 2) fail("tojson separators must be an (item, key) pair");
    o.item_sep = to_str(seps.list().items[0]);
    o.key_sep = to_str(seps.list().items[1]);
  }
  o.sort_keys = truthy(a.get(3, "sort_keys", Value(false)));
  return Value(json_dumps(v, o));
}

Value f_center(const Value& v, const Args& a) {
  Value m = get_attr(Value(to_str(v)), "center");
  Args b;
  b.pos.push_back(a.get(0, "width", Value(int64_t(80))));
  return m.func().call(b);
}

Value f_format(const Value& v, const Args& a) {
  if (!a.kw.empty()) fail("format filter with keyword arguments is not supported");
  return Value(percent_format(to_str(v), make_list(a.pos, true)));
}

// map / select / reject / selectattr / rejectattr.
Value f_map(const Value& v, const Args& a) {
  std::vector<Value> out;
  Value attribute = a.get(SIZE_MAX, "attribute");
  if (!attribute.is_undefined()) {
    Value def = a.get(SIZE_MAX, "default");
    for (auto& it : iterate(v)) {
      Value x = attr_path(it, to_str(attribute));
      out.push_back(x.is_undefined() && !def.is_undefined() ? def : x);
    }
    return make_list(std::move(out));
  }
  if (a.pos.empty()) fail("map requires a filter name or attribute=");
  std::string name = to_str(a.pos[0]);
  Args rest;
  rest.pos.assign(a.pos.begin() + 1, a.pos.end());
  rest.kw = a.kw;
  for (auto& it : iterate(v)) out.push_back(apply_filter(name, it, rest));
  return make_list(std::move(out));
}

Value select_impl(const Value& v, const Args& a, bool by_attr, bool keep) {
  size_t first = by_attr ? 1 : 0;
  std::string attr = by_attr ? to_str(a.get(0, "attr")) : "";
  Args targs;
  if (a.pos.size() > first + 1) targs.pos.assign(a.pos.begin() + first + 1, a.pos.end());
  std::vector<Value> out;
  for (auto& it : iterate(v)) {
    Value x = by_attr ? attr_path(it, attr) : it;
    bool ok = a.pos.size() > first ? apply_test(to_str(a.pos[first]), x, targs) : truthy(x);
    if (ok == keep) out.push_back(it);
  }
  return make_list(std::move(out));
}

const std::map<std::string, Filter>& filters() {
  static const std::map<std::string, Filter> m = {
      {"abs", f_abs},
      {"attr", [](const Value& v, const Args& a) { return get_attr(v, to_str(a.get(0, "name"))); }},
      {"batch", f_batch},
      {"capitalize", [](const Value& v, const Args&) { return Value(py_capitalize(to_str(v))); }},
      {"center", f_center},
      {"count", [](const Value& v, const Args&) { return py_len_of(v); }},
      {"d", f_default},
      {"default", f_default},
      {"dictsort", f_dictsort},
      {"e", f_escape},
      {"escape", f_escape},
      {"first", f_first},
      {"float", f_float},
      {"forceescape", f_escape},
      {"format", f_format},
      {"indent", f_indent},
      {"int", f_int},
      {"items", f_items},
      {"join", f_join},
      {"last", f_last},
      {"length", [](const Value& v, const Args&) { return py_len_of(v); }},
      {"list", f_list},
      {"lower", [](const Value& v, const Args&) { return Value(py_lower(to_str(v))); }},
      {"map", f_map},
      {"max", [](const Value& v, const Args& a) { return f_minmax(v, a, true); }},
      {"min", [](const Value& v, const Args& a) { return f_minmax(v, a, false); }},
      {"reject", [](const Value& v, const Args& a) { return select_impl(v, a, false, false); }},
      {"rejectattr", [](const Value& v, const Args& a) { return select_impl(v, a, true, false); }},
      {"replace", f_replace},
      {"reverse", f_reverse},
      {"round", f_round},
      {"safe", [](const Value& v, const Args&) { return v; }},
      {"select", [](const Value& v, const Args& a) { return select_impl(v, a, false, true); }},
      {"selectattr", [](const Value& v, const Args& a) { return select_impl(v, a, true, true); }},
      {"sort", f_sort},
      {"string", [](const Value& v, const Args&) { return Value(to_str(v)); }},
      {"sum", f_sum},
      {"title", nullptr},  // defined below (needs jinja's word split)
      {"tojson", f_tojson},
      {"trim", f_trim},
      {"unique", f_unique},
      {"upper", [](const Value& v, const Args&) { return Value(py_upper(to_str(v))); }},
      {"wordcount", f_wordcount},
  };
  return m;
}

// jinja2's title: capitalise each chunk after a run of whitespace or -({[<.
Value f_title(const Value& v) {
  std::u32string u = utf8_decode(to_str(v));
  std::string out, chunk;
  auto is_sep = [](char32_t c) { return py_isspace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<'; };
  size_t i = 0;
  while (i < u.size()) {
    size_t j = i;
    bool sep = is_sep(u[i]);
    while (j < u.size() && is_sep(u[j]) == sep) ++j;
    std::string part = utf8_encode(u.substr(i, j - i));
    out += sep ? part : py_upper(utf8_encode(u.substr(i, 1))) + py_lower(utf8_encode(u.substr(i + 1, j - i - 1)));
    i = j;
  }
  return Value(out);
}

}  // namespace

Value apply_filter(const std::string& name, const Value& v, const Args& a) {
  if (name == "title") return f_title(v);
  auto it = filters().find(name);
  if (it == filters().end() || !it->second)
    fail("unsupported filter '{}' (not implemented by ft's chat-template engine)", name);
  return it->second(v, a);
}

}  // namespace ft::jinja
