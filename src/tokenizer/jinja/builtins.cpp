// Jinja builtins: lookups, slicing, iteration, operators, %-formatting and globals.
#include "tokenizer/jinja/builtins.h"

#include <cmath>
#include <ctime>

#include "base/error.h"
#include "tokenizer/jinja/pystr.h"
#include "tokenizer/jinja/template.h"

namespace ft::jinja {

bool find_method(const Value& obj, const std::string& name, Value& out);  // methods.cpp

void require_defined(const Value& v) {
  if (v.is_undefined()) fail("{}", v.undefined_hint());
}

static std::string obj_desc(const Value& v) { return "'" + type_name(v) + " object'"; }

Value get_attr(const Value& obj, const std::string& name) {
  require_defined(obj);
  Value m;
  if (find_method(obj, name, m)) return m;
  if (obj.is_dict() || obj.is_namespace()) {
    if (const Value* v = obj.dict().find(name)) return *v;
  }
  return Value::undefined(obj_desc(obj) + " has no attribute '" + name + "'");
}

static int64_t to_index(const Value& k) { return k.is_bool() ? int64_t(k.as_bool()) : k.as_int(); }

Value get_item(const Value& obj, const Value& key) {
  require_defined(obj);
  if ((obj.is_dict() || obj.is_namespace()) && key.is_string()) {
    if (obj.is_dict())
      if (const Value* v = obj.dict().find(key.str())) return *v;
    return get_attr(obj, key.str());
  }
  if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = to_index(key);
    if (obj.is_list()) {
      auto& items = obj.list().items;
      int64_t n = int64_t(items.size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return items[i];
      return Value::undefined(type_name(obj) + " object has no element " + std::to_string(to_index(key)));
    }
    std::u32string u = utf8_decode(obj.str());
    int64_t n = int64_t(u.size());
    if (i < 0) i += n;
    if (i >= 0 && i < n) return Value(utf8_encode(u.substr(i, 1)));
    return Value::undefined("str object has no element " + std::to_string(to_index(key)));
  }
  if (key.is_string()) return get_attr(obj, key.str());
  return Value::undefined(obj_desc(obj) + " has no attribute " + to_repr(key));
}

template <typename T>
static T slice_seq(const T& seq, const Value& start, const Value& stop, const Value& step) {
  auto opt = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_undefined() || v.is_none()) return std::nullopt;
    if (!v.is_int() && !v.is_bool())
      fail("slice {} must be an integer or None, got {}", what, type_name(v));
    return to_index(v);
  };
  int64_t n = int64_t(seq.size());
  int64_t st = opt(step, "step").value_or(1);
  if (st == 0) fail("slice step cannot be zero");
  auto adjust = [&](std::optional<int64_t> v, int64_t def) {
    if (!v) return def;
    int64_t x = *v < 0 ? *v + n : *v;
    if (st > 0) return std::clamp<int64_t>(x, 0, n);
    return std::clamp<int64_t>(x, -1, n - 1);
  };
  int64_t b = adjust(opt(start, "start"), st > 0 ? 0 : n - 1);
  int64_t e = adjust(opt(stop, "stop"), st > 0 ? n : -1);
  T out;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) out.push_back(seq[i]);
  return out;
}

Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  require_defined(obj);
  if (obj.is_list())
    return make_list(slice_seq(obj.list().items, start, stop, step), obj.list().tuple);
  if (obj.is_string()) return Value(utf8_encode(slice_seq(utf8_decode(obj.str()), start, stop, step)));
  fail("'{}' object is not subscriptable", type_name(obj));
}

std::vector<Value> iterate(const Value& v) {
  if (v.is_undefined()) return {};
  if (v.is_list()) return v.list().items;
  std::vector<Value> out;
  if (v.is_dict()) {
    for (auto& [k, x] : v.dict().items) out.emplace_back(k);
    return out;
  }
  if (v.is_string()) {
    for (char32_t c : utf8_decode(v.str())) {
      std::string s;
      utf8_append(s, c);
      out.emplace_back(std::move(s));
    }
    return out;
  }
  fail("'{}' object is not iterable", type_name(v));
}

// ---- operators ---------------------------------------------------------------------------

static bool intlike(const Value& v) { return v.is_int() || v.is_bool(); }
static int64_t ival(const Value& v) { return v.is_bool() ? v.as_bool() : v.as_int(); }
static double fval(const Value& v) { return v.is_float() ? v.as_float() : double(ival(v)); }

[[noreturn]] static void unsupported(const std::string& op, const Value& a, const Value& b) {
  fail("unsupported operand type(s) for {}: '{}' and '{}'", op, type_name(a), type_name(b));
}

static Value repeat(const Value& seq, int64_t n) {
  if (seq.is_string()) {
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += seq.str();
    return Value(out);
  }
  std::vector<Value> out;
  for (int64_t i = 0; i < n; ++i)
    out.insert(out.end(), seq.list().items.begin(), seq.list().items.end());
  return make_list(std::move(out), seq.list().tuple);
}

static Value arith(const std::string& op, const Value& a, const Value& b) {
  if (!a.is_number() || !b.is_number()) unsupported(op, a, b);
  bool ints = intlike(a) && intlike(b);
  if (op == "-") return ints ? Value(ival(a) - ival(b)) : Value(fval(a) - fval(b));
  if (op == "*") return ints ? Value(ival(a) * ival(b)) : Value(fval(a) * fval(b));
  if (op == "/") {
    if (fval(b) == 0) fail("division by zero");
    return Value(fval(a) / fval(b));
  }
  if (op == "//" || op == "%") {
    if (fval(b) == 0) fail("{} by zero", op == "%" ? "modulo" : "integer division");
    if (ints) {
      int64_t x = ival(a), y = ival(b), q = x / y, r = x % y;
      if (r != 0 && ((r < 0) != (y < 0))) {
        --q;
        r += y;
      }
      return op == "//" ? Value(q) : Value(r);
    }
    double x = fval(a), y = fval(b);
    double q = std::floor(x / y), r = std::fmod(x, y);
    if (r != 0 && ((r < 0) != (y < 0))) r += y;
    return op == "//" ? Value(q) : Value(r);
  }
  if (op == "**") {
    if (ints && ival(b) >= 0) {
      int64_t r = 1;
      for (int64_t i = 0; i < ival(b); ++i) r *= ival(a);
      return Value(r);
    }
    return Value(std::pow(fval(a), fval(b)));
  }
  unsupported(op, a, b);
}

Value binary_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") return Value(to_str(a) + to_str(b));
  require_defined(a);
  require_defined(b);
  if (op == "+") {
    if (a.is_string()) {
      if (!b.is_string()) fail("can only concatenate str (not \"{}\") to str", type_name(b));
      return Value(a.str() + b.str());
    }
    if (a.is_list()) {
      if (!b.is_list() || a.list().tuple != b.list().tuple)
        fail("can only concatenate {} (not \"{}\") to {}", type_name(a), type_name(b), type_name(a));
      std::vector<Value> out = a.list().items;
      out.insert(out.end(), b.list().items.begin(), b.list().items.end());
      return make_list(std::move(out), a.list().tuple);
    }
    if (!a.is_number() || !b.is_number()) unsupported(op, a, b);
    return intlike(a) && intlike(b) ? Value(ival(a) + ival(b)) : Value(fval(a) + fval(b));
  }
  if (op == "*") {
    if ((a.is_string() || a.is_list()) && intlike(b)) return repeat(a, ival(b));
    if ((b.is_string() || b.is_list()) && intlike(a)) return repeat(b, ival(a));
  }
  if (op == "%" && a.is_string()) return Value(percent_format(a.str(), b));
  return arith(op, a, b);
}

bool contains(const Value& c, const Value& item) {
  if (c.is_undefined()) return false;
  if (c.is_string()) {
    if (!item.is_string())
      fail("'in <string>' requires string as left operand, not {}", type_name(item));
    return c.str().find(item.str()) != std::string::npos;
  }
  if (c.is_list()) {
    for (auto& x : c.list().items)
      if (equals(x, item)) return true;
    return false;
  }
  if (c.is_dict()) return item.is_string() && c.dict().find(item.str()) != nullptr;
  fail("argument of type '{}' is not iterable", type_name(c));
}

bool compare_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return equals(a, b);
  if (op == "!=") return !equals(a, b);
  if (op == "in") return contains(b, a);
  if (op == "not in") return !contains(b, a);
  if (a.is_undefined() || b.is_undefined()) require_defined(a.is_undefined() ? a : b);
  if (op == "<") return less(a, b);
  if (op == ">") return less(b, a);
  if (op == "<=") return less(a, b) || equals(a, b);
  if (op == ">=") return less(b, a) || equals(a, b);
  fail("unknown comparison operator '{}'", op);
}

// ---- %-formatting --------------------------------------------------------------------------

std::string percent_format(const std::string& fmt, const Value& args) {
  std::vector<Value> vals = args.is_list() && args.list().tuple ? args.list().items
                                                                 : std::vector<Value>{args};
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    size_t j = i + 1;
    while (j < fmt.size() && strchr("-+ #0123456789.", fmt[j])) ++j;
    if (j >= fmt.size()) fail("incomplete format");
    std::string spec = fmt.substr(i, j - i);
    char conv = fmt[j];
    i = j;
    if (conv == '%') {
      out += '%';
      continue;
    }
    if (next >= vals.size()) fail("not enough arguments for format string");
    const Value& v = vals[next++];
    char buf[512];
    if (conv == 's' || conv == 'r') {
      std::string s = conv == 's' ? to_str(v) : to_repr(v);
      snprintf(buf, sizeof buf, (spec + "s").c_str(), s.c_str());
      out += buf;
    } else if (conv == 'd' || conv == 'i' || conv == 'x' || conv == 'X' || conv == 'o') {
      if (!v.is_number()) fail("%{} format: a real number is required, not {}", conv, type_name(v));
      int64_t n = v.is_float() ? int64_t(v.as_float()) : ival(v);
      snprintf(buf, sizeof buf, (spec + "ll" + (conv == 'i' ? 'd' : conv)).c_str(), (long long)n);
      out += buf;
    } else if (strchr("feEgG", conv)) {
      if (!v.is_number()) fail("must be real number, not {}", type_name(v));
      snprintf(buf, sizeof buf, (spec + conv).c_str(), fval(v));
      out += buf;
    } else {
      fail("unsupported format character '{}'", conv);
    }
  }
  if (next < vals.size() && args.is_list() && args.list().tuple)
    fail("not all arguments converted during string formatting");
  return out;
}

// ---- globals -------------------------------------------------------------------------------

static Value global_range(const Args& a) {
  if (a.pos.empty() || a.pos.size() > 3) fail("range expected 1 to 3 arguments");
  for (auto& v : a.pos)
    if (!intlike(v)) fail("'{}' object cannot be interpreted as an integer", type_name(v));
  int64_t start = 0, stop, step = 1;
  if (a.pos.size() == 1) {
    stop = ival(a.pos[0]);
  } else {
    start = ival(a.pos[0]);
    stop = ival(a.pos[1]);
    if (a.pos.size() == 3) step = ival(a.pos[2]);
  }
  if (step == 0) fail("range() arg 3 must not be zero");
  std::vector<Value> out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (out.size() >= 100000) fail("Range too big. The sandbox blocks ranges larger than 100000.");
    out.emplace_back(i);
  }
  return make_list(std::move(out));
}

static Value global_dict(const Args& a, bool ns) {
  auto d = make_dict({}, ns);
  for (auto& p : a.pos) {
    if (!p.is_dict()) fail("{}() positional argument must be a dict", ns ? "namespace" : "dict");
    for (auto& [k, v] : p.dict().items) d.dict().set(k, v);
  }
  for (auto& [k, v] : a.kw) d.dict().set(k, v);
  return d;
}

static Value strftime_now(const Args& a) {
  std::string fmt = to_str(a.get(0, "format", Value("")));
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[512];
  size_t n = std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
  return Value(std::string(buf, n));
}

std::vector<std::pair<std::string, Value>> make_globals() {
  return {
      {"range", make_func("range", global_range)},
      {"dict", make_func("dict", [](const Args& a) { return global_dict(a, false); })},
      {"namespace", make_func("namespace", [](const Args& a) { return global_dict(a, true); })},
      {"raise_exception", make_func("raise_exception",
                                    [](const Args& a) -> Value {
                                      throw TemplateRaise(to_str(a.get(0, "message")));
                                    })},
      {"strftime_now", make_func("strftime_now", strftime_now)},
  };
}

}  // namespace ft::jinja
