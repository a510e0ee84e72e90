// Decoder chain: token strings back to text, whole-list and per-token (streaming) forms.
#include "tokenizer/decoder.h"

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/unicode.h"

namespace ft {

std::shared_ptr<Regex> pattern_from_json(const nlohmann::json& p, const std::string& where);

namespace {

// ByteLevel: each char maps back to its byte; a token with any char outside the alphabet
// (an added token such as <｜tool▁sep｜>) keeps its UTF-8 bytes, as HF does.
void byte_level_bytes(const std::string& token, std::string& out) {
  size_t mark = out.size();
  for (size_t i = 0; i < token.size();) {
    int b = utf8::char_to_byte(utf8::next(token, i));
    if (b < 0) {
      out.resize(mark);
      out += token;
      return;
    }
    out.push_back(static_cast<char>(b));
  }
}

// "<0xAB>" -> 0xAB, else -1.
int fallback_byte(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

// Strip up to `start` leading and `stop` trailing copies of char c (a whole UTF-8 char).
std::string strip_char(const std::string& t, const std::string& c, size_t start, size_t stop) {
  size_t b = 0, e = t.size();
  for (size_t n = 0; n < start && t.compare(b, c.size(), c) == 0 && b < e; ++n) b += c.size();
  for (size_t n = 0; n < stop && e >= b + c.size() && t.compare(e - c.size(), c.size(), c) == 0;
       ++n)
    e -= c.size();
  return t.substr(b, e - b);
}

}  // namespace

Decoder Decoder::from_json(const nlohmann::json& j, const std::string& where) {
  Decoder d;
  if (!j.is_null()) {
    d.none_ = false;
    d.add(j, where);
  }
  return d;
}

void Decoder::add(const nlohmann::json& j, const std::string& where) {
  std::string type = j.at("type").get<std::string>();
  if (type == "Sequence") {
    for (const auto& sub : j.at("decoders")) add(sub, where);
  } else if (type == "ByteLevel") {
    steps_.push_back({.kind = Kind::BYTE_LEVEL});
  } else if (type == "Metaspace") {
    std::string scheme = j.value("prepend_scheme", "");
    bool prepend = scheme.empty() ? j.value("add_prefix_space", true) : scheme != "never";
    std::string rep = j.value("replacement", "\u2581");
    steps_.push_back({.kind = Kind::METASPACE,
                      .pattern = std::make_shared<Regex>(rep, true, where),
                      .content = rep,
                      .prepend = prepend});
  } else if (type == "Replace") {
    steps_.push_back({.kind = Kind::REPLACE,
                      .pattern = pattern_from_json(j.at("pattern"), where),
                      .content = j.at("content").get<std::string>()});
  } else if (type == "ByteFallback") {
    steps_.push_back({.kind = Kind::BYTE_FALLBACK});
    repair_ = Repair::PER_BYTE;
  } else if (type == "Fuse") {
    steps_.push_back({.kind = Kind::FUSE});
  } else if (type == "Strip") {
    steps_.push_back({.kind = Kind::STRIP,
                      .content = j.at("content").get<std::string>(),
                      .start = j.value("start", size_t(0)),
                      .stop = j.value("stop", size_t(0))});
  } else {
    fail("{}: decoder type '{}' is not supported (supported: Sequence, ByteLevel, Metaspace, "
         "Replace, ByteFallback, Fuse, Strip)",
         where, type);
  }
}

std::string Decoder::decode(std::vector<std::string> tokens) const {
  if (none_) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i) out += ' ';
      out += tokens[i];
    }
    return out;
  }
  for (const Step& st : steps_) {
    switch (st.kind) {
      case Kind::BYTE_LEVEL: {
        std::string bytes;
        for (const auto& t : tokens) byte_level_bytes(t, bytes);
        tokens.assign(1, utf8::lossy(bytes));
        break;
      }
      case Kind::METASPACE:
        for (size_t i = 0; i < tokens.size(); ++i) {
          std::string t = regex_replace(*st.pattern, tokens[i], " ");
          if (i == 0 && st.prepend && !t.empty() && t[0] == ' ') t.erase(0, 1);
          tokens[i] = std::move(t);
        }
        break;
      case Kind::REPLACE:
        for (auto& t : tokens) t = regex_replace(*st.pattern, t, st.content);
        break;
      case Kind::BYTE_FALLBACK: {
        std::vector<std::string> out;
        std::string run;
        auto flush = [&] {
          if (run.empty()) return;
          if (utf8::is_valid(run)) {
            out.push_back(run);
          } else {
            for (size_t k = 0; k < run.size(); ++k) out.push_back("\xEF\xBF\xBD");
          }
          run.clear();
        };
        for (auto& t : tokens) {
          int b = fallback_byte(t);
          if (b >= 0) {
            run.push_back(static_cast<char>(b));
          } else {
            flush();
            out.push_back(std::move(t));
          }
        }
        flush();
        tokens = std::move(out);
        break;
      }
      case Kind::FUSE: {
        std::string all;
        for (const auto& t : tokens) all += t;
        tokens.assign(1, std::move(all));
        break;
      }
      case Kind::STRIP:
        for (auto& t : tokens) t = strip_char(t, st.content, st.start, st.stop);
        break;
    }
  }
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

Decoder::Piece Decoder::piece(const std::string& token, bool first) const {
  Piece p{token, false};
  if (none_) {
    if (!first) p.bytes.insert(0, " ");
    return p;
  }
  bool fused = false;
  for (const Step& st : steps_) {
    switch (st.kind) {
      case Kind::BYTE_LEVEL: {
        std::string bytes;
        byte_level_bytes(p.bytes, bytes);
        p.bytes = std::move(bytes);
        fused = true;  // ByteLevel emits one joined string
        break;
      }
      case Kind::METASPACE: {
        std::string t = regex_replace(*st.pattern, p.bytes, " ");
        if (first && st.prepend && !t.empty() && t[0] == ' ') t.erase(0, 1);
        p.bytes = std::move(t);
        break;
      }
      case Kind::REPLACE:
        if (!p.byte_token) p.bytes = regex_replace(*st.pattern, p.bytes, st.content);
        break;
      case Kind::BYTE_FALLBACK:
        if (int b = fallback_byte(p.bytes); b >= 0) {
          p.bytes.assign(1, static_cast<char>(b));
          p.byte_token = true;
        }
        break;
      case Kind::FUSE: fused = true; break;
      case Kind::STRIP:
        // After a Fuse the text is one string: only its start (the first token) is stripped;
        // a trailing strip cannot be known while streaming and is left to the final decode.
        if (!fused) {
          p.bytes = strip_char(p.bytes, st.content, st.start, st.stop);
        } else if (first) {
          p.bytes = strip_char(p.bytes, st.content, st.start, 0);
        }
        break;
    }
  }
  return p;
}

}  // namespace ft
