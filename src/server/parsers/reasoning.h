// Reasoning parser: <think>…</think> in the output becomes reasoning, the rest content.
#pragma once
#include <string>
#include <string_view>

namespace ft::server {

struct ReasoningDelta {
  std::string reasoning, content;
};

// Streaming: feed() takes any split of the output text. A <think> at the start of the output
// (after at most 16 whitespace bytes, held back meanwhile) opens reasoning; </think> closes it; whitespace around the
// reasoning and right after </think> is trimmed. Output that never closes its <think> is all
// reasoning (it ran out of tokens while thinking).
class ReasoningParser {
 public:
  // start_in_reasoning: the prompt already opened <think> (see prompt_opens_reasoning).
  explicit ReasoningParser(bool start_in_reasoning);
  ReasoningDelta feed(std::string_view delta);
  ReasoningDelta finish();
  bool in_reasoning() const { return mode_ == Mode::REASONING; }

 private:
  enum class Mode { START, REASONING, AFTER, CONTENT };
  Mode mode_;
  bool reasoning_started_ = false;  // a non-space reasoning character was emitted
  std::string buf_;                 // held back: a possible tag prefix or trailing spaces
};

}  // namespace ft::server
