// Jinja syntax tree: expressions and statements produced by the parser, walked by the evaluator.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace ft::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class ExprKind {
  Const,     // value
  Name,      // name
  List,      // args
  Tuple,     // args
  Dict,      // kwargs: keys are evaluated from args[i] pairs (args = k0, v0, k1, v1, ...)
  Attr,      // args[0].name
  Item,      // args[0][args[1]]
  Slice,     // args[0][args[1]:args[2]:args[3]] (null parts are omitted)
  Call,      // args[0](args[1..], kwargs)
  Filter,    // args[0] | name(args[1..], kwargs)
  Test,      // args[0] is [not] name(args[1..], kwargs)
  Not,       // not args[0]
  Neg,       // -args[0]
  Pos,       // +args[0]
  Binary,    // args[0] op args[1], op in + - * / // % ** ~
  Compare,   // args[0] ops[0] args[1] ops[1] args[2] ... (chained, Python-style)
  And,       // args[0] and args[1]
  Or,        // args[0] or args[1]
  Cond,      // args[0] if args[1] else args[2] (args[2] may be null: undefined)
};

struct Expr {
  ExprKind kind;
  int line = 0;
  Value value;                                         // Const
  std::string name;                                    // Name, Attr, Filter, Test, Binary op
  std::vector<ExprPtr> args;                           // operands (see ExprKind)
  std::vector<std::pair<std::string, ExprPtr>> kwargs;  // call/filter/test keyword arguments
  std::vector<std::string> ops;                        // Compare operators
  bool negated = false;                                // Test with `is not`
};

enum class StmtKind {
  Text,      // text
  Print,     // {{ expr }}
  If,        // branches: (cond, body)...; else_body
  For,       // target in iter [if filter] body [else else_body]
  Set,       // set target = expr
  SetBlock,  // set target [| filters] body endset; expr holds the filter chain on a Name "__body"
  Macro,     // macro name(params) body
  Break,
  Continue,
  FilterBlock,  // filter chain applied to the rendered body (expr as in SetBlock)
  Scope,        // generation / with bodies rendered in place
};

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // null when required
};

struct Stmt {
  StmtKind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;    // Print / Set value / For iterable / filter chains
  ExprPtr target;  // Set / For target: Name, Tuple of Names, or Attr (ns.x)
  ExprPtr filter;  // For ... if filter
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  std::string name;  // Macro
  std::vector<MacroParam> params;
  bool recursive = false;
};

// A parsed template. Shared so macros can outlive the parse call.
struct Program {
  Body body;
};

}  // namespace ft::jinja
