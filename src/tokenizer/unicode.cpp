// UTF-8 helpers, the GPT-2 byte-level alphabet and ICU-backed normalization.
#include "tokenizer/unicode.h"

#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/bytestream.h>
#include <unicode/unistr.h>

#include "base/error.h"

namespace ft::utf8 {

uint32_t next(std::string_view s, size_t& i) {
  auto c = static_cast<unsigned char>(s[i]);
  int n = seq_len(c);
  if (n == 1 || i + n > s.size()) {
    ++i;
    return c;
  }
  uint32_t cp = c & (0x7F >> n);
  for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += n;
  return cp;
}

void append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

int scan(std::string_view s, size_t i, int* bad) {
  auto b0 = static_cast<unsigned char>(s[i]);
  *bad = 1;
  if (b0 < 0x80) return 1;
  int n;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (int k = 1; k < n; ++k) {
    if (i + k >= s.size()) return -1;
    auto b = static_cast<unsigned char>(s[i + k]);
    bool ok = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) {
      *bad = k;
      return 0;
    }
  }
  return n;
}

int valid_seq_at(std::string_view s, size_t i) {
  int bad;
  return scan(s, i, &bad);
}

bool is_valid(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    int bad, n = scan(s, i, &bad);
    if (n <= 0) return false;
    i += n;
  }
  return true;
}

std::string lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    int bad, n = scan(bytes, i, &bad);
    if (n > 0) {
      out.append(bytes.substr(i, n));
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      i += n < 0 ? bytes.size() - i : bad;
    }
  }
  return out;
}

static std::array<uint32_t, 256> make_byte_to_char() {
  std::array<uint32_t, 256> t{};
  uint32_t extra = 256;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    t[b] = printable ? b : extra++;
  }
  return t;
}

const std::array<uint32_t, 256>& byte_to_char() {
  static const auto table = make_byte_to_char();
  return table;
}

int char_to_byte(uint32_t cp) {
  static const auto inverse = [] {
    std::array<int16_t, 324> inv;
    inv.fill(-1);
    const auto& fwd = byte_to_char();
    for (int b = 0; b < 256; ++b) inv[fwd[b]] = static_cast<int16_t>(b);
    return inv;
  }();
  return cp < inverse.size() ? inverse[cp] : -1;
}

std::string normalize(std::string_view s, NormForm form) {
  bool ascii = true;
  for (char c : s) ascii &= static_cast<unsigned char>(c) < 0x80;
  if (ascii) return std::string(s);
  UErrorCode err = U_ZERO_ERROR;
  const icu::Normalizer2* norm = nullptr;
  switch (form) {
    case NormForm::NFC: norm = icu::Normalizer2::getNFCInstance(err); break;
    case NormForm::NFD: norm = icu::Normalizer2::getNFDInstance(err); break;
    case NormForm::NFKC: norm = icu::Normalizer2::getNFKCInstance(err); break;
    case NormForm::NFKD: norm = icu::Normalizer2::getNFKDInstance(err); break;
  }
  FT_CHECK(U_SUCCESS(err), "ICU normalizer unavailable: {}", u_errorName(err));
  icu::StringPiece in(s.data(), static_cast<int32_t>(s.size()));
  if (norm->isNormalizedUTF8(in, err) && U_SUCCESS(err)) return std::string(s);  // common case
  err = U_ZERO_ERROR;
  std::string out;
  icu::StringByteSink<std::string> sink(&out);
  norm->normalizeUTF8(0, in, sink, nullptr, err);
  FT_CHECK(U_SUCCESS(err), "ICU normalize failed: {}", u_errorName(err));
  return out;
}

bool is_alnum(uint32_t cp) { return u_isalnum(static_cast<UChar32>(cp)); }
bool is_space(uint32_t cp) { return u_isUWhiteSpace(static_cast<UChar32>(cp)); }

}  // namespace ft::utf8
