// slot_cache: ExpertCache::ensure (experts/expert_cache.cpp) as one device block
// (ensure_block, slot_cache.cuh), so a decode step's cache bookkeeping needs no host round trip
// and can be captured in a CUDA graph; the admissions' bookkeeping and the slot resets.
#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cpu_share.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/slot_cache.cuh"

namespace ft::cuda {

namespace {
constexpr int k_threads = 1024;

// ---- kernels
template <bool HYBRID>
__global__ void __launch_bounds__(k_threads)
    ensure_kernel(const __grid_constant__ SlotEnsureArgs a, const __grid_constant__ HybridSplitArgs h) {
  pdl_wait();
  pdl_trigger();
  ensure_block<k_threads, HYBRID>(a, h, static_cast<int>(threadIdx.x));
}

// The admissions' copies are done (stream order on the side stream): their slots become
// ordinary LRU entries (usage = the current step) and leave the in-flight count.
__global__ void admitted_kernel(SlotCacheState s, const int32_t* __restrict__ slot,
                                const int32_t* __restrict__ count, int32_t* inflight) {
  pdl_wait();
  pdl_trigger();
  const int n = *count;
  const long long now = *reinterpret_cast<volatile long long*>(&s.counters[SC_STEP]);
  for (int i = threadIdx.x; i < n; i += blockDim.x) s.usage[slot[i]] = now;
  if (threadIdx.x == 0 && n > 0) atomicSub(inflight, n);
}

// Drops the mappings of slots [0, slot_end); all of them (a reset, also of fresh memory: the
// map is not read) when slot_end covers every slot.
__global__ void reset_kernel(SlotCacheState s, int64_t n_ids, int64_t slot_end) {
  const bool all = slot_end >= s.slots;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n_ids;
       i += int64_t{gridDim.x} * blockDim.x) {
    if (all || s.slot_for_id[i] < slot_end) s.slot_for_id[i] = -1;
    if (i < slot_end) s.id_of_slot[i] = -1, s.usage[i] = 0;
  }
}

void check_ensure(const SlotEnsureArgs& a) {
  FT_CHECK(a.count > 0 && a.count <= k_slot_max_ids && a.s.slots >= a.s.n_experts &&
               a.s.slots < (1 << 24) && a.ids && a.slot_ids && a.fetch && a.fetch_slot &&
               a.n_fetch,
           "slot_cache_ensure: {} ids, {} slots", a.count, a.s.slots);
}
}  // namespace

// ---- launchers
void slot_cache_ensure(const SlotEnsureArgs& a) {
  check_ensure(a);
  launch_kernel(ensure_kernel<false>, dim3(1), dim3(k_threads), 0, a, HybridSplitArgs{});
}

void slot_cache_ensure_hybrid(const SlotEnsureArgs& a, const HybridSplitArgs& h) {
  check_ensure(a);
  const CpuShareArgs& sh = h.share;
  FT_CHECK(h.top_k > 0 && a.count % h.top_k == 0 && a.count <= sh.max_routes &&
               a.count / h.top_k <= sh.max_tokens && h.x && h.weights && sh.box && sh.seq &&
               sh.pending && sh.cpu_experts && h.fetch_q16 >= 0 && h.fetch_q16 <= (1 << 16) &&
               (h.max_inflight == 0 || (h.admit && h.admit_slot && h.n_admit && h.inflight)),
           "slot_cache_ensure_hybrid: {} routes of top-{} (mailbox: {} routes, {} tokens)",
           a.count, h.top_k, sh.max_routes, sh.max_tokens);
  launch_kernel(ensure_kernel<true>, dim3(1), dim3(k_threads), 0, a, h);
}

void slot_cache_admitted(const SlotCacheState& s, const int32_t* admit_slot,
                         const int32_t* n_admit, int32_t* inflight) {
  FT_CHECK(admit_slot && n_admit && inflight, "slot_cache_admitted: bad arguments");
  launch_kernel(admitted_kernel, dim3(1), dim3(256), 0, s, admit_slot, n_admit, inflight);
}

void slot_cache_drop(const SlotCacheState& s, int64_t n_ids, int64_t slot_end) {
  FT_CHECK(n_ids >= s.slots && slot_end >= 0, "slot_cache_drop: {} ids < {} slots", n_ids,
           s.slots);
  const int64_t blocks = std::min<int64_t>((n_ids + 255) / 256, 1024);
  reset_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream()>>>(s, n_ids,
                                                                    std::min(slot_end, s.slots));
  CUDA_CHECK_LAUNCH();
}

void slot_cache_reset(const SlotCacheState& s, int64_t n_ids) { slot_cache_drop(s, n_ids, s.slots); }

}  // namespace ft::cuda
