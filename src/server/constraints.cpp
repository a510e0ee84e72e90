// tool_choice enforcement: a byte-level grammar of one tool call, checked token by token.
#include "server/constraints.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>

namespace ft::server {

namespace {
constexpr std::string_view kJsonCloser = "}\n</tool_call>";
constexpr std::string_view kXmlCloser = "</function>\n</tool_call>";
constexpr std::string_view kParamTerm = "\n</parameter>\n";
constexpr std::string_view kHarmonyOpen = "<|channel|>commentary to=functions.",
                           kHarmonyArgs = " <|constrain|>json<|message|>";

const nlohmann::json* tool_properties(const nlohmann::json& tools, const std::string& name) {
  if (!tools.is_array()) return nullptr;
  for (const auto& t : tools) {
    const auto& f = t.contains("function") ? t["function"] : t;
    if (f.is_object() && f.value("name", "") == name && f.contains("parameters") &&
        f["parameters"].is_object() && f["parameters"].contains("properties") &&
        f["parameters"]["properties"].is_object())
      return &f["parameters"]["properties"];
  }
  return nullptr;
}
}  // namespace

const TokenTable& token_table(const Tokenizer& tok) {
  static std::mutex mu;
  static std::map<const Tokenizer*, std::unique_ptr<TokenTable>> tables;
  std::lock_guard lock(mu);
  auto& t = tables[&tok];
  if (!t) {
    t = std::make_unique<TokenTable>();
    t->bytes.resize(tok.vocab_size());
    t->special.resize(tok.vocab_size());
    for (size_t id = 0; id < tok.vocab_size(); ++id) {
      const std::string_view p = tok.piece(static_cast<int32_t>(id));
      if (!p.empty()) t->bytes[id] = tok.decoder().piece(std::string(p), false).bytes;
      t->special[id] = tok.is_special(static_cast<int32_t>(id));
    }
  }
  return *t;
}

// ---- grammar ---------------------------------------------------------------------------------

ToolCallGrammar::ToolCallGrammar(const ToolCallSpec& spec) {
  auto s = std::make_shared<Shared>();
  s->format = spec.format;
  const bool xml = spec.format == ToolFormat::QWEN3_XML;
  std::vector<std::pair<std::string, std::string>> openers;  // (text, name)
  for (const auto& name : spec.names) {
    if (spec.format == ToolFormat::HARMONY) {
      openers.emplace_back(std::string(kHarmonyOpen) + name + std::string(kHarmonyArgs), name);
      continue;
    }
    std::string o = spec.close_reasoning ? "</think>\n\n<tool_call>\n" : "<tool_call>\n";
    o += xml ? "<function=" + name + ">\n"
             : "{\"name\": " + nlohmann::json(name).dump() + ", \"arguments\": ";
    openers.emplace_back(std::move(o), name);
  }
  std::sort(openers.begin(), openers.end());
  openers.erase(std::unique(openers.begin(), openers.end()), openers.end());
  for (auto& [text, name] : openers) {
    s->openers.alts.push_back(text);
    s->opener_names.push_back(name);
    if (!xml) continue;
    Literals items;
    items.alts.emplace_back(kXmlCloser);
    if (const auto* props = tool_properties(spec.tools, name))
      for (const auto& [p, _] : props->items()) items.alts.push_back("<parameter=" + p + ">\n");
    std::sort(items.alts.begin(), items.alts.end());
    s->items.push_back(std::move(items));
  }
  s->closer.alts.emplace_back(kJsonCloser);
  g_ = std::move(s);
  lit_start(&g_->openers);
}

bool ToolCallGrammar::lit_feed(unsigned char c) {
  const auto& a = lit_->alts;
  auto has = [&](uint32_t i) {
    return a[i].size() > pos_ && static_cast<unsigned char>(a[i][pos_]) == c;
  };
  uint32_t lo = lo_;
  while (lo < hi_ && !has(lo)) ++lo;
  if (lo == hi_) return false;
  uint32_t hi = lo;
  while (hi < hi_ && has(hi)) ++hi;
  lo_ = lo, hi_ = hi, ++pos_;
  if (a[lo_].size() == pos_) lit_done();
  return true;
}

void ToolCallGrammar::lit_done() {
  switch (phase_) {
    case Phase::OPEN:
      chosen_ = static_cast<int32_t>(lo_);
      if (g_->format == ToolFormat::QWEN3_XML) {
        phase_ = Phase::ITEM;
        lit_start(&g_->items[chosen_]);
      } else {
        phase_ = Phase::ARGS;
        json_ = JsonPrefix(true);
      }
      break;
    case Phase::ITEM:
      if (lit_->alts[lo_] == kXmlCloser) {
        phase_ = Phase::END;
      } else {
        phase_ = Phase::VALUE;
        nl_ = true;  // the parameter tag ended with '\n'
      }
      break;
    default: phase_ = Phase::END; break;
  }
}

bool ToolCallGrammar::feed(unsigned char c) {
  switch (phase_) {
    case Phase::OPEN:
    case Phase::ITEM:
    case Phase::CLOSE:
      return lit_feed(c);
    case Phase::ARGS: {
      const bool ws = !json_.in_string() && (c == ' ' || c == '\n' || c == '\t' || c == '\r');
      if (ws && (ws_ || !json_.started())) return false;
      if (!json_.feed(c)) return false;
      ws_ = ws;
      if (json_.ended() && g_->format == ToolFormat::HARMONY) {
        phase_ = Phase::END;  // the caller's stop token (<|call|>) closes the message
      } else if (json_.ended()) {
        phase_ = Phase::CLOSE;
        lit_start(&g_->closer);
      }
      return true;
    }
    case Phase::VALUE:
      if (c == '<') {
        if (!nl_) return false;
        phase_ = Phase::TERM;
        term_ = 2;
        return true;
      }
      nl_ = c == '\n';
      return true;
    case Phase::TERM:
      if (c != static_cast<unsigned char>(kParamTerm[term_])) return false;
      if (++term_ == kParamTerm.size()) {
        phase_ = Phase::ITEM;
        lit_start(&g_->items[chosen_]);
      }
      return true;
    case Phase::END:
      return false;
  }
  return false;
}

bool ToolCallGrammar::feed(std::string_view s) {
  for (char c : s)
    if (!feed(static_cast<unsigned char>(c))) return false;
  return true;
}

std::string ToolCallGrammar::forced() const {
  switch (phase_) {
    case Phase::OPEN:
    case Phase::ITEM:
    case Phase::CLOSE: {
      const auto& a = lit_->alts;
      std::string_view p = std::string_view(a[lo_]).substr(pos_);
      for (uint32_t i = lo_ + 1; i < hi_; ++i) {
        size_t n = 0;
        while (n < p.size() && pos_ + n < a[i].size() && a[i][pos_ + n] == p[n]) ++n;
        p = p.substr(0, n);
      }
      return std::string(p);
    }
    case Phase::TERM: return std::string(kParamTerm.substr(term_));
    default: return {};
  }
}

std::string ToolCallGrammar::completion() const {
  const bool xml = g_->format == ToolFormat::QWEN3_XML;
  const std::string closer = g_->format == ToolFormat::HARMONY ? "" : std::string(kJsonCloser);
  const std::string rest = phase_ == Phase::OPEN || phase_ == Phase::ITEM || phase_ == Phase::CLOSE
                               ? lit_->alts[lo_].substr(pos_) : "";
  switch (phase_) {
    case Phase::OPEN: return rest + (xml ? std::string(kXmlCloser) : "{}" + closer);
    case Phase::ARGS: return json_.completion() + closer;
    case Phase::CLOSE: return rest;
    case Phase::ITEM:
      for (uint32_t i = lo_; i < hi_; ++i)
        if (lit_->alts[i] == kXmlCloser) return lit_->alts[i].substr(pos_);
      return rest + std::string(kParamTerm.substr(1)) + std::string(kXmlCloser);
    case Phase::VALUE:
      return std::string(kParamTerm.substr(nl_ ? 1 : 0)) + std::string(kXmlCloser);
    case Phase::TERM: return std::string(kParamTerm.substr(term_)) + std::string(kXmlCloser);
    case Phase::END: return {};
  }
  return {};
}

// ---- processor -------------------------------------------------------------------------------

namespace {
class ToolCallConstraint final : public LogitsProcessor {
 public:
  ToolCallConstraint(const Tokenizer& tok, const ToolCallSpec& spec, std::vector<int32_t> eos,
                     int64_t max_tokens)
      : tok_(tok), table_(token_table(tok)), g_(spec), eos_(std::move(eos)),
        max_tokens_(max_tokens), harmony_(spec.format == ToolFormat::HARMONY) {}

  void process(std::span<float> logits, std::span<const int32_t> generated) override {
    for (; consumed_ < generated.size(); ++consumed_) {
      const int32_t id = generated[consumed_];
      ToolCallGrammar next = g_;
      if (!usable(id) || !next.feed(table_.bytes[id])) broken_ = true;  // cannot happen
      else g_ = next;
    }
    if (broken_ || g_.at_end()) {
      if (!eos_.empty()) keep_only(logits, eos_);
      return;
    }
    // Fixed text (a literal, or the closing path when the budget runs out): its first token.
    std::string text = g_.forced();
    const int64_t left = max_tokens_ - static_cast<int64_t>(generated.size());
    if (text.empty()) {
      std::string c = g_.completion();
      if (left <= static_cast<int64_t>(c.size()) + 1) text = std::move(c);
    }
    if (!text.empty()) {
      if (int32_t id = first_token(text); id >= 0) return keep_only(logits, {id});
    }
    // Free text: the best candidates first; the whole vocabulary only when none fits.
    const int32_t n = static_cast<int32_t>(std::min(logits.size(), table_.bytes.size()));
    order_.resize(n);
    for (int32_t i = 0; i < n; ++i) order_[i] = i;
    const int32_t k = std::min<int32_t>(64, n);
    std::partial_sort(order_.begin(), order_.begin() + k, order_.end(),
                      [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
    allowed_.clear();
    for (int32_t i = 0; i < k; ++i)
      if (allows(order_[i])) allowed_.push_back(order_[i]);
    if (allowed_.empty())
      for (int32_t id = 0; id < n; ++id)
        if (allows(id)) allowed_.push_back(id);
    if (allowed_.empty()) {  // only the closing path is left
      if (int32_t id = first_token(g_.completion()); id >= 0) allowed_.push_back(id);
    }
    if (!allowed_.empty()) keep_only(logits, allowed_);
  }

 private:
  // Special tokens never, except Harmony's in its fixed text (<|channel|>, <|message|>, …).
  bool usable(int32_t id) const {
    return id >= 0 && static_cast<size_t>(id) < table_.bytes.size() &&
           (!table_.special[id] || (harmony_ && g_.in_literal())) && !table_.bytes[id].empty();
  }
  bool allows(int32_t id) const {
    if (!usable(id)) return false;
    ToolCallGrammar g = g_;
    return g.feed(table_.bytes[id]);
  }
  // The token that starts `text` as the tokenizer would write it, else the longest one.
  int32_t first_token(const std::string& text) const {
    const auto ids = tok_.encode(text, false);
    if (!ids.empty() && usable(ids[0]) && text.starts_with(table_.bytes[ids[0]]) && allows(ids[0]))
      return ids[0];
    int32_t best = -1;
    for (int32_t id = 0; id < static_cast<int32_t>(table_.bytes.size()); ++id)
      if (usable(id) && text.starts_with(table_.bytes[id]) &&
          (best < 0 || table_.bytes[id].size() > table_.bytes[best].size()) && allows(id))
        best = id;
    return best;
  }
  static void keep_only(std::span<float> logits, const std::vector<int32_t>& ids) {
    std::vector<std::pair<int32_t, float>> keep;
    for (int32_t id : ids)
      if (id >= 0 && static_cast<size_t>(id) < logits.size()) keep.emplace_back(id, logits[id]);
    if (keep.empty()) return;
    std::fill(logits.begin(), logits.end(), -INFINITY);
    for (auto [id, l] : keep) logits[id] = std::isfinite(l) ? l : 0.f;
  }

  const Tokenizer& tok_;
  const TokenTable& table_;
  ToolCallGrammar g_;
  std::vector<int32_t> eos_;
  int64_t max_tokens_;
  size_t consumed_ = 0;
  bool harmony_;
  bool broken_ = false;
  std::vector<int32_t> order_, allowed_;  // scratch
};
}  // namespace

std::shared_ptr<LogitsProcessor> make_tool_call_constraint(const Tokenizer& tok,
                                                           const ToolCallSpec& spec,
                                                           std::vector<int32_t> eos_ids,
                                                           int64_t max_tokens) {
  return std::make_shared<ToolCallConstraint>(tok, spec, std::move(eos_ids), max_tokens);
}

}  // namespace ft::server
