// Reasoning parser: a streaming split of <think>…</think> from the content.
#include "server/parsers/reasoning.h"

#include "server/parsers/parsers.h"

namespace ft::server {

namespace {
constexpr std::string_view kOpen = "<think>", kClose = "</think>";
constexpr size_t kMaxLeadingSpace = 16;  // more blank output before <think> is content
bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
void lstrip(std::string& s) {
  size_t i = 0;
  while (i < s.size() && is_space(s[i])) ++i;
  s.erase(0, i);
}
size_t rtrim_len(std::string_view s) {
  size_t n = s.size();
  while (n > 0 && is_space(s[n - 1])) --n;
  return n;
}
}  // namespace

ReasoningParser::ReasoningParser(bool start_in_reasoning)
    : mode_(start_in_reasoning ? Mode::REASONING : Mode::START) {}

ReasoningDelta ReasoningParser::feed(std::string_view delta) {
  buf_ += delta;
  ReasoningDelta out;
  for (;;) {
    switch (mode_) {
      case Mode::START: {
        size_t i = 0;
        while (i < buf_.size() && is_space(buf_[i])) ++i;
        const std::string_view s = std::string_view(buf_).substr(i);
        if (s.empty() && i <= kMaxLeadingSpace) return out;
        if (s.starts_with(kOpen)) {
          buf_.erase(0, i + kOpen.size());
          mode_ = Mode::REASONING;
          continue;
        }
        if (kOpen.starts_with(s)) return out;  // maybe a split <think>
        mode_ = Mode::CONTENT;
        continue;
      }
      case Mode::REASONING: {
        if (!reasoning_started_) lstrip(buf_);
        const size_t p = buf_.find(kClose);
        if (p != std::string::npos) {
          out.reasoning.append(buf_, 0, rtrim_len(std::string_view(buf_).substr(0, p)));
          buf_.erase(0, p + kClose.size());
          mode_ = Mode::AFTER;
          continue;
        }
        // Hold back a possible "</think>" start and trailing spaces (trimmed if it closes).
        const size_t cut = rtrim_len(
            std::string_view(buf_).substr(0, buf_.size() - partial_tag_len(buf_, kClose)));
        if (cut > 0) reasoning_started_ = true;
        out.reasoning.append(buf_, 0, cut);
        buf_.erase(0, cut);
        return out;
      }
      case Mode::AFTER:
        lstrip(buf_);
        if (buf_.empty()) return out;
        mode_ = Mode::CONTENT;
        continue;
      case Mode::CONTENT:
        out.content += buf_;
        buf_.clear();
        return out;
    }
  }
}

ReasoningDelta ReasoningParser::finish() {
  ReasoningDelta out;
  if (mode_ == Mode::START || mode_ == Mode::CONTENT) out.content = std::move(buf_);
  if (mode_ == Mode::REASONING) {
    if (!reasoning_started_) lstrip(buf_);
    out.reasoning = buf_.substr(0, rtrim_len(buf_));
  }
  buf_.clear();
  return out;
}

}  // namespace ft::server
