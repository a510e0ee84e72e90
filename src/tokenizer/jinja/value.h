// Jinja runtime values with Python semantics: truthiness, str()/repr(), equality, ordering, JSON.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace ft::jinja {

struct Value;
struct Function;

// A Python list (or tuple when `tuple` is set). Shared by reference like Python objects.
struct List {
  std::vector<Value> items;
  bool tuple = false;
};

// An insertion-ordered dict with string keys; `ns` marks a jinja2 namespace() object.
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  bool ns = false;
  const Value* find(const std::string& key) const;
  void set(const std::string& key, Value v);
};

// jinja2's default Undefined: `hint` is the message used when an operation on it must fail.
struct Undefined {
  std::string hint;
};
struct None {};

using ListPtr = std::shared_ptr<List>;
using DictPtr = std::shared_ptr<Dict>;
using FuncPtr = std::shared_ptr<Function>;

struct Value {
  std::variant<Undefined, None, bool, int64_t, double, std::string, ListPtr, DictPtr, FuncPtr> v;

  Value() = default;
  Value(None) : v(None{}) {}
  Value(bool b) : v(b) {}
  Value(int i) : v(int64_t(i)) {}
  Value(int64_t i) : v(i) {}
  Value(double d) : v(d) {}
  Value(std::string s) : v(std::move(s)) {}
  Value(const char* s) : v(std::string(s)) {}
  Value(ListPtr l) : v(std::move(l)) {}
  Value(DictPtr d) : v(std::move(d)) {}
  Value(FuncPtr f) : v(std::move(f)) {}
  static Value undefined(std::string hint) { Value r; r.v = Undefined{std::move(hint)}; return r; }

  bool is_undefined() const { return v.index() == 0; }
  bool is_none() const { return v.index() == 1; }
  bool is_bool() const { return v.index() == 2; }
  bool is_int() const { return v.index() == 3; }
  bool is_float() const { return v.index() == 4; }
  bool is_number() const { return is_bool() || is_int() || is_float(); }
  bool is_string() const { return v.index() == 5; }
  bool is_list() const { return v.index() == 6; }
  bool is_dict() const { return v.index() == 7 && !std::get<DictPtr>(v)->ns; }
  bool is_namespace() const { return v.index() == 7 && std::get<DictPtr>(v)->ns; }
  bool is_func() const { return v.index() == 8; }

  bool as_bool() const { return std::get<bool>(v); }
  int64_t as_int() const { return std::get<int64_t>(v); }
  double as_float() const { return std::get<double>(v); }
  const std::string& str() const { return std::get<std::string>(v); }
  List& list() const { return *std::get<ListPtr>(v); }
  Dict& dict() const { return *std::get<DictPtr>(v); }
  Function& func() const { return *std::get<FuncPtr>(v); }
  const std::string& undefined_hint() const { return std::get<Undefined>(v).hint; }
};

Value make_list(std::vector<Value> items = {}, bool tuple = false);
Value make_dict(std::vector<std::pair<std::string, Value>> items = {}, bool ns = false);

// Call arguments: positional then keyword, as written at the call site.
struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  // Argument `name` at position `index`, else its keyword, else `def`.
  Value get(size_t index, const std::string& name, Value def = Value()) const;
  bool has(size_t index, const std::string& name) const;
};

struct Function {
  std::string name;
  std::function<Value(const Args&)> call;
};
Value make_func(std::string name, std::function<Value(const Args&)> call);

// Python type name used in error messages ("str", "list", "NoneType", ...).
std::string type_name(const Value& v);
bool truthy(const Value& v);
// Python str(): what `{{ v }}` renders. Undefined renders as "".
std::string to_str(const Value& v);
// Python repr(): strings quoted the way Python quotes them.
std::string to_repr(const Value& v);
std::string float_repr(double d);
// Python ==, and ordering (<) that fails for unorderable types.
bool equals(const Value& a, const Value& b);
bool less(const Value& a, const Value& b);

// JSON <-> Value; object key order is kept (use ordered_json to keep a request's order).
Value from_json(const nlohmann::ordered_json& j);
nlohmann::ordered_json to_json(const Value& v);

// json.dumps(v, ensure_ascii, indent, separators, sort_keys) as Python writes it.
struct DumpOptions {
  bool ensure_ascii = false;
  std::string indent;  // used when has_indent
  bool has_indent = false;
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  bool sort_keys = false;
};
std::string json_dumps(const Value& v, const DumpOptions& opt);

}  // namespace ft::jinja
