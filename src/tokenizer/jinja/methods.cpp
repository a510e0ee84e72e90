// Python methods reachable from templates: str, dict and list methods (read-only, as in HF's
// ImmutableSandboxedEnvironment, where mutating methods raise a SecurityError).
#include <algorithm>
#include <cctype>
#include <set>

#include "base/error.h"
#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/pystr.h"

namespace ft::jinja {
namespace {

using Method = Value (*)(const Value& self, const Args& a);

std::optional<std::string> opt_str(const Value& v, const char* what) {
  if (v.is_undefined() || v.is_none()) return std::nullopt;
  if (!v.is_string()) fail("{} arg must be None or str, not {}", what, type_name(v));
  return v.str();
}

std::string str_arg(const Value& v, const char* method) {
  if (!v.is_string()) fail("{}() argument must be str, not {}", method, type_name(v));
  return v.str();
}

int64_t int_arg(const Value& v, int64_t def) {
  if (v.is_undefined() || v.is_none()) return def;
  if (v.is_bool()) return v.as_bool();
  if (!v.is_int()) fail("'{}' object cannot be interpreted as an integer", type_name(v));
  return v.as_int();
}

Value str_list(const std::vector<std::string>& parts) {
  std::vector<Value> out;
  for (auto& p : parts) out.emplace_back(p);
  return make_list(std::move(out));
}

Value affix_check(const Value& self, const Args& a, bool prefix) {
  Value arg = a.get(0, "prefix");
  std::vector<Value> cands = arg.is_list() && arg.list().tuple ? arg.list().items
                                                                : std::vector<Value>{arg};
  std::string s = self.str();
  if (a.pos.size() > 1) {
    Value sliced = get_slice(self, a.pos[1], a.pos.size() > 2 ? a.pos[2] : Value(), Value());
    s = sliced.str();
  }
  for (auto& c : cands) {
    const std::string& p = str_arg(c, prefix ? "startswith" : "endswith");
    bool hit = prefix ? s.compare(0, p.size(), p) == 0
                      : s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
    if (hit) return Value(true);
  }
  return Value(false);
}

template <typename Pred>
Value char_class(const std::string& s, Pred pred) {
  if (s.empty()) return Value(false);
  for (char32_t c : utf8_decode(s))
    if (!pred(c)) return Value(false);
  return Value(true);
}

bool is_alpha_cp(char32_t c) { return c < 0x80 ? std::isalpha(int(c)) != 0 : !py_isspace(c); }

std::string pad(const std::string& s, int64_t width, const std::string& fill, int where) {
  int64_t n = int64_t(py_len(s));
  if (width <= n) return s;
  int64_t total = width - n, left = where < 0 ? 0 : where > 0 ? total : total / 2 + (total & width & 1);
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (int64_t i = 0; i < total - left; ++i) out += fill;
  return out;
}

Value str_format(const Value& self, const Args& a) {
  const std::string& f = self.str();
  std::string out;
  size_t auto_idx = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    char c = f[i];
    if ((c == '{' || c == '}') && i + 1 < f.size() && f[i + 1] == c) {
      out += c;
      ++i;
    } else if (c == '{') {
      size_t e = f.find('}', i);
      if (e == std::string::npos) fail("Single '{{' encountered in format string");
      std::string field = f.substr(i + 1, e - i - 1);
      if (field.find_first_of(":!") != std::string::npos)
        fail("str.format specs/conversions are not supported: '{{{}}}'", field);
      Value v;
      if (field.empty()) {
        v = a.get(auto_idx++, "\x01");
      } else if (std::all_of(field.begin(), field.end(), ::isdigit)) {
        v = a.get(std::stoul(field), "\x01");
      } else {
        v = a.get(SIZE_MAX, field);
      }
      if (v.is_undefined()) fail("str.format: missing argument for '{{{}}}'", field);
      out += to_str(v);
      i = e;
    } else {
      out += c;
    }
  }
  return Value(out);
}

const std::vector<std::pair<std::string, Method>>& string_methods() {
  static const std::vector<std::pair<std::string, Method>> m = {
      {"strip", [](const Value& s, const Args& a) { return Value(py_strip(s.str(), opt_str(a.get(0, "chars"), "strip"), true, true)); }},
      {"lstrip", [](const Value& s, const Args& a) { return Value(py_strip(s.str(), opt_str(a.get(0, "chars"), "lstrip"), true, false)); }},
      {"rstrip", [](const Value& s, const Args& a) { return Value(py_strip(s.str(), opt_str(a.get(0, "chars"), "rstrip"), false, true)); }},
      {"split", [](const Value& s, const Args& a) { return str_list(py_split(s.str(), opt_str(a.get(0, "sep"), "split"), int_arg(a.get(1, "maxsplit"), -1), false)); }},
      {"rsplit", [](const Value& s, const Args& a) { return str_list(py_split(s.str(), opt_str(a.get(0, "sep"), "rsplit"), int_arg(a.get(1, "maxsplit"), -1), true)); }},
      {"splitlines", [](const Value& s, const Args& a) { return str_list(py_splitlines(s.str(), truthy(a.get(0, "keepends", Value(false))))); }},
      {"startswith", [](const Value& s, const Args& a) { return affix_check(s, a, true); }},
      {"endswith", [](const Value& s, const Args& a) { return affix_check(s, a, false); }},
      {"replace", [](const Value& s, const Args& a) { return Value(py_replace(s.str(), str_arg(a.get(0, "old"), "replace"), str_arg(a.get(1, "new"), "replace"), int_arg(a.get(2, "count"), -1))); }},
      {"upper", [](const Value& s, const Args&) { return Value(py_upper(s.str())); }},
      {"lower", [](const Value& s, const Args&) { return Value(py_lower(s.str())); }},
      {"casefold", [](const Value& s, const Args&) { return Value(py_lower(s.str())); }},
      {"title", [](const Value& s, const Args&) { return Value(py_title(s.str())); }},
      {"capitalize", [](const Value& s, const Args&) { return Value(py_capitalize(s.str())); }},
      {"find", [](const Value& s, const Args& a) { return Value(int64_t(py_find(s.str(), str_arg(a.get(0, "sub"), "find"), false))); }},
      {"rfind", [](const Value& s, const Args& a) { return Value(int64_t(py_find(s.str(), str_arg(a.get(0, "sub"), "rfind"), true))); }},
      {"index", [](const Value& s, const Args& a) {
         long i = py_find(s.str(), str_arg(a.get(0, "sub"), "index"), false);
         if (i < 0) fail("substring not found");
         return Value(int64_t(i)); }},
      {"count", [](const Value& s, const Args& a) { return Value(int64_t(py_count(s.str(), str_arg(a.get(0, "sub"), "count")))); }},
      {"join", [](const Value& s, const Args& a) {
         std::string out;
         bool first = true;
         for (auto& v : iterate(a.get(0, "iterable"))) {
           if (!first) out += s.str();
           out += str_arg(v, "join");
           first = false;
         }
         return Value(out); }},
      {"format", str_format},
      {"isdigit", [](const Value& s, const Args&) { return char_class(s.str(), [](char32_t c) { return c >= '0' && c <= '9'; }); }},
      {"isnumeric", [](const Value& s, const Args&) { return char_class(s.str(), [](char32_t c) { return c >= '0' && c <= '9'; }); }},
      {"isalpha", [](const Value& s, const Args&) { return char_class(s.str(), is_alpha_cp); }},
      {"isalnum", [](const Value& s, const Args&) { return char_class(s.str(), [](char32_t c) { return is_alpha_cp(c) || (c >= '0' && c <= '9'); }); }},
      {"isspace", [](const Value& s, const Args&) { return char_class(s.str(), py_isspace); }},
      {"isupper", [](const Value& s, const Args&) { return Value(py_isupper(s.str())); }},
      {"islower", [](const Value& s, const Args&) { return Value(py_islower(s.str())); }},
      {"center", [](const Value& s, const Args& a) { return Value(pad(s.str(), int_arg(a.get(0, "width"), 0), to_str(a.get(1, "fillchar", Value(" "))), 0)); }},
      {"ljust", [](const Value& s, const Args& a) { return Value(pad(s.str(), int_arg(a.get(0, "width"), 0), to_str(a.get(1, "fillchar", Value(" "))), -1)); }},
      {"rjust", [](const Value& s, const Args& a) { return Value(pad(s.str(), int_arg(a.get(0, "width"), 0), to_str(a.get(1, "fillchar", Value(" "))), 1)); }},
      {"zfill", [](const Value& s, const Args& a) {
         std::string x = s.str();
         size_t sign = !x.empty() && (x[0] == '-' || x[0] == '+');
         int64_t fill = int_arg(a.get(0, "width"), 0) - int64_t(py_len(x));
         if (fill > 0) x.insert(sign, std::string(size_t(fill), '0'));
         return Value(x); }},
      {"removeprefix", [](const Value& s, const Args& a) {
         const std::string& p = str_arg(a.get(0, "prefix"), "removeprefix");
         return Value(s.str().compare(0, p.size(), p) == 0 ? s.str().substr(p.size()) : s.str()); }},
      {"removesuffix", [](const Value& s, const Args& a) {
         const std::string& p = str_arg(a.get(0, "suffix"), "removesuffix");
         const std::string& x = s.str();
         bool hit = !p.empty() && x.size() >= p.size() && x.compare(x.size() - p.size(), p.size(), p) == 0;
         return Value(hit ? x.substr(0, x.size() - p.size()) : x); }},
  };
  return m;
}

const std::vector<std::pair<std::string, Method>>& dict_methods() {
  static const std::vector<std::pair<std::string, Method>> m = {
      {"get", [](const Value& d, const Args& a) {
         Value k = a.get(0, "key");
         const Value* v = k.is_string() ? d.dict().find(k.str()) : nullptr;
         return v ? *v : a.get(1, "default", Value(None{})); }},
      {"items", [](const Value& d, const Args&) {
         std::vector<Value> out;
         for (auto& [k, v] : d.dict().items) out.push_back(make_list({Value(k), v}, true));
         return make_list(std::move(out)); }},
      {"keys", [](const Value& d, const Args&) {
         std::vector<Value> out;
         for (auto& [k, v] : d.dict().items) out.emplace_back(k);
         return make_list(std::move(out)); }},
      {"values", [](const Value& d, const Args&) {
         std::vector<Value> out;
         for (auto& [k, v] : d.dict().items) out.push_back(v);
         return make_list(std::move(out)); }},
      {"copy", [](const Value& d, const Args&) { return make_dict(d.dict().items); }},
  };
  return m;
}

const std::vector<std::pair<std::string, Method>>& list_methods() {
  static const std::vector<std::pair<std::string, Method>> m = {
      {"index", [](const Value& l, const Args& a) {
         Value x = a.get(0, "value");
         auto& items = l.list().items;
         for (size_t i = 0; i < items.size(); ++i)
           if (equals(items[i], x)) return Value(int64_t(i));
         fail("{} is not in list", to_repr(x)); }},
      {"count", [](const Value& l, const Args& a) {
         int64_t n = 0;
         for (auto& v : l.list().items) n += equals(v, a.get(0, "value"));
         return Value(n); }},
      {"copy", [](const Value& l, const Args&) { return make_list(l.list().items, l.list().tuple); }},
  };
  return m;
}

bool bind(const std::vector<std::pair<std::string, Method>>& table, const Value& obj,
          const std::string& name, Value& out) {
  for (auto& [n, fn] : table)
    if (n == name) {
      Method f = fn;
      out = make_func(name, [obj, f](const Args& a) { return f(obj, a); });
      return true;
    }
  return false;
}

// Mutating methods exist in Python but HF's sandbox refuses to call them.
bool bind_unsafe(const Value& obj, const std::string& name, Value& out) {
  static const std::set<std::string> list_mut = {"append", "extend", "insert", "pop", "remove",
                                                 "reverse", "sort", "clear"};
  static const std::set<std::string> dict_mut = {"pop", "popitem", "update", "setdefault", "clear"};
  bool is_list = obj.is_list() && !obj.list().tuple;
  if (!(is_list && list_mut.count(name)) && !(obj.is_dict() && dict_mut.count(name))) return false;
  std::string type = type_name(obj);
  out = make_func(name, [name, type](const Args&) -> Value {
    fail("access to attribute '{}' of '{}' object is unsafe (chat templates render in an "
         "immutable sandbox, as in transformers)",
         name, type);
  });
  return true;
}

}  // namespace

bool find_method(const Value& obj, const std::string& name, Value& out) {
  if (obj.is_string()) return bind(string_methods(), obj, name, out);
  if (obj.is_dict()) return bind(dict_methods(), obj, name, out) || bind_unsafe(obj, name, out);
  if (obj.is_list()) return bind(list_methods(), obj, name, out) || bind_unsafe(obj, name, out);
  return false;
}

}  // namespace ft::jinja
