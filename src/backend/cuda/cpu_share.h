// HYBRID decode on the device (cpu_share.cu, slot_cache.cu): the cache bookkeeping splits a
// layer's misses by the q* rule (fetched into slots / left to the CPU) and hands the CPU share
// to a host coordinator through a mailbox in mapped pinned memory, with no host round trip, so
// a hybrid decode step is captured in a CUDA graph like an offload one. Order per MoE layer:
// ensure + submit (one kernel: slots, fetch list, CPU job, doorbell) -> fetch -> experts on
// the GPU (CPU routes have slot -1) -> collect (waits for the CPU's partial sum, adds it).
// Plain C++ declarations (no CUDA headers), as cuda_ops.h.
#pragma once
#include <cstddef>
#include <cstdint>

#include "backend/cuda/cuda_ops.h"

namespace ft::cuda {

// The mailbox, one per model instance (a layer's job is collected before the next is
// submitted, so one job is ever in flight). Header words, then ids [max_routes] i32, weights
// [max_routes] f32, x [max_tokens, hidden] f32 (the normed token rows) and y [max_tokens,
// hidden] f32 (the CPU's weighted sum). The device writes ids/weights/x and the header, then
// ready = seq; the coordinator computes, writes y, then done = seq. seq counts jobs from 1.
struct CpuShareHeader {
  uint64_t ready;  // device: the seq of the job now in the box (written last)
  uint64_t done;   // host: the seq of the last job whose y is complete (written last)
  uint64_t error;  // host: a job failed (1); device: the wait timed out (2)
  int32_t layer, n_tokens, routes, pad;
  uint64_t started;  // host: the seq of the job it took last (diagnostics)
  uint64_t waited;   // device: the seq a timed-out wait wanted (diagnostics)
};
static_assert(sizeof(CpuShareHeader) <= 64);
constexpr size_t k_cpu_share_header = 64;  // the header's bytes, padded (16-byte aligned data)
inline size_t cpu_share_box_bytes(int64_t max_routes, int64_t max_tokens, int64_t hidden) {
  return k_cpu_share_header + 8 * static_cast<size_t>(max_routes) +
         8 * static_cast<size_t>(max_tokens * hidden);
}
#if defined(__CUDACC__)
#define FT_SHARE_HD __host__ __device__
#else
#define FT_SHARE_HD
#endif
// The mailbox's parts at `box` (its host or device address), the one statement of the layout
// that the submit kernel, the collect kernel and the coordinator read.
struct CpuShareBox {
  CpuShareHeader* head;
  int32_t* ids;  // [max_routes]
  float* w;      // [max_routes]
  float* x;      // [max_tokens, hidden]
  float* y;      // [max_tokens, hidden]
};
FT_SHARE_HD inline CpuShareBox cpu_share_box(void* box, int64_t max_routes, int64_t max_tokens,
                                             int64_t hidden) {
  char* b = static_cast<char*>(box);
  auto* ids = reinterpret_cast<int32_t*>(b + k_cpu_share_header);
  float* w = reinterpret_cast<float*>(ids + max_routes);
  float* x = w + max_routes;
  return {reinterpret_cast<CpuShareHeader*>(b), ids, w, x, x + max_tokens * hidden};
}

// Where the device side finds the mailbox and its own state.
struct CpuShareArgs {
  char* box = nullptr;         // the mailbox as a device pointer (PinnedBuffer::device_data)
  uint64_t* seq = nullptr;     // device: jobs submitted so far
  uint64_t* pending = nullptr;  // device: the seq this layer waits for, 0 when none
  int64_t* cpu_experts = nullptr;  // device: distinct experts left to the CPU, cumulative
  int64_t hidden = 0, max_routes = 0, max_tokens = 0;
  int64_t timeout_ns = 10'000'000'000;  // collect gives up (error 2) after this long
};

// The split and the job of one layer's ensure (slot_cache_ensure_hybrid).
struct HybridSplitArgs {
  int32_t fetch_q16 = 0;           // f = pcie / (pcie + cpu) in 1/65536 (the rule's q)
  int32_t top_k = 0;               // routes per token (count / top_k tokens)
  const float* x = nullptr;        // [count / top_k, hidden] the experts' input rows
  const float* weights = nullptr;  // [count] routing weights
  CpuShareArgs share;
  // Admissions: up to max_inflight CPU-computed misses at once also get a slot (usage -1) and
  // are listed in admit / admit_slot [*n_admit] for a background copy (0: none, as FreeToken,
  // whose cache then stops warming once the rule leaves every miss to the CPU).
  int32_t max_inflight = 0;
  int32_t *admit = nullptr, *admit_slot = nullptr, *n_admit = nullptr;
  int32_t* inflight = nullptr;  // device: admissions not yet copied
};
// slot_cache_ensure with the hybrid split: of the layer's m missed experts,
// hybrid_fetch_count(m, q) are fetched (priority as ensure's), the rest keep slot -1 and their
// routes go to the CPU job; when there is one, the kernel fills the mailbox and rings it. A
// fetch that finds no free slot (all used or awaiting admission) goes to the CPU too.
void slot_cache_ensure_hybrid(const SlotEnsureArgs& a, const HybridSplitArgs& h);
// After the admissions' copy (fetch_experts over admit / admit_slot, on the same stream):
// their slots take the current step as usage and leave the in-flight count.
void slot_cache_admitted(const SlotCacheState& s, const int32_t* admit_slot,
                         const int32_t* n_admit, int32_t* inflight);

// Waits (one block, on the device) for the CPU's partial sum of the job this layer submitted,
// if any, and adds it into x [n_tokens, hidden]. On timeout it sets error = 2 and adds nothing
// (the host's CpuShare::check reports it after the step).
void cpu_share_collect(const CpuShareArgs& s, float* x);

}  // namespace ft::cuda
