// Jinja builtins: attribute/item lookup with jinja2's precedence, operators, filters, tests,
// Python str/list/dict methods and the globals HF exposes to chat templates.
#pragma once
#include <string>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace ft::jinja {

// `obj.name`: a Python attribute (method) first, then the item obj["name"]; else Undefined.
Value get_attr(const Value& obj, const std::string& name);
// `obj[key]`: the item first, then (string keys) the attribute; else Undefined.
Value get_item(const Value& obj, const Value& key);
// obj[start:stop:step] with Python semantics; null parts are passed as Undefined.
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

// What a for loop iterates: list items, dict keys, string code points; Undefined is empty.
std::vector<Value> iterate(const Value& v);
Value binary_op(const std::string& op, const Value& a, const Value& b);
bool compare_op(const std::string& op, const Value& a, const Value& b);
bool contains(const Value& container, const Value& item);
// Python's `fmt % args` (for strings) and str.format.
std::string percent_format(const std::string& fmt, const Value& args);

// Throws ft::Error for unknown names (lazily, so unused branches never fail).
Value apply_filter(const std::string& name, const Value& v, const Args& args);
bool apply_test(const std::string& name, const Value& v, const Args& args);

// range, dict, namespace, raise_exception, strftime_now.
std::vector<std::pair<std::string, Value>> make_globals();

// Fails like jinja2 does when an operation needs a real value but got Undefined.
void require_defined(const Value& v);

}  // namespace ft::jinja
