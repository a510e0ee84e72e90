// Normalizer pipeline built from tokenizer.json.
#include "tokenizer/normalizer.h"

#include <unicode/locid.h>
#include <unicode/unistr.h>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "tokenizer/unicode.h"

namespace ft {

std::string regex_replace(const Regex& re, std::string_view s, std::string_view content) {
  std::string out;
  size_t prev = 0;
  re.for_each_match(s, [&](size_t b, size_t e) {
    out.append(s.substr(prev, b - prev));
    out.append(content);
    prev = e;
  });
  out.append(s.substr(prev));
  return out;
}

// Reads {"String": "x"} or {"Regex": "x"} into a compiled pattern.
std::shared_ptr<Regex> pattern_from_json(const nlohmann::json& p, const std::string& where) {
  if (p.contains("String")) return std::make_shared<Regex>(p["String"].get<std::string>(), true, where);
  if (p.contains("Regex")) return std::make_shared<Regex>(p["Regex"].get<std::string>(), false, where);
  fail("{}: pattern {} must be {{\"String\":..}} or {{\"Regex\":..}}", where, p.dump());
}

Normalizer Normalizer::from_json(const nlohmann::json& j, const std::string& where) {
  Normalizer n;
  if (!j.is_null()) add(n.steps_, j, where);
  return n;
}

void Normalizer::add(std::vector<Step>& steps, const nlohmann::json& j, const std::string& where) {
  std::string type = j.at("type").get<std::string>();
  if (type == "Sequence") {
    for (const auto& sub : j.at("normalizers")) add(steps, sub, where);
  } else if (type == "NFC") {
    steps.push_back({Kind::NFC});
  } else if (type == "NFD") {
    steps.push_back({Kind::NFD});
  } else if (type == "NFKC") {
    steps.push_back({Kind::NFKC});
  } else if (type == "NFKD") {
    steps.push_back({Kind::NFKD});
  } else if (type == "Lowercase") {
    steps.push_back({Kind::LOWERCASE});
  } else if (type == "Replace") {
    steps.push_back({.kind = Kind::REPLACE,
                     .pattern = pattern_from_json(j.at("pattern"), where),
                     .content = j.at("content").get<std::string>()});
  } else if (type == "Prepend") {
    steps.push_back({.kind = Kind::PREPEND, .content = j.at("prepend").get<std::string>()});
  } else if (type == "Strip") {
    steps.push_back({.kind = Kind::STRIP,
                     .left = j.value("strip_left", false),
                     .right = j.value("strip_right", false)});
  } else {
    fail("{}: normalizer type '{}' is not supported (supported: Sequence, NFC, NFD, NFKC, NFKD, "
         "Lowercase, Replace, Prepend, Strip)",
         where, type);
  }
}

static std::string strip(const std::string& s, bool left, bool right) {
  size_t b = 0, e = s.size();
  if (left) {
    while (b < e) {
      size_t i = b;
      if (!utf8::is_space(utf8::next(s, i))) break;
      b = i;
    }
  }
  if (right) {
    while (e > b) {
      size_t start = e - 1;
      while (start > b && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
      size_t i = start;
      if (!utf8::is_space(utf8::next(s, i))) break;
      e = start;
    }
  }
  return s.substr(b, e - b);
}

std::string Normalizer::apply(std::string s) const {
  for (const auto& st : steps_) {
    switch (st.kind) {
      case Kind::NFC: s = utf8::normalize(s, utf8::NormForm::NFC); break;
      case Kind::NFD: s = utf8::normalize(s, utf8::NormForm::NFD); break;
      case Kind::NFKC: s = utf8::normalize(s, utf8::NormForm::NFKC); break;
      case Kind::NFKD: s = utf8::normalize(s, utf8::NormForm::NFKD); break;
      case Kind::LOWERCASE: {
        auto u = icu::UnicodeString::fromUTF8(s);
        s.clear();
        u.toLower(icu::Locale::getRoot()).toUTF8String(s);
        break;
      }
      case Kind::REPLACE: s = regex_replace(*st.pattern, s, st.content); break;
      case Kind::PREPEND:
        if (!s.empty()) s = st.content + s;
        break;
      case Kind::STRIP: s = strip(s, st.left, st.right); break;
    }
  }
  return s;
}

}  // namespace ft
