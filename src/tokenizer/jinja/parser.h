// Jinja parser: tokens -> Program, following jinja2's grammar and operator precedence.
#pragma once
#include <memory>
#include <vector>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/lexer.h"

namespace ft::jinja {

// Throws ft::Error naming the construct and template line on syntax it does not support.
std::shared_ptr<Program> parse(const std::vector<Token>& tokens);

// Name bound to the rendered body inside the filter chain of `{% set x | f %}` / `{% filter %}`.
inline constexpr const char* k_body_name = "\x01body";

}  // namespace ft::jinja
