// Jinja tests (`x is name`) with jinja2 3.x semantics, including its treatment of Undefined.
#include <map>

#include "base/error.h"
#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/pystr.h"

namespace ft::jinja {
namespace {

using Test = bool (*)(const Value& v, const Args& a);

Value arg0(const Args& a) {
  if (a.pos.empty() && a.kw.empty()) fail("test needs an argument");
  return a.pos.empty() ? a.kw[0].second : a.pos[0];
}

bool int_parity(const Value& v, int64_t want) {
  require_defined(v);
  if (v.is_float()) return std::fmod(v.as_float(), 2.0) == double(want);
  if (!v.is_int() && !v.is_bool()) fail("unsupported operand type(s) for %: '{}' and 'int'", type_name(v));
  int64_t i = v.is_bool() ? v.as_bool() : v.as_int();
  return ((i % 2) + 2) % 2 == want;
}

const std::map<std::string, Test>& tests() {
  static const std::map<std::string, Test> m = {
      {"defined", [](const Value& v, const Args&) { return !v.is_undefined(); }},
      {"undefined", [](const Value& v, const Args&) { return v.is_undefined(); }},
      {"none", [](const Value& v, const Args&) { return v.is_none(); }},
      {"boolean", [](const Value& v, const Args&) { return v.is_bool(); }},
      {"true", [](const Value& v, const Args&) { return v.is_bool() && v.as_bool(); }},
      {"false", [](const Value& v, const Args&) { return v.is_bool() && !v.as_bool(); }},
      {"integer", [](const Value& v, const Args&) { return v.is_int(); }},
      {"float", [](const Value& v, const Args&) { return v.is_float(); }},
      {"number", [](const Value& v, const Args&) { return v.is_number(); }},
      {"string", [](const Value& v, const Args&) { return v.is_string(); }},
      {"mapping", [](const Value& v, const Args&) { return v.is_dict(); }},
      {"iterable", [](const Value& v, const Args&) {
         return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict(); }},
      {"sequence", [](const Value& v, const Args&) {
         return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict(); }},
      {"callable", [](const Value& v, const Args&) { return v.is_func(); }},
      {"escaped", [](const Value&, const Args&) { return false; }},
      {"odd", [](const Value& v, const Args&) { return int_parity(v, 1); }},
      {"even", [](const Value& v, const Args&) { return int_parity(v, 0); }},
      {"divisibleby", [](const Value& v, const Args& a) {
         Value d = arg0(a);
         require_defined(v);
         if (!v.is_number() || !d.is_number()) fail("divisibleby needs numbers");
         return truthy(binary_op("%", v, d)) == false; }},
      {"lower", [](const Value& v, const Args&) { return py_islower(to_str(v)); }},
      {"upper", [](const Value& v, const Args&) { return py_isupper(to_str(v)); }},
      {"sameas", [](const Value& v, const Args& a) {
         Value o = arg0(a);
         if (v.is_none() || v.is_bool() || v.is_undefined()) return v.v.index() == o.v.index() && equals(v, o);
         if (v.is_list() && o.is_list()) return &v.list() == &o.list();
         if ((v.is_dict() || v.is_namespace()) && (o.is_dict() || o.is_namespace())) return &v.dict() == &o.dict();
         if (v.is_func() && o.is_func()) return &v.func() == &o.func();
         return false; }},
      {"eq", [](const Value& v, const Args& a) { return equals(v, arg0(a)); }},
      {"equalto", [](const Value& v, const Args& a) { return equals(v, arg0(a)); }},
      {"==", [](const Value& v, const Args& a) { return equals(v, arg0(a)); }},
      {"ne", [](const Value& v, const Args& a) { return !equals(v, arg0(a)); }},
      {"!=", [](const Value& v, const Args& a) { return !equals(v, arg0(a)); }},
      {"lt", [](const Value& v, const Args& a) { return compare_op("<", v, arg0(a)); }},
      {"lessthan", [](const Value& v, const Args& a) { return compare_op("<", v, arg0(a)); }},
      {"<", [](const Value& v, const Args& a) { return compare_op("<", v, arg0(a)); }},
      {"le", [](const Value& v, const Args& a) { return compare_op("<=", v, arg0(a)); }},
      {"<=", [](const Value& v, const Args& a) { return compare_op("<=", v, arg0(a)); }},
      {"gt", [](const Value& v, const Args& a) { return compare_op(">", v, arg0(a)); }},
      {"greaterthan", [](const Value& v, const Args& a) { return compare_op(">", v, arg0(a)); }},
      {">", [](const Value& v, const Args& a) { return compare_op(">", v, arg0(a)); }},
      {"ge", [](const Value& v, const Args& a) { return compare_op(">=", v, arg0(a)); }},
      {">=", [](const Value& v, const Args& a) { return compare_op(">=", v, arg0(a)); }},
      {"in", [](const Value& v, const Args& a) { return contains(arg0(a), v); }},
  };
  return m;
}

}  // namespace

bool apply_test(const std::string& name, const Value& v, const Args& a) {
  auto it = tests().find(name);
  if (it == tests().end())
    fail("unsupported test '{}' (not implemented by ft's chat-template engine)", name);
  return it->second(v, a);
}

}  // namespace ft::jinja
