// Incremental JSON prefix validator: bytes go in one at a time; it answers whether the text so
// far can still be completed to a valid JSON value, and what shortest text completes it.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace ft::server {

// RFC 8259 grammar with UTF-8 checked inside strings (overlongs and surrogates rejected) and
// \u surrogates paired. Small
// and cheap to copy: constraint code copies it to try a candidate token's bytes.
class JsonPrefix {
 public:
  // object_only: the top-level value must be an object. max_depth bounds nesting.
  explicit JsonPrefix(bool object_only = false, int max_depth = 32)
      : object_only_(object_only), max_depth_(static_cast<uint8_t>(max_depth)) {}

  // Accepts byte c, or returns false and leaves the state unchanged.
  bool feed(unsigned char c);
  // All bytes or false (the state is then undefined: feed a copy when trying).
  bool feed(std::string_view s);

  // The bytes so far are a whole value (a top-level number could still grow).
  bool complete() const;
  // The top-level value has ended; only whitespace may follow.
  bool ended() const { return s_ == S::END; }
  bool in_string() const { return s_ >= S::STR && s_ <= S::SURR_U; }
  bool started() const { return s_ != S::VALUE || !stack_.empty(); }
  // Bytes that make the prefix a complete value (empty when complete()).
  std::string completion() const;

 private:
  enum class S : uint8_t {
    VALUE, ARR_FIRST, OBJ_FIRST, OBJ_KEY, COLON, AFTER, STR, ESC, HEX, SURR, SURR_U,
    MINUS, ZERO, INT, FRAC0, FRAC, EXP0, EXP_SIGN, EXP, LIT, END
  };
  bool start_value(unsigned char c);
  void value_end() { s_ = stack_.empty() ? S::END : S::AFTER; }

  S s_ = S::VALUE;
  std::string stack_;            // open containers, '{' or '['
  bool key_ = false;             // the open string is an object key
  uint8_t need_ = 0;             // HEX: digits left; STR: UTF-8 continuation bytes left
  uint8_t lo_ = 0x80, hi_ = 0xBF;  // range of the next UTF-8 continuation byte
  uint16_t cp_ = 0;              // HEX: the \u digits so far
  bool want_low_ = false;        // a high surrogate \uD8xx needs its low \uDCxx next
  const char* lit_ = nullptr;    // LIT: the rest of true/false/null
  bool object_only_;
  uint8_t max_depth_;
};

}  // namespace ft::server
