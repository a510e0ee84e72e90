// plan_memory(): the budget arithmetic behind --gpu-memory / --moe-cache-size / --kv-reserve.
#include "cache/memory_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>

#include "base/error.h"

namespace ft {

namespace {
std::string gib(size_t b) { return fmt::format("{:.2f} GiB", b / double(1ull << 30)); }
}  // namespace

std::string MemoryPlan::summary() const {
  return fmt::format("{} expert slots{}{}, KV {} tokens, {} in all", expert_slots,
                     all_experts_resident ? " (all experts resident)" : "",
                     prefill_double_buffer ? ", double-buffered prefill" : "", kv_tokens, gib(used));
}

MemoryPlan plan_memory(const MemoryRequest& r) {
  const int64_t total_experts = r.moe_layers * r.experts;
  const size_t fixed = r.resident_weights + r.scratch;
  const size_t kv_reserve = r.kv_bytes_per_token * static_cast<size_t>(r.kv_reserve_tokens);
  const int64_t min_slots = total_experts > 0 ? r.experts : 0;
  auto refuse = [&](const std::string& why) {
    fail("the model does not fit the memory budget of {}: resident weights {} + scratch {} + KV "
         "reserve {} ({} tokens) + at least {} expert slots x {} = {} ({}). Give more memory "
         "(--gpu-memory), lower --kv-reserve-tokens, or use a smaller quantization",
         gib(r.budget), gib(r.resident_weights), gib(r.scratch), gib(kv_reserve),
         r.kv_reserve_tokens, min_slots, gib(r.expert_bytes),
         gib(fixed + kv_reserve + min_slots * r.expert_bytes), why);
  };
  if (fixed + kv_reserve + static_cast<size_t>(min_slots) * r.expert_bytes > r.budget)
    refuse("short by " + gib(fixed + kv_reserve + min_slots * r.expert_bytes - r.budget));
  const size_t room = r.budget - fixed - kv_reserve;
  int64_t slots = total_experts;
  if (r.slots_override >= 0) {
    slots = r.slots_override;
  } else if (r.cache_rate >= 0) {
    slots = static_cast<int64_t>(std::ceil(total_experts * std::min(1.0, r.cache_rate)));
  } else if (r.expert_bytes > 0) {
    slots = std::min<int64_t>(total_experts, static_cast<int64_t>(room / r.expert_bytes));
  }
  if (total_experts > 0 && (slots < min_slots || slots > total_experts))
    fail("--moe-cache-size/--moe-cache-rate gives {} expert slots; it must be between {} (one "
         "layer) and {} (all experts)", slots, min_slots, total_experts);
  if (static_cast<size_t>(slots) * r.expert_bytes > room)
    refuse(fmt::format("{} requested slots need {}", slots, gib(slots * r.expert_bytes)));
  MemoryPlan p;
  p.expert_slots = slots;
  p.all_experts_resident = slots == total_experts;
  p.prefill_double_buffer = total_experts > 0 && slots >= 2 * r.experts && !p.all_experts_resident;
  const size_t left = r.budget - fixed - static_cast<size_t>(slots) * r.expert_bytes;
  p.kv_tokens = r.kv_bytes_per_token ? static_cast<int64_t>(left / r.kv_bytes_per_token) : 0;
  if (!p.all_experts_resident && r.slots_override < 0 && r.cache_rate < 0)
    p.kv_tokens = r.kv_reserve_tokens;  // experts took the rest
  p.used = fixed + static_cast<size_t>(slots) * r.expert_bytes +
           static_cast<size_t>(p.kv_tokens) * r.kv_bytes_per_token;
  FT_CHECK(p.used <= r.budget, "plan {} over budget {}", p.used, r.budget);
  return p;
}

size_t parse_size(const std::string& s) {
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  if (i == 0) fail("'{}' is not a size (examples: 8GiB, 512MiB, 24g)", s);
  double v = 0;
  try {
    v = std::stod(s.substr(0, i));
  } catch (...) {
    fail("'{}' is not a size (examples: 8GiB, 512MiB, 24g)", s);
  }
  std::string unit;
  for (char ch : s.substr(i))
    if (ch != ' ') unit += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  double mul = 0;
  if (unit.empty() || unit == "b") mul = 1;
  else if (unit == "k" || unit == "kb" || unit == "kib") mul = 1024.0;
  else if (unit == "m" || unit == "mb" || unit == "mib") mul = 1024.0 * 1024;
  else if (unit == "g" || unit == "gb" || unit == "gib") mul = 1024.0 * 1024 * 1024;
  else if (unit == "t" || unit == "tb" || unit == "tib") mul = 1024.0 * 1024 * 1024 * 1024;
  else fail("'{}' has an unknown unit '{}' (use K, M, G or T)", s, unit);
  return static_cast<size_t>(v * mul);
}

}  // namespace ft
