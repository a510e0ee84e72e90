// Elastic memory (issue #9): validation of a live re-split against the pools' limits and the
// budget, and the pressure policy (free device memory -> shrink or grow target) as pure
// functions, so both are unit-tested without a GPU. The engine's watcher thread applies them.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "engine/runner.h"

namespace ft {

struct ElasticOptions {
  bool on = true;               // --elastic on|off (needs a device or a probe)
  size_t floor_bytes = 0;       // shrink when free memory falls below this (0: 5% of total)
  size_t grow_margin_bytes = 0; // grow only while free > floor + margin (0: max(floor/2, 256 MiB))
  int interval_ms = 250;        // how often free memory is read
  double grow_cooldown_s = 2;   // seconds after any change before a grow
};

// The pool named name, or nullptr.
const PoolInfo* find_pool(const std::vector<PoolInfo>& pools, const std::string& name);

// Throws ft::Error naming the pool and its limits when t asks for a pool that does not exist,
// a size outside [min, max], or more bytes than budget (0: no budget) given used bytes now.
void check_resize_target(const std::vector<PoolInfo>& pools, const ResizeTarget& t,
                         size_t budget, size_t used);

// The sizes the pressure policy grows back to (what the planner or the operator chose).
struct ElasticWant {
  int64_t moe_slots = -1, prefix_tokens = -1;
};

// One decision over the pools in the watched memory (PoolInfo::device). free < floor: shrink the expert cache first, then the prefix-cache KV (never
// the live KV or the state pool), by the deficit plus half the margin. free > floor + margin:
// grow the expert cache, then the prefix KV, back toward want by what the surplus above
// floor + margin holds. Otherwise (or nothing can move): nullopt.
std::optional<ResizeTarget> elastic_decide(size_t free_bytes, size_t floor_bytes,
                                           size_t margin_bytes,
                                           const std::vector<PoolInfo>& pools,
                                           const ElasticWant& want);

// Floor and margin with the defaults resolved against the device's total memory.
size_t elastic_floor(const ElasticOptions& o, size_t total_bytes);
size_t elastic_margin(const ElasticOptions& o, size_t floor_bytes);

// "on" / "off" -> bool; ft::Error otherwise.
bool parse_on_off(const std::string& flag, const std::string& v);

}  // namespace ft
