// UTF-8 helpers for the tokenizer: code point iteration, validity, lossy repair, the GPT-2
// byte<->char table, and Unicode normalization forms (ICU).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace ft::utf8 {

// Length of the UTF-8 sequence that starts with lead byte c (1 for invalid lead bytes).
inline int seq_len(unsigned char c) {
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) return 2;
  if ((c & 0xF0) == 0xE0) return 3;
  if ((c & 0xF8) == 0xF0) return 4;
  return 1;
}

// Decodes the code point at s[i] (valid UTF-8 assumed) and advances i.
uint32_t next(std::string_view s, size_t& i);
void append(std::string& out, uint32_t cp);

// Length of a complete, valid UTF-8 sequence at s[i]; 0 if the bytes there are invalid;
// -1 if they are a valid but unfinished prefix (more bytes could complete it).
int valid_seq_at(std::string_view s, size_t i);
bool is_valid(std::string_view s);
// Like valid_seq_at; when invalid, *bad gets the length of the maximal invalid subpart.
int scan(std::string_view s, size_t i, int* bad);

// Rust's String::from_utf8_lossy: each maximal invalid subpart becomes one U+FFFD.
std::string lossy(std::string_view bytes);

// GPT-2 byte-level alphabet: every byte maps to one printable code point.
const std::array<uint32_t, 256>& byte_to_char();
// Inverse of byte_to_char; -1 for code points outside the alphabet.
int char_to_byte(uint32_t cp);

enum class NormForm { NFC, NFD, NFKC, NFKD };
// Normalizes valid UTF-8 text; ASCII input is returned unchanged without a copy through ICU.
std::string normalize(std::string_view s, NormForm form);

// Unicode alphanumeric (letters and numbers), for single_word added-token boundaries.
bool is_alnum(uint32_t cp);
// Unicode White_Space property.
bool is_space(uint32_t cp);

}  // namespace ft::utf8
