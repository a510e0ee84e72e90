// Tag scanning and call bookkeeping shared by the <tool_call> formats.
#include "server/parsers/tagged_tool.h"

namespace ft::server {

namespace {
constexpr std::string_view kOpen = "<tool_call>", kClose = "</tool_call>";
bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
size_t rtrim_len(std::string_view s) {
  size_t n = s.size();
  while (n > 0 && is_space(s[n - 1])) --n;
  return n;
}
}  // namespace

ToolParseResult TaggedToolParser::feed(std::string_view delta) {
  buf_ += delta;
  ToolParseResult out;
  run(out, false);
  return out;
}

ToolParseResult TaggedToolParser::finish() {
  ToolParseResult out;
  run(out, true);
  return out;
}

void TaggedToolParser::begin_call(std::string name) {
  announced_ = true;
  name_ = std::move(name);
  args_.clear();
  if (stream_) out_->calls.push_back({next_index_, name_, ""});
}

void TaggedToolParser::add_arguments(std::string_view text) {
  if (!stream_) {
    args_ += text;
    return;
  }
  if (!out_->calls.empty() && out_->calls.back().index == next_index_)
    out_->calls.back().arguments += text;
  else
    out_->calls.push_back({next_index_, "", std::string(text)});
}

void TaggedToolParser::end_call() {
  if (!announced_) return;
  if (!stream_) out_->calls.push_back({next_index_, name_, std::move(args_)});
  announced_ = false;
  ++next_index_;
}

void TaggedToolParser::run(ToolParseResult& out, bool final) {
  out_ = &out;
  for (;;) {
    switch (mode_) {
      case Mode::TEXT: {
        if (strip_leading_) {
          size_t i = 0;
          while (i < buf_.size() && is_space(buf_[i])) ++i;
          buf_.erase(0, i);
          if (buf_.empty()) return;
          strip_leading_ = false;
        }
        const size_t p = buf_.find(kOpen);
        if (p != std::string::npos) {
          const size_t keep = rtrim_len(std::string_view(buf_).substr(0, p));
          out.content.append(buf_, 0, keep);
          gap_ = buf_.substr(keep, p - keep);
          buf_.erase(0, p + kOpen.size());
          raw_.clear();
          reset_body();
          mode_ = Mode::BODY;
          continue;
        }
        if (final) {
          out.content += buf_;
          buf_.clear();
          return;
        }
        // Hold back a possible "<tool_call>" start and trailing spaces (dropped before a call).
        const size_t cut = rtrim_len(
            std::string_view(buf_).substr(0, buf_.size() - partial_tag_len(buf_, kOpen)));
        out.content.append(buf_, 0, cut);
        buf_.erase(0, cut);
        return;
      }
      case Mode::BODY: {
        Body b = parse_body(final);
        if (b == Body::NEED_MORE && !final) return;
        if (b == Body::CLOSED) {
          mode_ = Mode::TAIL;
        } else {  // malformed, or unfinished at the end
          mode_ = stream_ && announced_ ? Mode::TAIL : Mode::BLOCK;
          if (mode_ == Mode::BLOCK) announced_ = false;
        }
        continue;
      }
      case Mode::TAIL: {  // the call is known; skip to </tool_call>
        const size_t p = buf_.find(kClose);
        if (p != std::string::npos || final) {
          consume(p != std::string::npos ? p + kClose.size() : buf_.size());
          end_call();
          mode_ = Mode::TEXT;
          strip_leading_ = true;
          if (final && p == std::string::npos) return;
          continue;
        }
        consume(buf_.size() - partial_tag_len(buf_, kClose));
        return;
      }
      case Mode::BLOCK: {  // not streamable: decide at </tool_call>
        const size_t p = buf_.find(kClose);
        if (p == std::string::npos && !final) return;
        const bool closed = p != std::string::npos;
        consume(closed ? p : buf_.size());
        std::string name, args;
        if (parse_block(raw_, &name, &args)) {
          strip_leading_ = true;
          out.calls.push_back({next_index_++, std::move(name), std::move(args)});
        } else {
          out.content += gap_ + std::string(kOpen) + raw_ + (closed ? std::string(kClose) : "");
          strip_leading_ = false;
        }
        if (closed) buf_.erase(0, kClose.size());
        mode_ = Mode::TEXT;
        if (!closed) return;
        continue;
      }
    }
  }
}

}  // namespace ft::server
