// A generation request as the engine sees it (token ids in, events out) and the thread-safe
// event stream between the engine thread and the HTTP thread that serves the request.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/sampler.h"

namespace ft {

enum class FinishReason { NONE, STOP, LENGTH, CANCELLED, ERROR };
const char* finish_reason_name(FinishReason r);  // "stop", "length", "cancelled", "error"

struct Usage {
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
};

// Log-probabilities of one generated token: the chosen one and the top alternatives.
struct TokenLogprobs {
  int32_t id;
  float logprob;
  std::vector<std::pair<int32_t, float>> top;  // best first
};

struct Event {
  enum class Kind { TEXT, DONE };
  Kind kind = Kind::TEXT;
  // TEXT: new text (valid UTF-8; stop strings never appear in it) and the ids behind it.
  std::string text;
  std::vector<int32_t> ids;
  std::vector<TokenLogprobs> logprobs;  // one per id when the request asked for logprobs
  // DONE: why generation ended, which stop string or id matched, the token counts.
  FinishReason finish = FinishReason::NONE;
  std::string matched_stop;
  std::optional<int32_t> matched_stop_id;
  Usage usage;
  std::string error;  // FinishReason::ERROR
};

// Single-producer (engine) / single-consumer (HTTP thread) queue of events.
class EventStream {
 public:
  void push(Event e);
  // Waits up to timeout_ms for an event; false on timeout.
  bool pop(Event& out, int timeout_ms);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Event> q_;
};

// A constraint on the next token (tool_choice enforcement, grammars): called on the engine
// thread before sampling with the step's logits and the ids generated so far; it masks logits
// (e.g. to -INFINITY) to forbid tokens. It must leave at least one token allowed.
class LogitsProcessor {
 public:
  virtual ~LogitsProcessor() = default;
  virtual void process(std::span<float> logits, std::span<const int32_t> generated) = 0;
};

struct Request {
  std::vector<int32_t> prompt;
  int64_t max_tokens = 256;  // new tokens
  SamplingParams sampling;
  float presence_penalty = 0.f, frequency_penalty = 0.f;  // OpenAI semantics (additive)
  float repetition_penalty = 1.f;                          // HF semantics (multiplicative)
  std::vector<std::string> stop;    // stop strings, excluded from the output
  std::vector<int32_t> stop_ids;    // extra stop tokens (the model's eos set is always used
  bool ignore_eos = false;          //   unless ignore_eos)
  int top_logprobs = -1;            // -1: no logprobs; 0..20 alternatives per token
  bool skip_special = true;         // drop special tokens from the text
  std::string label;                // for logs and /v1/requests (e.g. "chat.completions")
  std::shared_ptr<LogitsProcessor> processor;  // optional constraint, applied after penalties

  EventStream events;
  std::atomic<bool> cancelled{false};  // set by the HTTP thread when the client goes away
  int64_t id = 0;                      // assigned by Engine::submit
};

}  // namespace ft
