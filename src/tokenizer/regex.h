// PCRE2 (UTF + UCP + JIT) regex used by pre-tokenizers and normalizers to find all matches.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ft {

class Regex {
 public:
  // Compiles an Oniguruma-style pattern as written in tokenizer.json; `literal` escapes it.
  // Throws ft::Error naming `where` if PCRE2 rejects it.
  Regex(const std::string& pattern, bool literal, const std::string& where);
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;

  // Calls fn(begin, end) for each non-overlapping match, left to right (byte offsets).
  template <typename Fn>
  void for_each_match(std::string_view text, Fn&& fn) const {
    size_t pos = 0;
    size_t b, e;
    while (pos <= text.size() && find(text, pos, &b, &e)) {
      fn(b, e);
      pos = e > b ? e : next_char(text, e);
    }
  }
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;
  const std::string& pattern() const { return pattern_; }

 private:
  bool find(std::string_view text, size_t start, size_t* b, size_t* e) const;
  static size_t next_char(std::string_view text, size_t i);

  std::string pattern_;
  bool literal_ = false;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ft
