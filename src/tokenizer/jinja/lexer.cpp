// Jinja lexer mirroring jinja2's lexer rules (see lexer.h).
#include "tokenizer/jinja/lexer.h"

#include <cctype>
#include <cstring>

#include "base/error.h"
#include "tokenizer/jinja/pystr.h"

namespace ft::jinja {
namespace {

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// str.rstrip() / whitespace check with Python's notion of whitespace.
std::string rstrip_ws(const std::string& s) { return py_strip(s, std::nullopt, false, true); }
bool all_ws(const std::string& s) {
  if (s.empty()) return false;
  for (char32_t c : utf8_decode(s))
    if (!py_isspace(c)) return false;
  return true;
}

std::string normalize_newlines(const std::string& src, bool keep_trailing) {
  std::string out;
  out.reserve(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    if (src[i] == '\r') {
      out += '\n';
      if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
    } else {
      out += src[i];
    }
  }
  if (!keep_trailing && !out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class Lexer {
 public:
  Lexer(std::string src, const LexOptions& o) : s_(std::move(src)), o_(o) {}

  std::vector<Token> run() {
    bool line_starting = true;
    while (pos_ < s_.size()) {
      size_t tag = find_tag(pos_);
      if (tag == std::string::npos) {
        emit(Tok::Data, s_.substr(pos_), pos_);
        break;
      }
      char kind = s_[tag + 1];  // '{', '%' or '#'
      char ctrl = tag + 2 < s_.size() && (s_[tag + 2] == '-' || s_[tag + 2] == '+') ? s_[tag + 2] : 0;
      std::string text = s_.substr(pos_, tag - pos_);
      text = strip_before(text, ctrl, kind != '{', line_starting);
      if (!text.empty()) emit(Tok::Data, text, pos_);
      size_t body = tag + 2 + (ctrl ? 1 : 0);
      size_t raw_end = kind == '%' ? match_raw_begin(body) : std::string::npos;
      if (kind == '#') {
        pos_ = lex_comment(tag, body);
      } else if (raw_end != std::string::npos) {
        pos_ = lex_raw(tag, raw_end);
      } else {
        pos_ = lex_tag(tag, body, kind == '%');
      }
      line_starting = pos_ > 0 && s_[pos_ - 1] == '\n';
    }
    tokens_.push_back(Token{Tok::Eof, "", line_at(s_.size())});
    return std::move(tokens_);
  }

 private:
  std::string s_;
  LexOptions o_;
  size_t pos_ = 0;
  std::vector<Token> tokens_;
  size_t line_pos_ = 0;
  int line_ = 1;

  int line_at(size_t p) {  // positions are queried in increasing order
    for (; line_pos_ < p && line_pos_ < s_.size(); ++line_pos_) line_ += s_[line_pos_] == '\n';
    return line_;
  }
  void emit(Tok t, std::string text, size_t at) {
    tokens_.push_back(Token{t, std::move(text), line_at(at)});
  }
  [[noreturn]] void error(size_t at, const std::string& what) {
    fail("chat template syntax error at line {}: {}", line_at(at), what);
  }

  size_t find_tag(size_t from) const {
    for (size_t p = s_.find('{', from); p != std::string::npos; p = s_.find('{', p + 1))
      if (p + 1 < s_.size() && (s_[p + 1] == '{' || s_[p + 1] == '%' || s_[p + 1] == '#'))
        return p;
    return std::string::npos;
  }

  // OptionalLStrip: '-' strips all whitespace before the tag; lstrip_blocks strips spaces and
  // tabs between the line start and a block or comment tag.
  std::string strip_before(const std::string& text, char ctrl, bool block_like,
                           bool line_starting) {
    if (ctrl == '-') return rstrip_ws(text);
    if (ctrl == '+' || !o_.lstrip_blocks || !block_like) return text;
    size_t nl = text.rfind('\n');
    size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
    if ((l_pos > 0 || line_starting) && all_ws(text.substr(l_pos))) return text.substr(0, l_pos);
    return text;
  }

  // After a block or comment end: '-' eats all whitespace, trim_blocks eats one newline.
  size_t after_block_end(size_t p, char ctrl) {
    if (ctrl == '-') {
      while (p < s_.size() && is_ws(s_[p])) ++p;
    } else if (ctrl != '+' && o_.trim_blocks && p < s_.size() && s_[p] == '\n') {
      ++p;
    }
    return p;
  }

  size_t skip_ws(size_t p) const {
    while (p < s_.size() && is_ws(s_[p])) ++p;
    return p;
  }
  bool word_at(size_t p, const char* w) const {
    size_t n = strlen(w);
    return s_.compare(p, n, w) == 0 && (p + n >= s_.size() || !(isalnum((unsigned char)s_[p + n]) || s_[p + n] == '_'));
  }

  // `{% raw %}` (note: jinja2 applies no trim_blocks after it). Returns the end of the tag.
  size_t match_raw_begin(size_t body) const {
    size_t p = skip_ws(body);
    if (!word_at(p, "raw")) return std::string::npos;
    p = skip_ws(p + 3);
    if (s_.compare(p, 3, "-%}") == 0) return skip_ws(p + 3);
    if (s_.compare(p, 2, "%}") == 0) return p + 2;
    return std::string::npos;
  }

  size_t lex_comment(size_t tag, size_t body) {
    size_t end = s_.find("#}", body);
    if (end == std::string::npos) error(tag, "missing end of comment tag '#}'");
    char ctrl = end > body && (s_[end - 1] == '-' || s_[end - 1] == '+') ? s_[end - 1] : 0;
    return after_block_end(end + 2, ctrl);
  }

  size_t lex_raw(size_t tag, size_t p) {
    for (size_t q = s_.find("{%", p); q != std::string::npos; q = s_.find("{%", q + 1)) {
      size_t r = q + 2;
      char ctrl = r < s_.size() && (s_[r] == '-' || s_[r] == '+') ? s_[r] : 0;
      r = skip_ws(r + (ctrl ? 1 : 0));
      if (!word_at(r, "endraw")) continue;
      r = skip_ws(r + 6);
      char end_ctrl = 0;
      if (s_.compare(r, 3, "-%}") == 0 || s_.compare(r, 3, "+%}") == 0) {
        end_ctrl = s_[r];
        r += 3;
      } else if (s_.compare(r, 2, "%}") == 0) {
        r += 2;
      } else {
        continue;
      }
      std::string text = strip_before(s_.substr(p, q - p), ctrl, true, false);
      if (!text.empty()) emit(Tok::Data, text, p);
      return after_block_end(r, end_ctrl);
    }
    error(tag, "missing end of raw directive '{% endraw %}'");
  }

  size_t lex_tag(size_t tag, size_t p, bool block) {
    emit(block ? Tok::BlockBegin : Tok::VarBegin, "", tag);
    int depth = 0;
    while (true) {
      if (p >= s_.size()) error(tag, block ? "unclosed block tag '{%'" : "unclosed '{{'");
      if (depth == 0) {
        size_t end = match_end(p, block);
        if (end != std::string::npos) {
          emit(block ? Tok::BlockEnd : Tok::VarEnd, "", p);
          return end;
        }
      }
      char c = s_[p];
      if (is_ws(c)) {
        ++p;
      } else if (isdigit((unsigned char)c)) {
        p = lex_number(p);
      } else if (isalpha((unsigned char)c) || c == '_') {
        size_t e = p;
        while (e < s_.size() && (isalnum((unsigned char)s_[e]) || s_[e] == '_')) ++e;
        emit(Tok::Name, s_.substr(p, e - p), p);
        p = e;
      } else if (c == '\'' || c == '"') {
        p = lex_string(p);
      } else {
        p = lex_operator(p, depth);
      }
    }
  }

  size_t match_end(size_t p, bool block) {
    if (block) {
      if (s_.compare(p, 3, "+%}") == 0) return p + 3;
      if (s_.compare(p, 3, "-%}") == 0) return after_block_end(p + 3, '-');
      if (s_.compare(p, 2, "%}") == 0) return after_block_end(p + 2, 0);
      return std::string::npos;
    }
    if (s_.compare(p, 3, "-}}") == 0) return skip_ws(p + 3);
    if (s_.compare(p, 2, "}}") == 0) return p + 2;
    return std::string::npos;
  }

  size_t lex_operator(size_t p, int& depth) {
    static const char* two[] = {"**", "//", "==", "!=", ">=", "<="};
    for (const char* op : two)
      if (s_.compare(p, 2, op) == 0) {
        emit(Tok::Op, op, p);
        return p + 2;
      }
    char c = s_[p];
    if (!strchr("+-/*%~[](){}><=.:|,;", c)) error(p, std::string("unexpected character '") + c + "'");
    if (c == '(' || c == '[' || c == '{') ++depth;
    if (c == ')' || c == ']' || c == '}') {
      if (depth == 0) error(p, std::string("unexpected '") + c + "'");
      --depth;
    }
    emit(Tok::Op, std::string(1, c), p);
    return p + 1;
  }

  size_t digits(size_t p) const {  // \d+(_\d+)*
    while (p < s_.size() && (isdigit((unsigned char)s_[p]) ||
                             (s_[p] == '_' && p + 1 < s_.size() && isdigit((unsigned char)s_[p + 1]))))
      ++p;
    return p;
  }

  size_t lex_number(size_t p) {
    auto clean = [](std::string t) {
      std::string o;
      for (char c : t)
        if (c != '_') o += c;
      return o;
    };
    size_t e = digits(p);
    bool after_dot = p > 0 && s_[p - 1] == '.';
    bool is_float = false;
    if (!after_dot && e + 1 < s_.size() && s_[e] == '.' && isdigit((unsigned char)s_[e + 1])) {
      e = digits(e + 1);
      is_float = true;
    }
    if (!after_dot && e < s_.size() && (s_[e] == 'e' || s_[e] == 'E')) {
      size_t q = e + 1;
      if (q < s_.size() && (s_[q] == '+' || s_[q] == '-')) ++q;
      if (q < s_.size() && isdigit((unsigned char)s_[q])) {
        e = digits(q);
        is_float = true;
      }
    }
    std::string text = clean(s_.substr(p, e - p));
    Token t{is_float ? Tok::Float : Tok::Int, text, line_at(p)};
    if (is_float) {
      t.float_value = std::stod(text);
    } else {
      try {
        t.int_value = std::stoll(text);
      } catch (const std::exception&) {
        error(p, "integer literal out of range: " + text);
      }
    }
    tokens_.push_back(t);
    return e;
  }

  size_t lex_string(size_t p) {
    char q = s_[p];
    std::string out;
    size_t i = p + 1;
    for (; i < s_.size() && s_[i] != q; ++i) {
      if (s_[i] != '\\' || i + 1 >= s_.size()) {
        out += s_[i];
        continue;
      }
      i = unescape(i + 1, out);
    }
    if (i >= s_.size()) error(p, "unterminated string literal");
    emit(Tok::String, out, p);
    return i + 1;
  }

  // Python's unicode-escape for the character(s) after a backslash at `i`; returns the index
  // of the last consumed character.
  size_t unescape(size_t i, std::string& out) {
    char c = s_[i];
    switch (c) {
      case '\n': return i;
      case '\\': out += '\\'; return i;
      case '\'': out += '\''; return i;
      case '"': out += '"'; return i;
      case 'a': out += '\a'; return i;
      case 'b': out += '\b'; return i;
      case 'f': out += '\f'; return i;
      case 'n': out += '\n'; return i;
      case 'r': out += '\r'; return i;
      case 't': out += '\t'; return i;
      case 'v': out += '\v'; return i;
      default: break;
    }
    if (c >= '0' && c <= '7') {
      unsigned v = 0;
      size_t k = i;
      for (; k < i + 3 && k < s_.size() && s_[k] >= '0' && s_[k] <= '7'; ++k) v = v * 8 + (s_[k] - '0');
      utf8_append(out, v);
      return k - 1;
    }
    int n = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
    if (n == 0) {
      if (c == 'N') error(i, "\\N{...} escapes are not supported");
      out += '\\';
      out += c;
      return i;
    }
    if (i + n >= s_.size()) error(i, "truncated \\" + std::string(1, c) + " escape");
    char32_t v = 0;
    for (int k = 1; k <= n; ++k) {
      char h = s_[i + k];
      if (!isxdigit((unsigned char)h)) error(i, "truncated \\" + std::string(1, c) + " escape");
      v = v * 16 + (isdigit((unsigned char)h) ? h - '0' : (tolower(h) - 'a' + 10));
    }
    utf8_append(out, v);
    return i + n;
  }
};

}  // namespace

std::vector<Token> lex(const std::string& source, const LexOptions& options) {
  return Lexer(normalize_newlines(source, options.keep_trailing_newline), options).run();
}

}  // namespace ft::jinja
