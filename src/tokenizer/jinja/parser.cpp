// Jinja parser: recursive descent over jinja2's grammar (statements, then expressions).
#include "tokenizer/jinja/parser.h"

#include <algorithm>
#include <initializer_list>
#include <string>

#include "base/error.h"

namespace ft::jinja {
namespace {

ExprPtr make_expr(ExprKind k, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = k;
  e->line = line;
  return e;
}

ExprPtr make_unary(ExprKind k, int line, ExprPtr a) {
  auto e = make_expr(k, line);
  e->args.push_back(std::move(a));
  return e;
}

ExprPtr make_binary(ExprKind k, int line, std::string op, ExprPtr a, ExprPtr b) {
  auto e = make_expr(k, line);
  e->name = std::move(op);
  e->args.push_back(std::move(a));
  e->args.push_back(std::move(b));
  return e;
}

const char* tok_desc(Tok t) {
  switch (t) {
    case Tok::Data: return "template data";
    case Tok::VarBegin: return "'{{'";
    case Tok::VarEnd: return "'}}'";
    case Tok::BlockBegin: return "'{%'";
    case Tok::BlockEnd: return "'%}'";
    case Tok::Name: return "name";
    case Tok::String: return "string";
    case Tok::Int: return "integer";
    case Tok::Float: return "float";
    case Tok::Op: return "operator";
    default: return "end of template";
  }
}

class Parser {
 public:
  explicit Parser(const std::vector<Token>& t) : t_(t) {}

  std::shared_ptr<Program> run() {
    auto prog = std::make_shared<Program>();
    prog->body = subparse({});
    if (cur().type != Tok::Eof) error("unexpected '{% " + cur().text + " %}'");
    return prog;
  }

 private:
  const std::vector<Token>& t_;
  size_t i_ = 0;

  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t n = 1) const { return t_[std::min(i_ + n, t_.size() - 1)]; }
  void next() {
    if (i_ + 1 < t_.size()) ++i_;
  }
  bool is_op(const char* op) const { return cur().type == Tok::Op && cur().text == op; }
  bool is_name(const char* n) const { return cur().type == Tok::Name && cur().text == n; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }

  [[noreturn]] void error(const std::string& what) const {
    fail("chat template syntax error at line {}: {}", cur().line, what);
  }
  std::string describe() const {
    const Token& c = cur();
    if (c.type == Tok::Name || c.type == Tok::Op) return "'" + c.text + "'";
    return tok_desc(c.type);
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) error(std::string("expected '") + op + "', got " + describe());
  }
  void expect_name(const char* n) {
    if (!skip_name(n)) error(std::string("expected '") + n + "', got " + describe());
  }
  std::string expect_identifier() {
    if (cur().type != Tok::Name) error("expected a name, got " + describe());
    std::string n = cur().text;
    next();
    return n;
  }
  void expect_block_end() {
    if (cur().type != Tok::BlockEnd) error("expected '%}', got " + describe());
    next();
  }

  // ---- statements ------------------------------------------------------------------------

  // Parses until `{% <end tag>` for one of `ends`; leaves the cursor on that tag's name.
  Body subparse(std::initializer_list<const char*> ends) {
    Body body;
    while (cur().type != Tok::Eof) {
      const Token& t = cur();
      if (t.type == Tok::Data) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::Text;
        s->line = t.line;
        s->text = t.text;
        body.push_back(std::move(s));
        next();
      } else if (t.type == Tok::VarBegin) {
        next();
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::Print;
        s->line = cur().line;
        s->expr = parse_tuple(true, false, {});
        if (cur().type != Tok::VarEnd) error("expected '}}', got " + describe());
        next();
        body.push_back(std::move(s));
      } else if (t.type == Tok::BlockBegin) {
        next();
        if (cur().type != Tok::Name) error("expected a statement name after '{%'");
        for (const char* e : ends)
          if (cur().text == e) return body;
        body.push_back(parse_statement());
      } else {
        error("unexpected " + describe());
      }
    }
    if (ends.size()) {
      std::string want;
      for (const char* e : ends) want += std::string(want.empty() ? "" : " or ") + "'" + e + "'";
      error("unexpected end of template, expected " + want);
    }
    return body;
  }

  StmtPtr new_stmt(StmtKind k) {
    auto s = std::make_unique<Stmt>();
    s->kind = k;
    s->line = cur().line;
    return s;
  }

  StmtPtr parse_statement() {
    const std::string name = cur().text;
    if (name == "if") return parse_if();
    if (name == "for") return parse_for();
    if (name == "set") return parse_set();
    if (name == "macro") return parse_macro();
    if (name == "break" || name == "continue") {
      auto s = new_stmt(name == "break" ? StmtKind::Break : StmtKind::Continue);
      next();
      expect_block_end();
      return s;
    }
    if (name == "filter") return parse_filter_block();
    if (name == "generation") return parse_scope("endgeneration");
    error("unsupported statement '{% " + name + " %}'");
  }

  StmtPtr parse_if() {
    auto s = new_stmt(StmtKind::If);
    next();  // if / elif
    while (true) {
      ExprPtr cond = parse_tuple(false, false, {});
      expect_block_end();
      Body body = subparse({"elif", "else", "endif"});
      s->branches.emplace_back(std::move(cond), std::move(body));
      if (skip_name("elif")) continue;
      if (skip_name("else")) {
        expect_block_end();
        s->else_body = subparse({"endif"});
      }
      expect_name("endif");
      expect_block_end();
      return s;
    }
  }

  StmtPtr parse_for() {
    auto s = new_stmt(StmtKind::For);
    next();
    s->target = parse_assign_target(false);
    expect_name("in");
    s->expr = parse_tuple(false, false, {"recursive"});
    if (skip_name("if")) s->filter = parse_expression(true);
    if (skip_name("recursive")) error("recursive for loops are not supported");
    expect_block_end();
    s->body = subparse({"endfor", "else"});
    if (skip_name("else")) {
      expect_block_end();
      s->else_body = subparse({"endfor"});
    }
    expect_name("endfor");
    expect_block_end();
    return s;
  }

  StmtPtr parse_set() {
    auto s = new_stmt(StmtKind::Set);
    next();
    s->target = parse_assign_target(true);
    if (skip_op("=")) {
      s->expr = parse_tuple(true, false, {});
      expect_block_end();
      return s;
    }
    s->kind = StmtKind::SetBlock;
    if (s->target->kind != ExprKind::Name && s->target->kind != ExprKind::Attr)
      error("block set needs a single target");
    s->expr = parse_filter_chain();
    expect_block_end();
    s->body = subparse({"endset"});
    next();
    expect_block_end();
    return s;
  }

  ExprPtr parse_filter_chain() {
    auto e = make_expr(ExprKind::Name, cur().line);
    e->name = k_body_name;
    while (is_op("|")) e = parse_filter(std::move(e));
    return e;
  }

  StmtPtr parse_filter_block() {
    auto s = new_stmt(StmtKind::FilterBlock);
    next();
    auto e = make_expr(ExprKind::Name, cur().line);
    e->name = k_body_name;
    s->expr = parse_filter(std::move(e), /*leading_pipe=*/false);
    while (is_op("|")) s->expr = parse_filter(std::move(s->expr));
    expect_block_end();
    s->body = subparse({"endfilter"});
    next();
    expect_block_end();
    return s;
  }

  StmtPtr parse_scope(const char* end) {
    auto s = new_stmt(StmtKind::Scope);
    next();
    expect_block_end();
    s->body = subparse({end});
    next();
    expect_block_end();
    return s;
  }

  StmtPtr parse_macro() {
    auto s = new_stmt(StmtKind::Macro);
    next();
    s->name = expect_identifier();
    expect_op("(");
    while (!skip_op(")")) {
      if (!s->params.empty()) expect_op(",");
      if (skip_op(")")) break;
      MacroParam p;
      p.name = expect_identifier();
      if (skip_op("=")) p.default_value = parse_expression(true);
      s->params.push_back(std::move(p));
    }
    expect_block_end();
    s->body = subparse({"endmacro"});
    next();
    if (cur().type == Tok::Name) next();  // {% endmacro name %}
    expect_block_end();
    return s;
  }

  // Name, `a, b` tuple of names, or (for set) `ns.attr`.
  ExprPtr parse_assign_target(bool with_namespace) {
    int line = cur().line;
    if (with_namespace && peek().type == Tok::Op && peek().text == ".") {
      auto ns = make_expr(ExprKind::Name, line);
      ns->name = expect_identifier();
      next();  // '.'
      auto a = make_expr(ExprKind::Attr, line);
      a->name = expect_identifier();
      a->args.push_back(std::move(ns));
      return a;
    }
    bool paren = skip_op("(");
    std::vector<ExprPtr> names;
    while (true) {
      auto n = make_expr(ExprKind::Name, cur().line);
      n->name = expect_identifier();
      names.push_back(std::move(n));
      if (!skip_op(",")) break;
      if (cur().type != Tok::Name) break;
    }
    if (paren) expect_op(")");
    if (names.size() == 1 && !paren) return std::move(names[0]);
    auto t = make_expr(ExprKind::Tuple, line);
    t->args = std::move(names);
    return t;
  }

  // ---- expressions -----------------------------------------------------------------------

  bool is_tuple_end(std::initializer_list<const char*> extra) const {
    const Token& c = cur();
    if (c.type == Tok::VarEnd || c.type == Tok::BlockEnd || c.type == Tok::Eof) return true;
    if (c.type == Tok::Op && c.text == ")") return true;
    for (const char* e : extra)
      if (c.type == Tok::Name && c.text == e) return true;
    return false;
  }

  ExprPtr parse_tuple(bool with_condexpr, bool explicit_parens,
                      std::initializer_list<const char*> extra_end) {
    int line = cur().line;
    std::vector<ExprPtr> args;
    bool is_tuple = false;
    while (true) {
      if (!args.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      args.push_back(parse_expression(with_condexpr));
      if (is_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!args.empty()) return std::move(args[0]);
      if (!explicit_parens) error("expected an expression, got " + describe());
    }
    auto t = make_expr(ExprKind::Tuple, line);
    t->args = std::move(args);
    return t;
  }

  ExprPtr parse_expression(bool with_condexpr) {
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    ExprPtr e = parse_or();
    while (is_name("if")) {
      int line = cur().line;
      next();
      ExprPtr cond = parse_or();
      ExprPtr other = skip_name("else") ? parse_condexpr() : nullptr;
      auto c = make_expr(ExprKind::Cond, line);
      c->args.push_back(std::move(e));
      c->args.push_back(std::move(cond));
      c->args.push_back(std::move(other));
      e = std::move(c);
    }
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      int line = cur().line;
      next();
      e = make_binary(ExprKind::Or, line, "or", std::move(e), parse_and());
    }
    return e;
  }

  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      int line = cur().line;
      next();
      e = make_binary(ExprKind::And, line, "and", std::move(e), parse_not());
    }
    return e;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      int line = cur().line;
      next();
      return make_unary(ExprKind::Not, line, parse_not());
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    int line = cur().line;
    ExprPtr first = parse_math1();
    std::vector<std::string> ops;
    std::vector<ExprPtr> rest;
    while (true) {
      const Token& c = cur();
      static const char* cmp[] = {"==", "!=", "<", "<=", ">", ">="};
      if (c.type == Tok::Op && std::find_if(std::begin(cmp), std::end(cmp), [&](const char* o) {
                                 return c.text == o;
                               }) != std::end(cmp)) {
        ops.push_back(c.text);
        next();
      } else if (is_name("in")) {
        ops.push_back("in");
        next();
      } else if (is_name("not") && peek().type == Tok::Name && peek().text == "in") {
        ops.push_back("not in");
        next();
        next();
      } else {
        break;
      }
      rest.push_back(parse_math1());
    }
    if (ops.empty()) return first;
    auto e = make_expr(ExprKind::Compare, line);
    e->args.push_back(std::move(first));
    for (auto& r : rest) e->args.push_back(std::move(r));
    e->ops = std::move(ops);
    return e;
  }

  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      std::string op = cur().text;
      int line = cur().line;
      next();
      e = make_binary(ExprKind::Binary, line, op, std::move(e), parse_concat());
    }
    return e;
  }

  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (is_op("~")) {
      int line = cur().line;
      next();
      e = make_binary(ExprKind::Binary, line, "~", std::move(e), parse_math2());
    }
    return e;
  }

  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = cur().text;
      int line = cur().line;
      next();
      e = make_binary(ExprKind::Binary, line, op, std::move(e), parse_pow());
    }
    return e;
  }

  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (is_op("**")) {
      int line = cur().line;
      next();
      e = make_binary(ExprKind::Binary, line, "**", std::move(e), parse_unary(true));
    }
    return e;
  }

  ExprPtr parse_unary(bool with_filter) {
    int line = cur().line;
    ExprPtr e;
    if (skip_op("-")) {
      e = make_unary(ExprKind::Neg, line, parse_unary(false));
    } else if (skip_op("+")) {
      e = make_unary(ExprKind::Pos, line, parse_unary(false));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary();
  ExprPtr parse_postfix(ExprPtr e);
  ExprPtr parse_subscript(ExprPtr e);
  ExprPtr parse_subscribed();
  void parse_call_args(Expr& call);
  ExprPtr parse_filter_expr(ExprPtr e);
  ExprPtr parse_filter(ExprPtr e, bool leading_pipe = true);
  ExprPtr parse_test(ExprPtr e);
};

ExprPtr Parser::parse_primary() {
  const Token& t = cur();
  auto e = make_expr(ExprKind::Const, t.line);
  switch (t.type) {
    case Tok::Name: {
      const std::string& n = t.text;
      if (n == "true" || n == "True") {
        e->value = Value(true);
      } else if (n == "false" || n == "False") {
        e->value = Value(false);
      } else if (n == "none" || n == "None") {
        e->value = Value(None{});
      } else {
        e->kind = ExprKind::Name;
        e->name = n;
      }
      next();
      return e;
    }
    case Tok::String: {
      std::string s;
      while (cur().type == Tok::String) {  // adjacent literals concatenate
        s += cur().text;
        next();
      }
      e->value = Value(std::move(s));
      return e;
    }
    case Tok::Int: e->value = Value(t.int_value); next(); return e;
    case Tok::Float: e->value = Value(t.float_value); next(); return e;
    default: break;
  }
  if (skip_op("(")) {
    ExprPtr inner = parse_tuple(true, true, {});
    expect_op(")");
    return inner;
  }
  if (is_op("[") || is_op("{")) {
    bool is_list = is_op("[");
    e->kind = is_list ? ExprKind::List : ExprKind::Dict;
    next();
    const char* close = is_list ? "]" : "}";
    while (!is_op(close)) {
      if (!e->args.empty()) expect_op(",");
      if (is_op(close)) break;
      e->args.push_back(parse_expression(true));
      if (!is_list) {
        expect_op(":");
        e->args.push_back(parse_expression(true));
      }
    }
    next();
    return e;
  }
  error("unexpected " + describe() + " in expression");
}

ExprPtr Parser::parse_postfix(ExprPtr e) {
  while (true) {
    if (is_op(".") || is_op("[")) {
      e = parse_subscript(std::move(e));
    } else if (is_op("(")) {
      auto c = make_expr(ExprKind::Call, cur().line);
      c->args.push_back(std::move(e));
      parse_call_args(*c);
      e = std::move(c);
    } else {
      return e;
    }
  }
}

ExprPtr Parser::parse_subscript(ExprPtr e) {
  int line = cur().line;
  if (skip_op(".")) {
    if (cur().type == Tok::Name) {
      auto a = make_expr(ExprKind::Attr, line);
      a->name = cur().text;
      a->args.push_back(std::move(e));
      next();
      return a;
    }
    if (cur().type != Tok::Int) error("expected a name or integer after '.', got " + describe());
    auto idx = make_expr(ExprKind::Const, line);
    idx->value = Value(cur().int_value);
    next();
    return make_binary(ExprKind::Item, line, "", std::move(e), std::move(idx));
  }
  next();  // '['
  std::vector<ExprPtr> parts;
  while (!is_op("]")) {
    if (!parts.empty()) {
      expect_op(",");
      if (is_op("]")) break;
    }
    parts.push_back(parse_subscribed());
  }
  bool trailing_comma = t_[i_ - 1].type == Tok::Op && t_[i_ - 1].text == ",";
  next();  // ']'
  ExprPtr key;
  if (parts.size() == 1 && !trailing_comma) {
    key = std::move(parts[0]);
  } else {
    key = make_expr(ExprKind::Tuple, line);
    key->args = std::move(parts);
  }
  if (key->kind == ExprKind::Slice) {
    key->args.insert(key->args.begin(), std::move(e));
    return key;
  }
  return make_binary(ExprKind::Item, line, "", std::move(e), std::move(key));
}

// One subscript: an expression or a slice `a:b:c` (parts may be omitted).
ExprPtr Parser::parse_subscribed() {
  int line = cur().line;
  auto s = make_expr(ExprKind::Slice, line);
  if (skip_op(":")) {
    s->args.push_back(nullptr);
  } else {
    ExprPtr node = parse_expression(true);
    if (!skip_op(":")) return node;
    s->args.push_back(std::move(node));
  }
  auto part_end = [&] { return is_op("]") || is_op(","); };
  s->args.push_back(is_op(":") || part_end() ? nullptr : parse_expression(true));
  if (skip_op(":")) {
    s->args.push_back(part_end() ? nullptr : parse_expression(true));
  } else {
    s->args.push_back(nullptr);
  }
  return s;
}

void Parser::parse_call_args(Expr& call) {
  expect_op("(");
  bool first = true;
  while (!is_op(")")) {
    if (!first) {
      expect_op(",");
      if (is_op(")")) break;
    }
    first = false;
    if (is_op("*") || is_op("**")) error("*args / **kwargs in calls are not supported");
    if (cur().type == Tok::Name && peek().type == Tok::Op && peek().text == "=") {
      std::string key = cur().text;
      next();
      next();
      call.kwargs.emplace_back(key, parse_expression(true));
    } else {
      if (!call.kwargs.empty()) error("positional argument after keyword argument");
      call.args.push_back(parse_expression(true));
    }
  }
  next();
}

ExprPtr Parser::parse_filter_expr(ExprPtr e) {
  while (true) {
    if (is_op("|")) {
      e = parse_filter(std::move(e));
    } else if (is_name("is")) {
      e = parse_test(std::move(e));
    } else if (is_op("(")) {
      auto c = make_expr(ExprKind::Call, cur().line);
      c->args.push_back(std::move(e));
      parse_call_args(*c);
      e = std::move(c);
    } else {
      return e;
    }
  }
}

ExprPtr Parser::parse_filter(ExprPtr e, bool leading_pipe) {
  do {
    if (leading_pipe) next();  // '|'
    leading_pipe = true;
    auto f = make_expr(ExprKind::Filter, cur().line);
    f->name = expect_identifier();
    while (is_op(".") && peek().type == Tok::Name) {
      next();
      f->name += "." + expect_identifier();
    }
    f->args.push_back(std::move(e));
    if (is_op("(")) parse_call_args(*f);
    e = std::move(f);
  } while (is_op("|"));
  return e;
}

ExprPtr Parser::parse_test(ExprPtr e) {
  auto t = make_expr(ExprKind::Test, cur().line);
  next();  // 'is'
  t->negated = skip_name("not");
  t->name = expect_identifier();
  while (is_op(".") && peek().type == Tok::Name) {
    next();
    t->name += "." + expect_identifier();
  }
  t->args.push_back(std::move(e));
  const Token& c = cur();
  bool arg_start = c.type == Tok::Name || c.type == Tok::String || c.type == Tok::Int ||
                   c.type == Tok::Float || (c.type == Tok::Op && (c.text == "[" || c.text == "{"));
  if (is_op("(")) {
    parse_call_args(*t);
  } else if (arg_start && !is_name("else") && !is_name("or") && !is_name("and")) {
    if (is_name("is")) error("you cannot chain multiple tests with 'is'");
    t->args.push_back(parse_postfix(parse_primary()));
  }
  return t;
}

}  // namespace

std::shared_ptr<Program> parse(const std::vector<Token>& tokens) { return Parser(tokens).run(); }

}  // namespace ft::jinja
