// Harmony output parser (see harmony.h): a streaming split of gpt-oss channel messages.
#include "server/parsers/harmony.h"

#include <algorithm>
#include <array>
#include <span>

namespace ft::server {

namespace {
constexpr std::string_view kStart = "<|start|>", kChannel = "<|channel|>", kMessage = "<|message|>",
                           kConstrain = "<|constrain|>", kEnd = "<|end|>", kCall = "<|call|>",
                           kReturn = "<|return|>";
constexpr size_t kMaxHeader = 256;  // a longer header is not one
// What ends a body: a terminator (consumed) or the start of the next header (kept).
constexpr std::array<std::string_view, 5> kBodyEnds = {kEnd, kCall, kReturn, kStart, kChannel};
// Header-only tokens met inside a body (a glitch): dropped, the body goes on.
constexpr std::array<std::string_view, 2> kBodyDropped = {kMessage, kConstrain};

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

// The earliest of `tags` in s: its position and index, or npos.
size_t find_first(std::string_view s, std::span<const std::string_view> tags, size_t* which) {
  size_t best = std::string_view::npos;
  for (size_t i = 0; i < tags.size(); ++i)
    if (size_t p = s.find(tags[i]); p < best) best = p, *which = i;
  return best;
}

// The word after `key` in a header (up to a space or the next special token), or "".
std::string header_field(std::string_view h, std::string_view key) {
  size_t p = h.find(key);
  if (p == std::string_view::npos) return {};
  p += key.size();
  size_t e = p;
  while (e < h.size() && !is_space(h[e]) && h.substr(e, 2) != "<|") ++e;
  return std::string(h.substr(p, e - p));
}

}  // namespace

ToolParseResult HarmonyParser::feed(std::string_view delta) {
  buf_ += delta;
  ToolParseResult out;
  run(out, false);
  return out;
}

ToolParseResult HarmonyParser::finish() {
  ToolParseResult out;
  run(out, true);
  return out;
}

void HarmonyParser::run(ToolParseResult& out, bool final) {
  for (;;) {
    if (mode_ == Mode::HEADER) {
      size_t i = 0;
      while (i < buf_.size() && is_space(buf_[i])) ++i;
      const std::string_view s = std::string_view(buf_).substr(i);
      if (s.empty()) {
        if (final) buf_.clear();
        return;
      }
      bool header = false, maybe = false;
      for (std::string_view st : {kStart, kChannel, std::string_view("to=")}) {
        header = header || s.starts_with(st);
        maybe = maybe || st.starts_with(s);
      }
      if (!header && maybe && !final) return;  // a split opener
      if (!header) {  // output that ignores the format: content as it comes
        mode_ = Mode::BODY;
        kind_ = Kind::CONTENT;
        gap_ = true;
        continue;
      }
      // Up to <|message|>; a terminator or a second <|start|> first ends a broken header.
      static constexpr std::array<std::string_view, 5> kHeaderEnds = {kMessage, kEnd, kCall,
                                                                      kReturn, kStart};
      size_t which = 0;
      const size_t off = s.starts_with(kStart) ? kStart.size() : 0;
      size_t at = find_first(s.substr(off), kHeaderEnds, &which);
      if (at != std::string_view::npos) at += off;
      const size_t len = at == std::string_view::npos ? s.size() : at;
      if (len > kMaxHeader) {  // not a header after all: content, without special tokens
        // Only the opener is consumed here: the body scan drops the header tokens in the rest
        // and stops at its next <|start|>/<|channel|> whether or not it has arrived yet (so the
        // result does not depend on where the stream was split).
        const size_t opener = s.starts_with(kStart) ? kStart.size()
                              : s.starts_with(kChannel) ? kChannel.size() : 0;
        buf_.erase(0, i + opener);
        mode_ = Mode::BODY;
        kind_ = Kind::CONTENT;
        gap_ = true;
        continue;
      }
      if (at != std::string_view::npos && which == 0) {
        open_message(s.substr(0, at));
        buf_.erase(0, i + at + kMessage.size());
        mode_ = Mode::BODY;
        gap_ = true;
        if (kind_ == Kind::CALL && stream_) out.calls.push_back({next_index_, name_, ""});
        continue;
      }
      if (at != std::string_view::npos) {  // no message: drop the header
        buf_.erase(0, i + at + (kHeaderEnds[which] == kStart ? 0 : kHeaderEnds[which].size()));
        continue;
      }
      if (final) buf_.clear();  // cut off before its message began
      return;
    }
    // BODY
    size_t which = 0, dropped = 0;
    const size_t p = find_first(buf_, kBodyEnds, &which);
    if (const size_t d = find_first(buf_, kBodyDropped, &dropped); d < p) {
      body_text(out, std::string_view(buf_).substr(0, d));
      buf_.erase(0, d + kBodyDropped[dropped].size());
      continue;
    }
    if (p != std::string::npos) {
      body_text(out, std::string_view(buf_).substr(0, p));
      close_message(out);
      const std::string_view tag = kBodyEnds[which];
      buf_.erase(0, p + (tag == kStart || tag == kChannel ? 0 : tag.size()));
      mode_ = Mode::HEADER;
      continue;
    }
    if (final) {
      body_text(out, buf_);
      buf_.clear();
      close_message(out);
      mode_ = Mode::HEADER;
      return;
    }
    size_t hold = 0;
    for (std::string_view t : kBodyEnds) hold = std::max(hold, partial_tag_len(buf_, t));
    for (std::string_view t : kBodyDropped) hold = std::max(hold, partial_tag_len(buf_, t));
    body_text(out, std::string_view(buf_).substr(0, buf_.size() - hold));
    buf_.erase(0, buf_.size() - hold);
    return;
  }
}

void HarmonyParser::open_message(std::string_view h) {
  const std::string recipient = header_field(h, "to="), channel = header_field(h, kChannel);
  name_.clear();
  args_.clear();
  constexpr std::string_view kFunctions = "functions.";
  const bool function = recipient.starts_with(kFunctions) && recipient.size() > kFunctions.size();
  if (function && tools_) {
    kind_ = Kind::CALL;
    name_ = recipient.substr(kFunctions.size());
    json_ = JsonPrefix(true);
    broken_ = false;
  } else if (function) {
    kind_ = Kind::CONTENT;  // no tools offered: the call's text is content
  } else if (channel == "analysis" || !recipient.empty()) {
    kind_ = Kind::REASONING;  // built-in tools (browser, python) are the model's own business
  } else {
    kind_ = Kind::CONTENT;
  }
}

void HarmonyParser::body_text(ToolParseResult& out, std::string_view text) {
  if (text.empty()) return;
  switch (kind_) {
    case Kind::CONTENT:
      if (gap_ && said_content_) out.content += "\n\n";
      out.content += text;
      said_content_ = true;
      break;
    case Kind::REASONING:
      if (gap_ && said_reasoning_) out.reasoning += "\n\n";
      out.reasoning += text;
      said_reasoning_ = true;
      break;
    case Kind::CALL: {
      if (!stream_) {
        args_ += text;
        break;
      }
      if (broken_) break;
      size_t n = 0;
      while (n < text.size() && json_.feed(static_cast<unsigned char>(text[n]))) ++n;
      if (n < text.size()) broken_ = true;
      if (n == 0) break;
      if (!out.calls.empty() && out.calls.back().index == next_index_)
        out.calls.back().arguments.append(text.substr(0, n));
      else
        out.calls.push_back({next_index_, "", std::string(text.substr(0, n))});
      break;
    }
  }
  gap_ = false;
}

void HarmonyParser::close_message(ToolParseResult& out) {
  if (kind_ == Kind::CALL) {
    if (stream_) {
      if (!json_.complete()) {
        const std::string rest = json_.completion();
        if (!out.calls.empty() && out.calls.back().index == next_index_)
          out.calls.back().arguments += rest;
        else
          out.calls.push_back({next_index_, "", rest});
      }
      ++next_index_;
    } else {
      size_t b = 0, e = args_.size();
      while (b < e && is_space(args_[b])) ++b;
      while (e > b && is_space(args_[e - 1])) --e;
      const std::string args = args_.substr(b, e - b);
      if (nlohmann::json::parse(args, nullptr, false).is_object()) {
        out.calls.push_back({next_index_++, name_, args});
      } else {  // not a call after all: its text is content
        kind_ = Kind::CONTENT;
        gap_ = true;
        body_text(out, args_);
      }
    }
  }
  kind_ = Kind::CONTENT;
  gap_ = true;
}

}  // namespace ft::server
