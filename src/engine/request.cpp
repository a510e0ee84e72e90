// EventStream and finish-reason names.
#include "engine/request.h"

#include <chrono>

namespace ft {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::STOP: return "stop";
    case FinishReason::LENGTH: return "length";
    case FinishReason::CANCELLED: return "cancelled";
    case FinishReason::ERROR: return "error";
    case FinishReason::NONE: break;
  }
  return "none";
}

void EventStream::push(Event e) {
  {
    std::lock_guard lock(mu_);
    q_.push_back(std::move(e));
  }
  cv_.notify_one();
}

bool EventStream::pop(Event& out, int timeout_ms) {
  std::unique_lock lock(mu_);
  if (!cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return !q_.empty(); }))
    return false;
  out = std::move(q_.front());
  q_.pop_front();
  return true;
}

}  // namespace ft
