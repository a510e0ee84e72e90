// Pre-tokenizer pipeline: each step cuts or rewrites a word and hands the pieces to the next.
#include "tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "base/error.h"

namespace ft {

std::shared_ptr<Regex> pattern_from_json(const nlohmann::json& p, const std::string& where);

namespace {

// GPT-2's split pattern, used by ByteLevel when use_regex is true.
constexpr const char* kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

struct Segment {
  size_t b, e;
  bool match;
};

}  // namespace

PreTokenizer PreTokenizer::from_json(const nlohmann::json& j, const std::string& where) {
  PreTokenizer p;
  if (!j.is_null()) p.add(j, where);
  return p;
}

void PreTokenizer::add(const nlohmann::json& j, const std::string& where) {
  std::string type = j.at("type").get<std::string>();
  auto behavior_of = [&](const std::string& b) {
    if (b == "Removed") return Behavior::REMOVED;
    if (b == "Isolated") return Behavior::ISOLATED;
    if (b == "MergedWithPrevious") return Behavior::MERGED_WITH_PREVIOUS;
    if (b == "MergedWithNext") return Behavior::MERGED_WITH_NEXT;
    if (b == "Contiguous") return Behavior::CONTIGUOUS;
    fail("{}: split behavior '{}' is not supported", where, b);
  };
  auto regex = [&](const std::string& p) { return std::make_shared<Regex>(p, false, where); };
  if (type == "Sequence") {
    for (const auto& sub : j.at("pretokenizers")) add(sub, where);
  } else if (type == "Split") {
    steps_.push_back({.kind = Kind::SPLIT,
                      .pattern = pattern_from_json(j.at("pattern"), where),
                      .behavior = behavior_of(j.at("behavior").get<std::string>()),
                      .invert = j.value("invert", false)});
  } else if (type == "ByteLevel") {
    byte_level_ = true;
    steps_.push_back({.kind = Kind::BYTE_LEVEL,
                      .pattern = j.value("use_regex", true) ? regex(kGpt2Pattern) : nullptr,
                      .add_prefix_space = j.value("add_prefix_space", true)});
  } else if (type == "Digits") {
    steps_.push_back({.kind = Kind::SPLIT,
                      .pattern = regex(j.value("individual_digits", false) ? "\\p{N}" : "\\p{N}+")});
  } else if (type == "Metaspace") {
    std::string scheme = j.value("prepend_scheme", "");
    if (scheme.empty()) scheme = j.value("add_prefix_space", true) ? "always" : "never";
    steps_.push_back({.kind = Kind::METASPACE,
                      .replacement = j.value("replacement", "\u2581"),
                      .prepend_scheme = scheme,
                      .split = j.value("split", true)});
  } else if (type == "Whitespace") {
    steps_.push_back({.kind = Kind::SPLIT,
                      .pattern = regex("\\w+|[^\\w\\s]+"),
                      .behavior = Behavior::REMOVED,
                      .invert = true});
  } else if (type == "WhitespaceSplit") {
    steps_.push_back(
        {.kind = Kind::SPLIT, .pattern = regex("\\s+"), .behavior = Behavior::REMOVED});
  } else if (type == "Punctuation") {
    steps_.push_back({.kind = Kind::SPLIT,
                      .pattern = regex("\\p{P}"),
                      .behavior = behavior_of(j.value("behavior", "Isolated"))});
  } else {
    fail("{}: pre_tokenizer type '{}' is not supported (supported: Sequence, Split, ByteLevel, "
         "Digits, Metaspace, Whitespace, WhitespaceSplit, Punctuation)",
         where, type);
  }
}

void PreTokenizer::run(std::string_view text, bool first, const Emit& emit) const {
  if (text.empty()) return;
  run_step(0, text, first, emit);
}

void PreTokenizer::run_step(size_t k, std::string_view text, bool first, const Emit& emit) const {
  if (k == steps_.size()) {
    if (!text.empty()) emit(text);
    return;
  }
  const Step& st = steps_[k];
  switch (st.kind) {
    case Kind::SPLIT: split(st, k, text, first, emit); return;
    case Kind::BYTE_LEVEL: {
      std::string prefixed;
      if (st.add_prefix_space && text.front() != ' ') {
        prefixed.reserve(text.size() + 1);
        prefixed += ' ';
        prefixed += text;
        text = prefixed;
      }
      if (st.pattern) {
        split(st, k, text, first, emit);
      } else {
        run_step(k + 1, text, first, emit);
      }
      return;
    }
    case Kind::METASPACE: {
      std::string s;
      bool prepend = st.prepend_scheme == "always" || (st.prepend_scheme == "first" && first);
      if (prepend && text.substr(0, st.replacement.size()) != st.replacement) s = st.replacement;
      for (char c : text) {
        if (c == ' ') {
          s += st.replacement;
        } else {
          s += c;
        }
      }
      if (!st.split) {
        run_step(k + 1, s, first, emit);
        return;
      }
      // Split before each replacement char (MergedWithNext).
      size_t start = 0;
      for (size_t at = s.find(st.replacement, 1); at != std::string::npos;
           at = s.find(st.replacement, at + 1)) {
        run_step(k + 1, std::string_view(s).substr(start, at - start), first && start == 0, emit);
        start = at;
      }
      run_step(k + 1, std::string_view(s).substr(start), first && start == 0, emit);
      return;
    }
  }
}

void PreTokenizer::split(const Step& st, size_t k, std::string_view text, bool first,
                         const Emit& emit) const {
  auto next = [&](size_t b, size_t e) {
    if (e > b) run_step(k + 1, text.substr(b, e - b), first && b == 0, emit);
  };
  if (st.behavior == Behavior::ISOLATED && !st.invert) {  // hot path: no segment list
    size_t prev = 0;
    st.pattern->for_each_match(text, [&](size_t b, size_t e) {
      next(prev, b);
      next(b, e);
      prev = e;
    });
    next(prev, text.size());
    return;
  }
  std::vector<Segment> segs;
  size_t prev = 0;
  st.pattern->for_each_match(text, [&](size_t b, size_t e) {
    if (b != prev) segs.push_back({prev, b, st.invert});
    segs.push_back({b, e, !st.invert});
    prev = e;
  });
  if (prev != text.size()) segs.push_back({prev, text.size(), st.invert});

  std::vector<Segment> out;
  bool prev_match = false;
  switch (st.behavior) {
    case Behavior::REMOVED:
      for (auto& s : segs)
        if (!s.match) out.push_back(s);
      break;
    case Behavior::ISOLATED: out = segs; break;
    case Behavior::MERGED_WITH_PREVIOUS:
      for (auto& s : segs) {
        if (s.match && !prev_match && !out.empty()) {
          out.back().e = s.e;
        } else {
          out.push_back(s);
        }
        prev_match = s.match;
      }
      break;
    case Behavior::MERGED_WITH_NEXT:
      for (auto it = segs.rbegin(); it != segs.rend(); ++it) {
        if (it->match && !prev_match && !out.empty()) {
          out.back().b = it->b;
        } else {
          out.push_back(*it);
        }
        prev_match = it->match;
      }
      std::reverse(out.begin(), out.end());
      break;
    case Behavior::CONTIGUOUS:
      for (size_t i = 0; i < segs.size(); ++i) {
        if (i > 0 && segs[i].match == prev_match) {
          out.back().e = segs[i].e;
        } else {
          out.push_back(segs[i]);
        }
        prev_match = segs[i].match;
      }
      break;
  }
  for (auto& s : out) next(s.b, s.e);
}

}  // namespace ft
