// Jinja lexer: template text -> tokens, with jinja2's whitespace control, trim_blocks and
// lstrip_blocks (HF renders chat templates with both on), raw blocks and comments removed.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ft::jinja {

enum class Tok { Data, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };

struct Token {
  Tok type;
  std::string text;  // data, name, operator, or the unescaped string literal
  int line;
  int64_t int_value = 0;
  double float_value = 0;
};

struct LexOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  bool keep_trailing_newline = false;
};

std::vector<Token> lex(const std::string& source, const LexOptions& options = {});

}  // namespace ft::jinja
