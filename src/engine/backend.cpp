// Backend flag validation and the GPU sequence layout (plain C++, shared by both builds).
#include "engine/backend.h"

#include <algorithm>

#include "base/error.h"
#include "cache/memory_plan.h"
#include "experts/bw_profile.h"

namespace ft {

void validate_backend_options(const BackendOptions& b) {
  parse_moe_backend(b.moe_backend);
  if (!b.gpu_memory.empty() && parse_size(b.gpu_memory) == 0)
    fail("--gpu-memory must be more than 0 bytes (e.g. 8GiB)");
  if (!(b.memory_ratio > 0 && b.memory_ratio <= 1))
    fail("--memory-ratio must be in (0, 1] (a fraction of free VRAM), got {}", b.memory_ratio);
  if (b.kv_reserve_tokens < 16) fail("--kv-reserve-tokens must be at least 16");
  if (b.moe_cache_size >= 0 && b.moe_cache_rate >= 0)
    fail("give --moe-cache-size or --moe-cache-rate, not both");
  if (b.moe_cache_rate > 1) fail("--moe-cache-rate is a fraction of all experts, in (0, 1]");
  if (b.tensor_parallel < 1) fail("--tensor-parallel must be >= 1");
  if (b.nnodes < 1 || b.tensor_parallel % b.nnodes != 0)
    fail("--tensor-parallel {} does not split evenly over --nnodes {}", b.tensor_parallel,
         b.nnodes);
  if (b.node_rank < 0 || b.node_rank >= b.nnodes)
    fail("--node-rank {} is not in [0, --nnodes {})", b.node_rank, b.nnodes);
  if (b.nnodes > 1 && b.master.find(':') == std::string::npos)
    fail("--nnodes {} needs --master ADDR:PORT (node 0's address)", b.nnodes);
  if (b.kv_dtype != "auto" && b.kv_dtype != "bf16" && b.kv_dtype != "f32")
    fail("--kv-dtype must be auto, bf16 or f32, got '{}'", b.kv_dtype);
}

int32_t snapshot_vram_slots(size_t requested, size_t snap_bytes, size_t budget) {
  if (snap_bytes == 0 || requested == 0) return 0;
  constexpr int64_t k_auto_max = 64;
  if (requested == BackendOptions::k_snapshot_vram_auto)
    return static_cast<int32_t>(std::min<int64_t>(k_auto_max, budget / 8 / snap_bytes));
  if (requested > budget / 2)
    fail("--snapshot-vram {:.2f} GiB is more than half the GPU memory budget ({:.2f} GiB); "
         "lower it or raise --gpu-memory", requested / double(1 << 30), budget / double(1 << 30));
  if (requested < snap_bytes)
    fail("--snapshot-vram {:.1f} MiB holds no recurrent-state snapshot ({:.1f} MiB each); give "
         "at least that, or 0 for none", requested / double(1 << 20), snap_bytes / double(1 << 20));
  return static_cast<int32_t>(requested / snap_bytes);
}

GpuSeqLayout gpu_seq_layout(const EngineOptions& opt, const BackendOptions& b) {
  const int64_t ctx = b.ctx_size_given ? opt.ctx_size : b.kv_reserve_tokens;
  if (ctx > b.kv_reserve_tokens)
    fail("--ctx-size {} is more than --kv-reserve-tokens {}: raise --kv-reserve-tokens to at "
         "least {} or lower --ctx-size",
         ctx, b.kv_reserve_tokens, ctx);
  const int64_t fit = b.kv_reserve_tokens / ctx;
  return {ctx, static_cast<int>(std::min<int64_t>(opt.max_running, fit))};
}

}  // namespace ft
