// Choosing and building the engine's runner from the memory flags of `ft serve`: the CPU
// runner, or on a CUDA device the GPU runner (fused / offload / hybrid) sized by the memory
// planner before anything is allocated. make_runner lives in engine/cuda_runner.cpp (CUDA
// builds) or engine/cpu_only_backend.cpp (no CUDA backend); the rest here is plain C++.
#pragma once
#include <memory>
#include <string>

#include "engine/engine.h"
#include "engine/runner.h"
#include "experts/bw_profile.h"

namespace ft {

struct BackendOptions {
  std::string moe_backend = "auto";  // auto | fused | offload | cpu | hybrid
  std::string gpu_memory;            // budget ("24GiB"); empty: memory_ratio x free VRAM
  double memory_ratio = 0.9;         // fraction of free VRAM when gpu_memory is empty
  int64_t kv_reserve_tokens = 32768;  // KV reserved before the expert cache takes the rest
  int64_t moe_cache_size = -1;       // expert slots (-1: from the budget)
  double moe_cache_rate = -1;        // fraction of all experts as slots (-1: from the budget)
  bool ctx_size_given = false;       // --ctx-size was passed (else the GPU uses the reserve)
  std::string profile_path;          // bandwidth profile (empty: bw_profile_path())
  // Tensor parallelism (issue #10): GPUs in all nodes together, hosts, this host's index
  // (0 serves HTTP), node 0's NCCL bootstrap ADDR:PORT.
  int tensor_parallel = 1, nnodes = 1, node_rank = 0;
  std::string master;
  std::string tp_experts = "auto";  // auto | slice | whole (parallel/tp_plan.h TpExperts)
  // VRAM for the prefix cache's recurrent-state snapshots (hybrid models; taken from the
  // budget before the planner splits it): as many whole snapshots as fit.
  // k_snapshot_vram_auto (`ft serve --snapshot-vram auto`): see snapshot_vram_slots.
  size_t state_snapshot_vram = 0;
  static constexpr size_t k_snapshot_vram_auto = ~size_t{0};
  // GPU KV cache element type: bf16 (half the bytes; flash attention on tensor cores) or f32
  // (the CPU backend's arithmetic: GPU and CPU greedy ids agree exactly).
  std::string kv_dtype = "auto";  // auto: bf16, f32 where bf16 is not validated (gpt-oss)
};

// The VRAM snapshot tier's slots for a GPU budget: the whole snapshots of snap_bytes (one
// sequence's recurrent state; 0 for models without one: no tier) that `requested` bytes hold;
// k_snapshot_vram_auto: an eighth of the budget, at most 64 snapshots. Throws ft::Error (the
// --snapshot-vram flag, the numbers, the fix) when an explicit size is more than half the budget
// or holds no whole snapshot.
int32_t snapshot_vram_slots(size_t requested, size_t snap_bytes, size_t budget);

// Flag checks that need no model or device; throws ft::Error naming the flag and the fix.
void validate_backend_options(const BackendOptions& b);

// GPU sequence layout from the KV reserve: each sequence holds ctx tokens (--ctx-size, or the
// whole reserve when not given, so one long agent prompt fits), and as many sequences run as
// the reserve holds, at most max_running. Throws ft::Error when ctx exceeds the reserve.
struct GpuSeqLayout {
  int64_t ctx;
  int seqs;
};
GpuSeqLayout gpu_seq_layout(const EngineOptions& opt, const BackendOptions& b);

// Builds the runner for `ft serve` and logs the choice and the memory plan. Refuses (ft::Error,
// one line with the numbers and the fix) a budget that cannot hold the model, before loading
// experts or allocating VRAM. May lower opt.max_running / opt.ctx_size to the GPU layout.
std::unique_ptr<Runner> make_runner(const Model& model, EngineOptions& opt,
                                    const BackendOptions& b);

// --tensor-parallel > 1 (engine/tp_runner.cpp; CUDA builds with NCCL, else ft::Error): the
// runner over every GPU of node 0, and on nodes > 0 the loop replaying node 0's steps
// (returns when node 0 stops). Every node passes the same flags.
std::unique_ptr<Runner> make_tp_runner(const Model& model, EngineOptions& opt,
                                       const BackendOptions& b);
void serve_tp_worker(const Model& model, EngineOptions& opt, const BackendOptions& b);

// base with a CudaTransformer's cumulative counters and time split filled in (both CUDA
// runners report through it; defined in engine/cuda_runner.cpp).
struct CudaRuntimeStats;
RunnerStats with_runtime(RunnerStats base, const CudaRuntimeStats& r);

// The bandwidth profile's keys and file, for both CUDA runners (engine/cuda_runner.cpp): this
// GPU's name ("NVIDIA H200"), the routed experts' format ("bf16", "f16", "f32", "other"), and the
// profile at --profile (else bw_profile_path()): nullopt when there is none, or when the file is
// broken (logged as a warning).
class HostExperts;
std::string gpu_name();
std::string expert_format(const HostExperts& h);
std::optional<BwProfile> read_profile_or_warn(const BackendOptions& b);

}  // namespace ft
