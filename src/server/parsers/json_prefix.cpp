// Incremental JSON prefix validator (see json_prefix.h).
#include "server/parsers/json_prefix.h"

namespace ft::server {

namespace {
bool is_ws(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
bool is_hex(unsigned char c) {
  return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
}  // namespace

bool JsonPrefix::start_value(unsigned char c) {
  if (object_only_ && stack_.empty() && c != '{') return false;
  switch (c) {
    case '{':
    case '[':
      if (stack_.size() >= max_depth_) return false;
      stack_.push_back(static_cast<char>(c));
      s_ = c == '{' ? S::OBJ_FIRST : S::ARR_FIRST;
      return true;
    case '"': s_ = S::STR, key_ = false; return true;
    case '-': s_ = S::MINUS; return true;
    case '0': s_ = S::ZERO; return true;
    case 't': s_ = S::LIT, lit_ = "rue"; return true;
    case 'f': s_ = S::LIT, lit_ = "alse"; return true;
    case 'n': s_ = S::LIT, lit_ = "ull"; return true;
    default:
      if (c >= '1' && c <= '9') return s_ = S::INT, true;
      return false;
  }
}

bool JsonPrefix::feed(unsigned char c) {
  switch (s_) {
    case S::VALUE:
      return is_ws(c) || start_value(c);
    case S::ARR_FIRST:
      if (is_ws(c)) return true;
      if (c == ']') return stack_.pop_back(), value_end(), true;
      return start_value(c);
    case S::OBJ_FIRST:
      if (is_ws(c)) return true;
      if (c == '}') return stack_.pop_back(), value_end(), true;
      if (c == '"') return s_ = S::STR, key_ = true, true;
      return false;
    case S::OBJ_KEY:
      if (is_ws(c)) return true;
      if (c == '"') return s_ = S::STR, key_ = true, true;
      return false;
    case S::COLON:
      if (is_ws(c)) return true;
      if (c == ':') return s_ = S::VALUE, true;
      return false;
    case S::AFTER:
      if (is_ws(c)) return true;
      if (c == ',') return s_ = stack_.back() == '{' ? S::OBJ_KEY : S::VALUE, true;
      if ((c == '}' && stack_.back() == '{') || (c == ']' && stack_.back() == '['))
        return stack_.pop_back(), value_end(), true;
      return false;
    case S::STR:
      if (need_ > 0) {
        if (c < lo_ || c > hi_) return false;
        --need_, lo_ = 0x80, hi_ = 0xBF;
        return true;
      }
      if (c == '"') {
        if (key_) return key_ = false, s_ = S::COLON, true;
        return value_end(), true;
      }
      if (c == '\\') return s_ = S::ESC, true;
      if (c < 0x20) return false;
      if (c < 0x80) return true;
      if (c >= 0xC2 && c <= 0xDF) return need_ = 1, true;
      if (c >= 0xE0 && c <= 0xEF) {
        need_ = 2;
        if (c == 0xE0) lo_ = 0xA0;
        if (c == 0xED) hi_ = 0x9F;
        return true;
      }
      if (c >= 0xF0 && c <= 0xF4) {
        need_ = 3;
        if (c == 0xF0) lo_ = 0x90;
        if (c == 0xF4) hi_ = 0x8F;
        return true;
      }
      return false;
    case S::ESC:
      if (c == 'u') return s_ = S::HEX, need_ = 4, cp_ = 0, true;
      for (char e : std::string_view("\"\\/bfnrt"))
        if (c == static_cast<unsigned char>(e)) return s_ = S::STR, true;
      return false;
    case S::HEX: {
      if (!is_hex(c)) return false;
      const uint16_t cp = static_cast<uint16_t>(
          cp_ * 16 + (is_digit(c) ? c - '0' : (c | 0x20) - 'a' + 10));
      if (need_ == 4 && want_low_ && cp != 0xD) return false;
      if (need_ == 3 && (want_low_ ? cp < 0xDC || cp > 0xDF : cp >= 0xDC && cp <= 0xDF))
        return false;  // a low surrogate must follow a high one, and only then
      cp_ = cp;
      if (--need_ > 0) return true;
      if (want_low_) {
        want_low_ = false;
        s_ = S::STR;
      } else if (cp >= 0xD800 && cp <= 0xDBFF) {
        want_low_ = true;
        s_ = S::SURR;
      } else {
        s_ = S::STR;
      }
      return true;
    }
    case S::SURR:
      return c == '\\' && (s_ = S::SURR_U, true);
    case S::SURR_U:
      return c == 'u' && (s_ = S::HEX, need_ = 4, cp_ = 0, true);
    case S::MINUS:
      if (c == '0') return s_ = S::ZERO, true;
      if (c >= '1' && c <= '9') return s_ = S::INT, true;
      return false;
    case S::FRAC0:
      return is_digit(c) && (s_ = S::FRAC, true);
    case S::EXP0:
      if (c == '+' || c == '-') return s_ = S::EXP_SIGN, true;
      return is_digit(c) && (s_ = S::EXP, true);
    case S::EXP_SIGN:
      return is_digit(c) && (s_ = S::EXP, true);
    case S::ZERO:
    case S::INT:
    case S::FRAC:
    case S::EXP: {
      if (is_digit(c) && s_ != S::ZERO) return true;
      if (c == '.' && (s_ == S::ZERO || s_ == S::INT)) return s_ = S::FRAC0, true;
      if ((c == 'e' || c == 'E') && s_ != S::EXP) return s_ = S::EXP0, true;
      // The number ended; c belongs to what follows it.
      const JsonPrefix saved = *this;
      value_end();
      if (feed(c)) return true;
      *this = saved;
      return false;
    }
    case S::LIT:
      if (c != static_cast<unsigned char>(*lit_)) return false;
      if (*++lit_ == '\0') value_end();
      return true;
    case S::END:
      return is_ws(c);
  }
  return false;
}

bool JsonPrefix::feed(std::string_view s) {
  for (char c : s)
    if (!feed(static_cast<unsigned char>(c))) return false;
  return true;
}

bool JsonPrefix::complete() const {
  if (s_ == S::END) return true;
  return stack_.empty() &&
         (s_ == S::ZERO || s_ == S::INT || s_ == S::FRAC || s_ == S::EXP);
}

std::string JsonPrefix::completion() const {
  std::string out;
  auto close_string = [&] { out += key_ ? "\": null" : "\""; };
  switch (s_) {
    case S::VALUE: out += stack_.empty() ? (object_only_ ? "{}" : "null") : "null"; break;
    case S::OBJ_KEY: out += "\"\": null"; break;
    case S::COLON: out += ": null"; break;
    case S::STR:
      if (need_ > 0) {
        out += static_cast<char>(lo_);
        out.append(need_ - 1, '\x80');
      }
      close_string();
      break;
    case S::ESC: out += "\\"; close_string(); break;
    case S::HEX: {
      if (want_low_) {
        out += std::string_view("DC00").substr(4 - need_);
      } else {
        out.append(need_, '0');
        const uint32_t cp = uint32_t(cp_) << (4 * need_);
        if (cp >= 0xD800 && cp <= 0xDBFF) out += "\\uDC00";
      }
      close_string();
      break;
    }
    case S::SURR: out += "\\uDC00"; close_string(); break;
    case S::SURR_U: out += "uDC00"; close_string(); break;
    case S::MINUS: case S::FRAC0: case S::EXP0: case S::EXP_SIGN: out += "0"; break;
    case S::LIT: out += lit_; break;
    default: break;  // ARR_FIRST, OBJ_FIRST, AFTER, complete numbers, END
  }
  for (auto it = stack_.rbegin(); it != stack_.rend(); ++it) out += *it == '{' ? '}' : ']';
  return out;
}

}  // namespace ft::server
