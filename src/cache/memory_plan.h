// The VRAM planner: splits one budget between resident weights, scratch, the KV reserve and the
// expert slot cache, before anything is allocated. A model/budget that cannot work is refused
// with the numbers, never discovered as an out-of-memory later.
#pragma once
#include <cstdint>
#include <string>

namespace ft {

struct MemoryRequest {
  size_t budget = 0;            // bytes the engine may use (--gpu-memory or ratio * free)
  size_t resident_weights = 0;  // attention, norms, routers, embeddings, lm_head, dense FFNs
  size_t scratch = 0;           // activations and workspaces for the largest step
  size_t kv_bytes_per_token = 0;
  int64_t kv_reserve_tokens = 32768;
  size_t expert_bytes = 0;      // one routed expert (all its matrices, as stored)
  int64_t moe_layers = 0, experts = 0;
  int64_t slots_override = -1;  // --moe-cache-size (slots); -1: auto
  double cache_rate = -1;       // --moe-cache-rate (fraction of all experts); -1: auto
};

struct MemoryPlan {
  int64_t expert_slots = 0;     // in [experts, moe_layers * experts]
  bool all_experts_resident = false;
  bool prefill_double_buffer = false;  // >= 2 layers of slots: stream layer l+1 while l runs
  int64_t kv_tokens = 0;
  size_t used = 0;
  std::string summary() const;
};

// Experts take what the KV reserve leaves, unless every expert fits, in which case the KV pool
// gets the rest. Throws ft::Error naming each term when even the minimum does not fit.
MemoryPlan plan_memory(const MemoryRequest& r);

// "8GiB", "512M", "24g", "1.5 GiB" -> bytes; throws ft::Error on anything else.
size_t parse_size(const std::string& s);

}  // namespace ft
