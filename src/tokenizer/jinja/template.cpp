// Jinja evaluator: walks the Program with jinja2's scoping (a fresh scope per loop iteration
// and per macro call; `if` shares its scope) and Python value semantics.
#include "tokenizer/jinja/template.h"

#include <unordered_map>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/lexer.h"
#include "tokenizer/jinja/parser.h"

namespace ft::jinja {
namespace {

struct Scope {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;
};
using ScopePtr = std::shared_ptr<Scope>;

enum class Flow { Normal, Break, Continue };

constexpr int k_max_call_depth = 500;

class Interpreter {
 public:
  explicit Interpreter(std::shared_ptr<const Program> prog) : prog_(std::move(prog)) {}

  std::string render(const Value& context) {
    auto globals = std::make_shared<Scope>();
    for (auto& [k, v] : make_globals()) globals->vars[k] = v;
    scope_ = std::make_shared<Scope>();
    scope_->parent = globals;
    if (context.is_dict())
      for (auto& [k, v] : context.dict().items) scope_->vars[k] = v;
    std::string out;
    try {
      exec(prog_->body, out);
    } catch (const TemplateRaise&) {
      throw;
    } catch (const Error& e) {
      throw Error(fmt::format("chat template error at line {}: {}", line_, e.what()));
    }
    return out;
  }

 private:
  std::shared_ptr<const Program> prog_;
  ScopePtr scope_;
  int line_ = 0;
  int depth_ = 0;

  Value lookup(const std::string& name) const {
    for (Scope* s = scope_.get(); s; s = s->parent.get()) {
      auto it = s->vars.find(name);
      if (it != s->vars.end()) return it->second;
    }
    return Value::undefined("'" + name + "' is undefined");
  }

  // ---- statements ------------------------------------------------------------------------

  Flow exec(const Body& body, std::string& out) {
    for (auto& s : body) {
      Flow f = exec_stmt(*s, out);
      if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
  }

  Flow exec_stmt(const Stmt& s, std::string& out) {
    line_ = s.line;
    switch (s.kind) {
      case StmtKind::Text: out += s.text; return Flow::Normal;
      case StmtKind::Print: out += to_str(eval(*s.expr)); return Flow::Normal;
      case StmtKind::If:
        for (auto& [cond, body] : s.branches)
          if (truthy(eval(*cond))) return exec(body, out);
        return exec(s.else_body, out);
      case StmtKind::For: exec_for(s, out); return Flow::Normal;
      case StmtKind::Set: assign(*s.target, eval(*s.expr)); return Flow::Normal;
      case StmtKind::SetBlock: assign(*s.target, render_filtered(s)); return Flow::Normal;
      case StmtKind::FilterBlock: out += to_str(render_filtered(s)); return Flow::Normal;
      case StmtKind::Macro: define_macro(s); return Flow::Normal;
      case StmtKind::Break: return Flow::Break;
      case StmtKind::Continue: return Flow::Continue;
      case StmtKind::Scope: return exec(s.body, out);
    }
    return Flow::Normal;
  }

  // Renders the body and passes it through the statement's filter chain.
  Value render_filtered(const Stmt& s) {
    std::string body;
    exec(s.body, body);
    auto tmp = std::make_shared<Scope>();
    tmp->parent = scope_;
    tmp->vars[k_body_name] = Value(std::move(body));
    std::swap(scope_, tmp);
    Value v = eval(*s.expr);
    std::swap(scope_, tmp);
    return v;
  }

  void assign(const Expr& target, const Value& v) {
    if (target.kind == ExprKind::Name) {
      scope_->vars[target.name] = v;
    } else if (target.kind == ExprKind::Attr) {
      Value ns = eval(*target.args[0]);
      if (!ns.is_namespace())
        fail("cannot assign attribute on non-namespace object '{}'", target.args[0]->name);
      ns.dict().set(target.name, v);
    } else {
      std::vector<Value> items = iterate(v);
      if (items.size() != target.args.size())
        fail("cannot unpack {} values into {} names", items.size(), target.args.size());
      for (size_t i = 0; i < items.size(); ++i) assign(*target.args[i], items[i]);
    }
  }

  void exec_for(const Stmt& s, std::string& out) {
    std::vector<Value> all = iterate(eval(*s.expr));
    ScopePtr outer = scope_;
    std::vector<Value> items;
    if (s.filter) {
      for (auto& item : all) {
        scope_ = std::make_shared<Scope>();
        scope_->parent = outer;
        assign(*s.target, item);
        if (truthy(eval(*s.filter))) items.push_back(item);
      }
      scope_ = outer;
    } else {
      items = std::move(all);
    }
    int64_t n = int64_t(items.size());
    auto cycle_index = std::make_shared<int64_t>(0);
    for (int64_t i = 0; i < n; ++i) {
      scope_ = std::make_shared<Scope>();
      scope_->parent = outer;
      assign(*s.target, items[i]);
      *cycle_index = i;
      scope_->vars["loop"] = make_loop(items, i, cycle_index);
      Flow f = exec(s.body, out);
      if (f == Flow::Break) break;
    }
    scope_ = outer;
    if (n == 0) exec(s.else_body, out);
  }

  static Value make_loop(const std::vector<Value>& items, int64_t i,
                         const std::shared_ptr<int64_t>& cycle_index) {
    int64_t n = int64_t(items.size());
    std::vector<std::pair<std::string, Value>> kv = {
        {"index", Value(i + 1)},      {"index0", Value(i)},       {"revindex", Value(n - i)},
        {"revindex0", Value(n - i - 1)}, {"first", Value(i == 0)}, {"last", Value(i == n - 1)},
        {"length", Value(n)},         {"depth", Value(1)},        {"depth0", Value(0)},
    };
    if (i > 0) kv.emplace_back("previtem", items[i - 1]);
    if (i + 1 < n) kv.emplace_back("nextitem", items[i + 1]);
    kv.emplace_back("cycle", make_func("cycle", [cycle_index](const Args& a) {
                      if (a.pos.empty()) fail("no items for cycling given");
                      return a.pos[*cycle_index % int64_t(a.pos.size())];
                    }));
    return make_dict(std::move(kv));
  }

  void define_macro(const Stmt& s) {
    ScopePtr def_scope = scope_;
    const Stmt* m = &s;
    scope_->vars[s.name] = make_func(s.name, [this, m, def_scope](const Args& args) {
      return call_macro(*m, def_scope, args);
    });
  }

  Value call_macro(const Stmt& m, const ScopePtr& def_scope, const Args& args) {
    if (++depth_ > k_max_call_depth) fail("macro '{}' recursed too deeply", m.name);
    auto scope = std::make_shared<Scope>();
    scope->parent = def_scope;
    std::swap(scope_, scope);
    std::vector<Value> varargs;
    for (size_t i = m.params.size(); i < args.pos.size(); ++i) varargs.push_back(args.pos[i]);
    std::vector<std::pair<std::string, Value>> kwargs;
    for (auto& [k, v] : args.kw) {
      bool is_param = false;
      for (auto& p : m.params) is_param |= p.name == k;
      if (!is_param) kwargs.emplace_back(k, v);
    }
    for (size_t i = 0; i < m.params.size(); ++i) {
      const MacroParam& p = m.params[i];
      if (args.has(i, p.name)) {
        scope_->vars[p.name] = args.get(i, p.name);
      } else if (p.default_value) {
        scope_->vars[p.name] = eval(*p.default_value);
      } else {
        scope_->vars[p.name] = Value::undefined("parameter '" + p.name + "' was not provided");
      }
    }
    scope_->vars["varargs"] = make_list(std::move(varargs));
    scope_->vars["kwargs"] = make_dict(std::move(kwargs));
    std::string out;
    int saved_line = line_;
    exec(m.body, out);
    line_ = saved_line;
    std::swap(scope_, scope);
    --depth_;
    return Value(std::move(out));
  }

  // ---- expressions -----------------------------------------------------------------------

  Args eval_args(const Expr& e, size_t first) {
    Args a;
    for (size_t i = first; i < e.args.size(); ++i) a.pos.push_back(eval(*e.args[i]));
    for (auto& [k, v] : e.kwargs) a.kw.emplace_back(k, eval(*v));
    return a;
  }

  Value eval(const Expr& e) {
    line_ = e.line;
    switch (e.kind) {
      case ExprKind::Const: return e.value;
      case ExprKind::Name: return lookup(e.name);
      case ExprKind::List:
      case ExprKind::Tuple: {
        std::vector<Value> items;
        for (auto& a : e.args) items.push_back(eval(*a));
        return make_list(std::move(items), e.kind == ExprKind::Tuple);
      }
      case ExprKind::Dict: {
        auto d = make_dict();
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          Value k = eval(*e.args[i]);
          if (!k.is_string()) fail("dict literal keys must be strings, got {}", type_name(k));
          d.dict().set(k.str(), eval(*e.args[i + 1]));
        }
        return d;
      }
      case ExprKind::Attr: return get_attr(eval(*e.args[0]), e.name);
      case ExprKind::Item: {
        Value obj = eval(*e.args[0]);
        return get_item(obj, eval(*e.args[1]));
      }
      case ExprKind::Slice: {
        Value obj = eval(*e.args[0]);
        auto part = [&](size_t i) { return e.args[i] ? eval(*e.args[i]) : Value(); };
        Value a = part(1), b = part(2), c = part(3);
        return get_slice(obj, a, b, c);
      }
      case ExprKind::Call: return eval_call(e);
      case ExprKind::Filter: {
        Value v = eval(*e.args[0]);
        Args a = eval_args(e, 1);
        line_ = e.line;
        return apply_filter(e.name, v, a);
      }
      case ExprKind::Test: {
        Value v = eval(*e.args[0]);
        Args a = eval_args(e, 1);
        line_ = e.line;
        return Value(apply_test(e.name, v, a) != e.negated);
      }
      default: return eval_operator(e);
    }
  }

  Value eval_call(const Expr& e) {
    Value f = eval(*e.args[0]);
    Args a = eval_args(e, 1);
    line_ = e.line;
    if (!f.is_func()) {
      require_defined(f);
      fail("'{}' object is not callable", type_name(f));
    }
    return f.func().call(a);
  }

  Value eval_operator(const Expr& e) {
    switch (e.kind) {
      case ExprKind::Not: return Value(!truthy(eval(*e.args[0])));
      case ExprKind::Neg:
      case ExprKind::Pos: {
        Value v = eval(*e.args[0]);
        require_defined(v);
        bool neg = e.kind == ExprKind::Neg;
        if (v.is_float()) return Value(neg ? -v.as_float() : v.as_float());
        if (v.is_int() || v.is_bool()) {
          int64_t i = v.is_bool() ? v.as_bool() : v.as_int();
          return Value(neg ? -i : i);
        }
        fail("bad operand type for unary {}: '{}'", neg ? "-" : "+", type_name(v));
      }
      case ExprKind::Binary: {
        Value a = eval(*e.args[0]);
        Value b = eval(*e.args[1]);
        line_ = e.line;
        return binary_op(e.name, a, b);
      }
      case ExprKind::Compare: {
        Value left = eval(*e.args[0]);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value right = eval(*e.args[i + 1]);
          line_ = e.line;
          if (!compare_op(e.ops[i], left, right)) return Value(false);
          left = std::move(right);
        }
        return Value(true);
      }
      case ExprKind::And: {
        Value a = eval(*e.args[0]);
        return truthy(a) ? eval(*e.args[1]) : a;
      }
      case ExprKind::Or: {
        Value a = eval(*e.args[0]);
        return truthy(a) ? a : eval(*e.args[1]);
      }
      case ExprKind::Cond: {
        if (truthy(eval(*e.args[1]))) return eval(*e.args[0]);
        if (e.args[2]) return eval(*e.args[2]);
        return Value::undefined(fmt::format(
            "the inline if-expression on line {} evaluated to false and no else section was "
            "defined.",
            e.line));
      }
      default: fail("internal error: unhandled expression kind");
    }
  }
};

}  // namespace

Template::Template(const std::string& source) : program_(parse(lex(source))) {}

std::string Template::render(const Value& context) const {
  return Interpreter(program_).render(context);
}

std::string Template::render(const nlohmann::ordered_json& context) const {
  return render(from_json(context));
}

}  // namespace ft::jinja
