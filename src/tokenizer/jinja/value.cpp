// Jinja runtime values: Python truthiness, str()/repr(), comparisons and json.dumps.
#include "tokenizer/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "base/error.h"
#include "tokenizer/jinja/pystr.h"

namespace ft::jinja {

const Value* Dict::find(const std::string& key) const {
  for (auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

void Dict::set(const std::string& key, Value v) {
  for (auto& [k, old] : items)
    if (k == key) {
      old = std::move(v);
      return;
    }
  items.emplace_back(key, std::move(v));
}

Value make_list(std::vector<Value> items, bool tuple) {
  auto l = std::make_shared<List>();
  l->items = std::move(items);
  l->tuple = tuple;
  return Value(l);
}

Value make_dict(std::vector<std::pair<std::string, Value>> items, bool ns) {
  auto d = std::make_shared<Dict>();
  d->items = std::move(items);
  d->ns = ns;
  return Value(d);
}

Value make_func(std::string name, std::function<Value(const Args&)> call) {
  auto f = std::make_shared<Function>();
  f->name = std::move(name);
  f->call = std::move(call);
  return Value(f);
}

Value Args::get(size_t index, const std::string& name, Value def) const {
  if (index < pos.size()) return pos[index];
  for (auto& [k, v] : kw)
    if (k == name) return v;
  return def;
}

bool Args::has(size_t index, const std::string& name) const {
  if (index < pos.size()) return true;
  for (auto& [k, v] : kw)
    if (k == name) return true;
  return false;
}

std::string type_name(const Value& v) {
  switch (v.v.index()) {
    case 0: return "Undefined";
    case 1: return "NoneType";
    case 2: return "bool";
    case 3: return "int";
    case 4: return "float";
    case 5: return "str";
    case 6: return v.list().tuple ? "tuple" : "list";
    case 7: return v.dict().ns ? "Namespace" : "dict";
    default: return "function";
  }
}

bool truthy(const Value& v) {
  switch (v.v.index()) {
    case 0:
    case 1: return false;
    case 2: return v.as_bool();
    case 3: return v.as_int() != 0;
    case 4: return v.as_float() != 0.0;
    case 5: return !v.str().empty();
    case 6: return !v.list().items.empty();
    case 7: return v.dict().ns || !v.dict().items.empty();
    default: return true;
  }
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  int exp = std::stoi(sci.substr(e + 1));
  bool neg = mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  std::string out = neg ? "-" : "";
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out += "0." + std::string(-exp - 1, '0') + digits;
    } else if (size_t(exp) + 1 >= digits.size()) {
      out += digits + std::string(exp + 1 - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char ebuf[16];
  snprintf(ebuf, sizeof ebuf, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
  return out + ebuf;
}

static std::string seq_repr(const List& l) {
  std::string out = l.tuple ? "(" : "[";
  for (size_t i = 0; i < l.items.size(); ++i) {
    if (i) out += ", ";
    out += to_repr(l.items[i]);
  }
  if (l.tuple && l.items.size() == 1) out += ",";
  return out + (l.tuple ? ")" : "]");
}

static std::string dict_repr(const Dict& d) {
  std::string out = "{";
  for (size_t i = 0; i < d.items.size(); ++i) {
    if (i) out += ", ";
    out += py_repr_str(d.items[i].first) + ": " + to_repr(d.items[i].second);
  }
  return out + "}";
}

std::string to_str(const Value& v) {
  switch (v.v.index()) {
    case 0: return "";
    case 1: return "None";
    case 2: return v.as_bool() ? "True" : "False";
    case 3: return std::to_string(v.as_int());
    case 4: return float_repr(v.as_float());
    case 5: return v.str();
    case 6: return seq_repr(v.list());
    case 7: return v.dict().ns ? "<Namespace " + dict_repr(v.dict()) + ">" : dict_repr(v.dict());
    default: return "<function " + v.func().name + ">";
  }
}

std::string to_repr(const Value& v) {
  if (v.is_string()) return py_repr_str(v.str());
  if (v.is_undefined()) return "Undefined";
  return to_str(v);
}

static double num(const Value& v) {
  if (v.is_bool()) return v.as_bool();
  if (v.is_int()) return double(v.as_int());
  return v.as_float();
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (!a.is_float() && !b.is_float())
      return (a.is_bool() ? a.as_bool() : a.as_int()) == (b.is_bool() ? b.as_bool() : b.as_int());
    return num(a) == num(b);
  }
  if (a.v.index() != b.v.index()) return false;
  switch (a.v.index()) {
    case 0:
    case 1: return true;
    case 5: return a.str() == b.str();
    case 6: {
      auto &x = a.list(), &y = b.list();
      if (x.tuple != y.tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i)
        if (!equals(x.items[i], y.items[i])) return false;
      return true;
    }
    case 7: {
      auto &x = a.dict(), &y = b.dict();
      if (x.ns || y.ns) return &x == &y;
      if (x.items.size() != y.items.size()) return false;
      for (auto& [k, v] : x.items) {
        const Value* o = y.find(k);
        if (!o || !equals(v, *o)) return false;
      }
      return true;
    }
    default: return &a.func() == &b.func();
  }
}

bool less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return num(a) < num(b);
  if (a.is_string() && b.is_string()) return a.str() < b.str();
  if (a.is_list() && b.is_list() && a.list().tuple == b.list().tuple) {
    auto &x = a.list().items, &y = b.list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equals(x[i], y[i])) continue;
      return less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  fail("'<' not supported between instances of '{}' and '{}'", type_name(a), type_name(b));
}

Value from_json(const nlohmann::ordered_json& j) {
  using T = nlohmann::ordered_json::value_t;
  switch (j.type()) {
    case T::null: return Value(None{});
    case T::boolean: return Value(j.get<bool>());
    case T::number_integer: return Value(j.get<int64_t>());
    case T::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      return u <= uint64_t(INT64_MAX) ? Value(int64_t(u)) : Value(double(u));
    }
    case T::number_float: return Value(j.get<double>());
    case T::string: return Value(j.get<std::string>());
    case T::array: {
      std::vector<Value> items;
      for (auto& e : j) items.push_back(from_json(e));
      return make_list(std::move(items));
    }
    case T::object: {
      std::vector<std::pair<std::string, Value>> items;
      for (auto& [k, e] : j.items()) items.emplace_back(k, from_json(e));
      return make_dict(std::move(items));
    }
    default: fail("unsupported JSON value of type {}", j.type_name());
  }
}

nlohmann::ordered_json to_json(const Value& v) {
  switch (v.v.index()) {
    case 0:
    case 1: return nullptr;
    case 2: return v.as_bool();
    case 3: return v.as_int();
    case 4: return v.as_float();
    case 5: return v.str();
    case 6: {
      auto out = nlohmann::ordered_json::array();
      for (auto& e : v.list().items) out.push_back(to_json(e));
      return out;
    }
    case 7: {
      auto out = nlohmann::ordered_json::object();
      for (auto& [k, e] : v.dict().items) out[k] = to_json(e);
      return out;
    }
    default: fail("a function cannot be converted to JSON");
  }
}

static void dump_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  for (char32_t c : utf8_decode(s)) {
    char buf[16];
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20 || (ensure_ascii && c > 0x7e)) {
          if (c >= 0x10000) {
            char32_t x = c - 0x10000;
            snprintf(buf, sizeof buf, "\\u%04x\\u%04x", unsigned(0xd800 + (x >> 10)),
                     unsigned(0xdc00 + (x & 0x3ff)));
          } else {
            snprintf(buf, sizeof buf, "\\u%04x", unsigned(c));
          }
          out += buf;
        } else {
          utf8_append(out, c);
        }
    }
  }
  out += '"';
}

static void dump(std::string& out, const Value& v, const DumpOptions& o, int depth) {
  auto newline = [&](int d) {
    if (!o.has_indent) return;
    out += '\n';
    for (int i = 0; i < d; ++i) out += o.indent;
  };
  switch (v.v.index()) {
    case 1: out += "null"; return;
    case 2: out += v.as_bool() ? "true" : "false"; return;
    case 3: out += std::to_string(v.as_int()); return;
    case 4: {
      double d = v.as_float();
      out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity")
                                                     : float_repr(d);
      return;
    }
    case 5: dump_string(out, v.str(), o.ensure_ascii); return;
    case 6: {
      auto& items = v.list().items;
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += o.item_sep;
        newline(depth + 1);
        dump(out, items[i], o, depth + 1);
      }
      newline(depth);
      out += ']';
      return;
    }
    case 7: {
      if (v.dict().ns) fail("Object of type Namespace is not JSON serializable");
      auto items = v.dict().items;
      if (o.sort_keys)
        std::stable_sort(items.begin(), items.end(),
                         [](auto& a, auto& b) { return a.first < b.first; });
      if (items.empty()) {
        out += "{}";
        return;
      }
      out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += o.item_sep;
        newline(depth + 1);
        dump_string(out, items[i].first, o.ensure_ascii);
        out += o.key_sep;
        dump(out, items[i].second, o, depth + 1);
      }
      newline(depth);
      out += '}';
      return;
    }
    default: fail("Object of type {} is not JSON serializable", type_name(v));
  }
}

std::string json_dumps(const Value& v, const DumpOptions& opt) {
  std::string out;
  dump(out, v, opt, 0);
  return out;
}

}  // namespace ft::jinja
