// Python str semantics over UTF-8 strings (see pystr.h).
#include "tokenizer/jinja/pystr.h"

#include <algorithm>
#include <cstdio>

namespace ft::jinja {

std::u32string utf8_decode(const std::string& s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    unsigned char c = s[i];
    int n = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : -1;
    if (n < 0 || i + n >= s.size()) {  // invalid or truncated: keep the byte as a code point
      out.push_back(c);
      ++i;
      continue;
    }
    char32_t cp = n == 0 ? c : c & (0x3f >> n);
    for (int k = 1; k <= n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3f);
    out.push_back(cp);
    i += n + 1;
  }
  return out;
}

void utf8_append(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += char(c);
  } else if (c < 0x800) {
    out += char(0xc0 | (c >> 6));
    out += char(0x80 | (c & 0x3f));
  } else if (c < 0x10000) {
    out += char(0xe0 | (c >> 12));
    out += char(0x80 | ((c >> 6) & 0x3f));
    out += char(0x80 | (c & 0x3f));
  } else {
    out += char(0xf0 | (c >> 18));
    out += char(0x80 | ((c >> 12) & 0x3f));
    out += char(0x80 | ((c >> 6) & 0x3f));
    out += char(0x80 | (c & 0x3f));
  }
}

std::string utf8_encode(const std::u32string& s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) utf8_append(out, c);
  return out;
}

bool py_isspace(char32_t c) {
  return (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
         c == 0x202f || c == 0x205f || c == 0x3000;
}

size_t py_len(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xc0) != 0x80;
  return n;
}

std::string py_strip(const std::string& s, const std::optional<std::string>& chars, bool left,
                     bool right) {
  std::u32string u = utf8_decode(s);
  std::u32string set = chars ? utf8_decode(*chars) : std::u32string();
  auto strip_it = [&](char32_t c) {
    return chars ? set.find(c) != std::u32string::npos : py_isspace(c);
  };
  size_t b = 0, e = u.size();
  if (left)
    while (b < e && strip_it(u[b])) ++b;
  if (right)
    while (e > b && strip_it(u[e - 1])) --e;
  return utf8_encode(u.substr(b, e - b));
}

static std::vector<std::string> split_whitespace(const std::u32string& u, long maxsplit,
                                                 bool from_right) {
  std::vector<std::u32string> parts;
  if (!from_right) {
    size_t i = 0, n = u.size();
    while (true) {
      while (i < n && py_isspace(u[i])) ++i;
      if (i >= n) break;
      if (maxsplit >= 0 && long(parts.size()) == maxsplit) {
        size_t e = n;
        while (e > i && py_isspace(u[e - 1])) --e;
        parts.push_back(u.substr(i, e - i));
        break;
      }
      size_t j = i;
      while (j < n && !py_isspace(u[j])) ++j;
      parts.push_back(u.substr(i, j - i));
      i = j;
    }
  } else {
    long i = long(u.size());
    while (true) {
      while (i > 0 && py_isspace(u[i - 1])) --i;
      if (i <= 0) break;
      if (maxsplit >= 0 && long(parts.size()) == maxsplit) {
        size_t b = 0;
        while (long(b) < i && py_isspace(u[b])) ++b;
        parts.push_back(u.substr(b, i - b));
        break;
      }
      long j = i;
      while (j > 0 && !py_isspace(u[j - 1])) --j;
      parts.push_back(u.substr(j, i - j));
      i = j;
    }
    std::reverse(parts.begin(), parts.end());
  }
  std::vector<std::string> out;
  for (auto& p : parts) out.push_back(utf8_encode(p));
  return out;
}

std::vector<std::string> py_split(const std::string& s, const std::optional<std::string>& sep,
                                  long maxsplit, bool from_right) {
  if (!sep) return split_whitespace(utf8_decode(s), maxsplit, from_right);
  std::vector<std::string> out;
  const std::string& d = *sep;
  if (!from_right) {
    size_t start = 0;
    while (maxsplit < 0 || long(out.size()) < maxsplit) {
      size_t p = s.find(d, start);
      if (p == std::string::npos) break;
      out.push_back(s.substr(start, p - start));
      start = p + d.size();
    }
    out.push_back(s.substr(start));
    return out;
  }
  size_t end = s.size();
  while (maxsplit < 0 || long(out.size()) < maxsplit) {
    if (end < d.size()) break;
    size_t p = s.rfind(d, end - d.size());
    if (p == std::string::npos) break;
    out.push_back(s.substr(p + d.size(), end - p - d.size()));
    end = p;
  }
  out.push_back(s.substr(0, end));
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> py_splitlines(const std::string& s, bool keepends) {
  std::u32string u = utf8_decode(s);
  std::vector<std::string> out;
  size_t i = 0, start = 0;
  auto is_break = [](char32_t c) {
    return c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || (c >= 0x1c && c <= 0x1e) ||
           c == 0x85 || c == 0x2028 || c == 0x2029;
  };
  while (i < u.size()) {
    if (!is_break(u[i])) {
      ++i;
      continue;
    }
    size_t eol = i;
    i += (u[i] == '\r' && i + 1 < u.size() && u[i + 1] == '\n') ? 2 : 1;
    out.push_back(utf8_encode(u.substr(start, (keepends ? i : eol) - start)));
    start = i;
  }
  if (start < u.size()) out.push_back(utf8_encode(u.substr(start)));
  return out;
}

std::string py_replace(const std::string& s, const std::string& from, const std::string& to,
                       long count) {
  std::string out;
  if (from.empty()) {  // Python inserts `to` around every code point
    std::u32string u = utf8_decode(s);
    long n = 0;
    for (size_t i = 0; i <= u.size(); ++i) {
      if (count < 0 || n < count) {
        out += to;
        ++n;
      }
      if (i < u.size()) utf8_append(out, u[i]);
    }
    return out;
  }
  size_t start = 0;
  long n = 0;
  while (count < 0 || n < count) {
    size_t p = s.find(from, start);
    if (p == std::string::npos) break;
    out.append(s, start, p - start);
    out += to;
    start = p + from.size();
    ++n;
  }
  out.append(s, start, std::string::npos);
  return out;
}

static char32_t cp_upper(char32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c < 0x80) return c;
  if ((c >= 0xe0 && c <= 0xfe && c != 0xf7) || (c >= 0x3b1 && c <= 0x3c9 && c != 0x3c2) ||
      (c >= 0x430 && c <= 0x44f))
    return c - 0x20;
  if (c == 0xff) return 0x178;
  if (c >= 0x450 && c <= 0x45f) return c - 0x50;
  if (c >= 0x100 && c <= 0x17f && (c & 1) && c != 0x131 && c != 0x138 && c != 0x149) return c - 1;
  return c;
}

static char32_t cp_lower(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0x80) return c;
  if ((c >= 0xc0 && c <= 0xde && c != 0xd7) || (c >= 0x391 && c <= 0x3a9 && c != 0x3a2) ||
      (c >= 0x410 && c <= 0x42f))
    return c + 0x20;
  if (c == 0x178) return 0xff;
  if (c >= 0x400 && c <= 0x40f) return c + 0x50;
  if (c >= 0x100 && c <= 0x17f && !(c & 1) && c != 0x130 && c != 0x138) return c + 1;
  return c;
}

static bool cp_cased(char32_t c) { return cp_upper(c) != c || cp_lower(c) != c; }

template <typename F>
static std::string map_cps(const std::string& s, F f) {
  std::u32string u = utf8_decode(s);
  for (auto& c : u) c = f(c);
  return utf8_encode(u);
}

std::string py_upper(const std::string& s) { return map_cps(s, cp_upper); }
std::string py_lower(const std::string& s) { return map_cps(s, cp_lower); }

std::string py_capitalize(const std::string& s) {
  std::u32string u = utf8_decode(s);
  for (size_t i = 0; i < u.size(); ++i) u[i] = i == 0 ? cp_upper(u[i]) : cp_lower(u[i]);
  return utf8_encode(u);
}

std::string py_title(const std::string& s) {
  std::u32string u = utf8_decode(s);
  bool prev_cased = false;
  for (auto& c : u) {
    bool cased = cp_cased(c);
    c = prev_cased ? cp_lower(c) : cp_upper(c);
    prev_cased = cased;
  }
  return utf8_encode(u);
}

static bool case_check(const std::string& s, bool want_upper) {
  bool any = false;
  for (char32_t c : utf8_decode(s)) {
    if (!cp_cased(c)) continue;
    bool up = cp_lower(c) != c;
    if (up != want_upper) return false;
    any = true;
  }
  return any;
}
bool py_isupper(const std::string& s) { return case_check(s, true); }
bool py_islower(const std::string& s) { return case_check(s, false); }

std::string py_repr_str(const std::string& s) {
  char q = (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) ? '"' : '\'';
  std::string out(1, q);
  for (char32_t c : utf8_decode(s)) {
    char buf[16];
    if (c == '\\' || c == char32_t(q)) {
      out += '\\';
      out += char(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f || (c >= 0x80 && c <= 0xa0) || c == 0xad) {
      snprintf(buf, sizeof buf, "\\x%02x", unsigned(c));
      out += buf;
    } else if ((c >= 0x200b && c <= 0x200f) || c == 0x2028 || c == 0x2029 ||
               (c >= 0x2060 && c <= 0x2064) || c == 0xfeff) {
      snprintf(buf, sizeof buf, "\\u%04x", unsigned(c));
      out += buf;
    } else {
      utf8_append(out, c);
    }
  }
  out += q;
  return out;
}

long py_find(const std::string& s, const std::string& sub, bool from_right) {
  size_t p = from_right ? s.rfind(sub) : s.find(sub);
  if (p == std::string::npos) return -1;
  return long(py_len(s.substr(0, p)));
}

long py_count(const std::string& s, const std::string& sub) {
  if (sub.empty()) return long(py_len(s)) + 1;
  long n = 0;
  for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
  return n;
}

}  // namespace ft::jinja
