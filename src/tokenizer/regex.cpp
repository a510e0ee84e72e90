// PCRE2 wrapper: compiles tokenizer.json patterns with UTF, UCP and JIT; per-thread match data.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include <pcre2.h>

#include "base/error.h"
#include "tokenizer/unicode.h"

namespace ft {

namespace {

// Oniguruma's \s is Unicode White_Space (it includes U+0085); PCRE2's UCP \s does not, so
// \s and \S are spelled out as explicit classes.
constexpr const char* kSpaceRanges =
    "\\t-\\r\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}"
    "\\x{205f}\\x{3000}";

std::string translate(const std::string& p) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      char n = p[i + 1];
      ++i;
      if (n == 's') {
        out += in_class ? kSpaceRanges : std::string("[") + kSpaceRanges + "]";
      } else if (n == 'S' && !in_class) {
        out += std::string("[^") + kSpaceRanges + "]";
      } else {
        out += c;
        out += n;
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is literal.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

struct ThreadMatch {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 16 * 1024 * 1024, nullptr);
  pcre2_match_context* ctx = pcre2_match_context_create(nullptr);
  ThreadMatch() { pcre2_jit_stack_assign(ctx, nullptr, stack); }
  ~ThreadMatch() {
    pcre2_match_context_free(ctx);
    pcre2_jit_stack_free(stack);
    pcre2_match_data_free(data);
  }
};

ThreadMatch& thread_match() {
  thread_local ThreadMatch tm;
  return tm;
}

}  // namespace

struct Regex::Impl {
  pcre2_code* code = nullptr;
  ~Impl() { pcre2_code_free(code); }
};

Regex::Regex(const std::string& pattern, bool literal, const std::string& where)
    : pattern_(pattern), literal_(literal), impl_(std::make_unique<Impl>()) {
  if (literal) return;  // String patterns use substring search (find)
  std::string src = translate(pattern);
  uint32_t opts = PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK;
  int err = 0;
  PCRE2_SIZE off = 0;
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(src.data()), src.size(), opts, &err,
                              &off, nullptr);
  if (!impl_->code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    fail("{}: regex '{}' is not supported (PCRE2: {} at offset {}); fix the pattern", where,
         pattern, reinterpret_cast<char*>(msg), off);
  }
  pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter on error
}

Regex::~Regex() = default;
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;

bool Regex::find(std::string_view text, size_t start, size_t* b, size_t* e) const {
  if (literal_) {  // plain substring search is faster than the matcher for String patterns
    size_t at = pattern_.empty() ? std::string_view::npos : text.find(pattern_, start);
    if (at == std::string_view::npos) return false;
    *b = at;
    *e = at + pattern_.size();
    return true;
  }
  auto& tm = thread_match();
  int rc = pcre2_match(impl_->code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), start,
                       PCRE2_NO_UTF_CHECK, tm.data, tm.ctx);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  FT_CHECK(rc >= 0, "pcre2_match failed with code {} for pattern {}", rc, pattern_);
  PCRE2_SIZE* ov = pcre2_get_ovector_pointer(tm.data);
  *b = ov[0];
  *e = ov[1];
  return true;
}

size_t Regex::next_char(std::string_view text, size_t i) {
  if (i >= text.size()) return i + 1;
  return i + utf8::seq_len(static_cast<unsigned char>(text[i]));
}

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> out;
  for_each_match(text, [&](size_t b, size_t e) { out.emplace_back(b, e); });
  return out;
}

}  // namespace ft
