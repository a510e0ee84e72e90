// ensure_block: ExpertCache::ensure (experts/expert_cache.cpp) run by one block of THREADS
// threads on the device. The slot_cache kernels call it (a block of 1024), and so does the
// router GEMV's last block (gemv_multi with GemvRoute::ensure, 256 threads), which then leaves
// the decode step's bookkeeping no launch of its own.
// Lookups run in parallel; thread 0 does the short serial parts on shared memory (distinct
// ids, miss order); the victim search (the lowest slot_rank not used this step, highest index
// on ties: the prefill buffers [0, 2E) last) is a block-wide min per miss, and a fetch whose
// victim is recent goes in on probation (base/slot_rank.h). Ids < 0 (a
// tensor-parallel shard's routed ids of other ranks' experts) are skipped: slot -1, no lookup.
// HYBRID (cpu_share.h): only the q* rule's share of the misses is fetched; the rest keep slot
// -1 and, when there are any, the block fills the CPU's mailbox (routes, weights, input rows)
// and rings it.
#pragma once

#include "backend/cuda/common.cuh"
#include "backend/cuda/cpu_share.h"
#include "backend/cuda/cuda_ops.h"
#include "base/q_split.h"
#include "base/slot_rank.h"

namespace ft::cuda {

namespace slot_cache_detail {
constexpr int k_max_ids = static_cast<int>(k_slot_max_ids);

__device__ __forceinline__ unsigned long long warp_min(unsigned long long v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// counters[c] += v as a reduction: thread 0 does not wait a round trip to L2 for the old value
// (a load + add + store did, twice per launch, on the decode step's critical path).
__device__ __forceinline__ void count_up(const SlotCacheState& s, int c, long long v) {
  atomicAdd(reinterpret_cast<unsigned long long*>(&s.counters[c]),
            static_cast<unsigned long long>(v));
}

// HYBRID: the CPU job of a layer whose routes `cpu` (expert id, else -1) are left to the CPU:
// ids, weights and the tokens' input rows into the mailbox, then (after a system fence) the
// header and ready = the next seq; pending = that seq. Called by the whole block.
template <int THREADS>
__device__ void submit_job(const SlotEnsureArgs& a, const HybridSplitArgs& h, const int32_t* cpu,
                           int tid) {
  const CpuShareArgs& sh = h.share;
  const CpuShareBox box = cpu_share_box(sh.box, sh.max_routes, sh.max_tokens, sh.hidden);
  CpuShareHeader* head = box.head;
  const int64_t n = a.count / h.top_k, width = n * sh.hidden;
  for (int64_t i = tid; i < a.count; i += THREADS) box.ids[i] = cpu[i], box.w[i] = h.weights[i];
  for (int64_t i = tid; i < width; i += THREADS) box.x[i] = h.x[i];
  __threadfence_system();
  __syncthreads();
  if (tid == 0) {
    const uint64_t seq = *sh.seq + 1;
    *sh.seq = seq;
    head->layer = static_cast<int32_t>(a.layer);
    head->n_tokens = static_cast<int32_t>(n);
    head->routes = static_cast<int32_t>(a.count);
    // The doorbell as a system-scope release, then a fence so it leaves the GPU now rather
    // than at the kernel's end.
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(&head->ready), "l"(seq) : "memory");
    __threadfence_system();
    *sh.pending = seq;
  }
}
}  // namespace slot_cache_detail

// What a caller already holds in shared memory (each null: read from global memory): the ids
// [a.count], the layer's slot_for_id and recency rows [n_experts], and the step counter's value.
struct EnsurePre {
  const int32_t* ids = nullptr;
  const int32_t* slot_for_id = nullptr;
  const long long* recency = nullptr;
  long long step = -1;  // < 0: read it
};

// The whole block calls it (tid = its linear thread index), after its dependency wait; needs
// a.count <= THREADS. Reads a.ids from global memory unless pre.ids (a caller that just wrote
// them there synchronises its block first).
template <int THREADS, bool HYBRID>
__device__ void ensure_block(const SlotEnsureArgs& a, const HybridSplitArgs& h, int tid,
                             const EnsurePre& pre = {}) {
  using namespace slot_cache_detail;
  static_assert(THREADS % 32 == 0, "ensure_block: whole warps");
  __shared__ int32_t ids[k_max_ids], active[k_max_ids], slot_of[k_max_ids], miss[k_max_ids];
  __shared__ int32_t cpu[HYBRID ? k_max_ids : 1];
  __shared__ long long rec[k_max_ids];
  __shared__ int n_active, n_miss, n_fetch, n_got, n_admit, n_probation;
  __shared__ long long thrash, last_large;  // SC_THRASH (counted on), SC_LAST_LARGE
  __shared__ int32_t claimed;
  __shared__ bool go;
  __shared__ unsigned long long partial[THREADS / 32];
  __shared__ bool done;
  const SlotCacheState& s = a.s;
  const int64_t base = a.layer * s.n_experts;
  // Every thread reads the step before thread 0 bumps it.
  const long long step = (pre.step >= 0 ? pre.step : s.counters[SC_STEP]) + 1;
  if constexpr (!HYBRID) {
    // Decode's usual case, up to 32 routes that all hit: warp 0 alone, with no block-wide
    // serial part (the distinct ids by __match_any_sync, first occurrences by ballot). The
    // same effects as the general path below, which runs instead when anything misses (this
    // one then wrote nothing).
    if (a.count <= 32) {
      if (tid < 32) {
        const int32_t id = tid < a.count ? (pre.ids ? pre.ids[tid] : a.ids[tid]) : -1;
        const unsigned peers = __match_any_sync(0xffffffffu, id);
        const int lead = __ffs(peers) - 1;  // the id's first occurrence
        const bool first = id >= 0 && lead == tid;
        int32_t sl = -1;
        if (first) sl = pre.slot_for_id ? pre.slot_for_id[id] : s.slot_for_id[base + id];
        const unsigned firsts = __ballot_sync(0xffffffffu, first);
        const bool hit = __ballot_sync(0xffffffffu, first && sl < 0) == 0;
        if (hit) {
          if (first) s.usage[sl] = step, s.recency[base + id] = step;
          sl = __shfl_sync(0xffffffffu, sl, lead);
          if (tid < a.count) a.slot_ids[tid] = id < 0 ? -1 : sl;
          if (tid == 0) {
            s.counters[SC_STEP] = step;
            *a.n_fetch = 0;
            count_up(s, SC_LOOKUPS, __popc(firsts)), count_up(s, SC_HITS, __popc(firsts));
          }
        }
        if (tid == 0) done = hit;
      }
      __syncthreads();
      if (done) return;
    }
  }
  if (tid < a.count) ids[tid] = pre.ids ? pre.ids[tid] : a.ids[tid];
  __syncthreads();
  if (tid == 0) {
    s.counters[SC_STEP] = step;
    int na = 0;
    for (int64_t i = 0; i < a.count; ++i) {  // distinct, first-occurrence order
      if (ids[i] < 0) continue;
      bool seen = false;
      for (int j = 0; j < na; ++j) seen = seen || active[j] == ids[i];
      if (!seen) active[na++] = ids[i];
    }
    n_active = na;
  }
  __syncthreads();
  const int na = n_active;
  if (tid < na) {  // lookups in parallel; hits are touched
    const int32_t e = active[tid];
    const int32_t sl = pre.slot_for_id ? pre.slot_for_id[e] : s.slot_for_id[base + e];
    slot_of[tid] = sl;
    rec[tid] = pre.recency ? pre.recency[e] : s.recency[base + e];
    if (sl >= 0) s.usage[sl] = step;
  }
  __syncthreads();
  if (tid == 0) {
    int nm = 0;
    for (int i = 0; i < na; ++i)
      if (slot_of[i] < 0) miss[nm++] = i;
    // Fetch priority: most recently active first, then lower id (insertion sort, few items).
    for (int i = 1; i < nm; ++i) {
      const int m = miss[i];
      int j = i - 1;
      while (j >= 0) {
        const int o = miss[j];
        if (rec[o] > rec[m] || (rec[o] == rec[m] && active[o] < active[m])) break;
        miss[j + 1] = o;
        --j;
      }
      miss[j + 1] = m;
    }
    const int nf = HYBRID ? static_cast<int>(hybrid_fetch_count_q16(nm, h.fetch_q16)) : nm;
    n_miss = nm;
    n_fetch = nf;
    n_got = 0, n_admit = 0, n_probation = 0;
    thrash = s.counters[SC_THRASH], last_large = s.counters[SC_LAST_LARGE];
    if (na > k_probation_max_active) last_large = step, s.counters[SC_LAST_LARGE] = step;
    count_up(s, SC_LOOKUPS, na), count_up(s, SC_HITS, na - nm), count_up(s, SC_MISSES, nm);
  }
  __syncthreads();
  const int lane = tid & 31, warp = tid >> 5;
  // A slot for active expert i: the lowest-ranked one that this step does not use and that
  // awaits no admission copy, the highest index on ties, evicted and mapped to the expert with
  // usage u_new (a fetch, u_new = step: on probation when the victim is recent); -1 when there
  // is none (the host checks that a fetch always finds one in OFFLOAD).
  auto claim = [&](int i, long long u_new) {
    unsigned long long best = ~0ull;
    for (int64_t sl = tid; sl < s.slots; sl += THREADS) {
      const long long u = s.usage[sl];
      if (slot_evictable(u, step))
        best = min(best, (static_cast<unsigned long long>(slot_rank(u)) << 24) | (0xffffff - sl));
    }
    best = warp_min(best);
    if (lane == 0) partial[warp] = best;
    __syncthreads();
    if (tid == 0) {
      for (int w = 1; w < THREADS / 32; ++w) best = min(best, partial[w]);
      const int32_t victim =
          best == ~0ull ? -1 : static_cast<int32_t>(0xffffff - (best & 0xffffff));
      if (victim >= 0) {
        const int32_t old = s.id_of_slot[victim];
        if (old >= 0) {
          s.slot_for_id[old] = -1;
          count_up(s, SC_EVICTIONS, 1);
        }
        const int32_t flat = static_cast<int32_t>(base + active[i]);
        s.id_of_slot[victim] = flat;
        s.slot_for_id[flat] = victim;
        const bool probation =
            u_new == step &&
            insert_on_probation(s.usage[victim], step, s.window, last_large, thrash);
        n_probation += probation;
        s.usage[victim] = probation ? probation_usage(step) : u_new;
      }
      claimed = victim;
    }
    __syncthreads();
    return claimed;
  };
  for (int mi = 0; mi < n_fetch; ++mi) {  // the rest of the misses (HYBRID) keep slot -1
    const int i = miss[mi];
    const int32_t v = claim(i, step);
    if (tid == 0 && v >= 0) {
      slot_of[i] = v;
      a.fetch[n_got] = active[i];
      a.fetch_slot[n_got] = v;
      ++n_got;
    }
  }
  if constexpr (HYBRID) {
    // Admissions: misses left to the CPU are also copied into slots in the background (the
    // caller's side stream; usage -1 until slot_cache_admitted), while at most max_inflight
    // are on their way, so a warm cache keeps warming while the CPU computes its misses.
    for (int mi = n_fetch; mi < n_miss; ++mi) {
      if (tid == 0)
        go = h.max_inflight > 0 &&
             *reinterpret_cast<volatile int32_t*>(h.inflight) + n_admit < h.max_inflight;
      __syncthreads();
      if (!go) break;
      const int i = miss[mi];
      const int32_t v = claim(i, -1);
      if (v < 0) break;
      if (tid == 0) {
        h.admit[n_admit] = active[i];
        h.admit_slot[n_admit] = v;
        ++n_admit;
      }
    }
    if (tid == 0) {
      if (h.n_admit) *h.n_admit = n_admit;
      if (n_admit > 0) atomicAdd(h.inflight, n_admit);
      *h.share.cpu_experts += n_miss - n_got;  // admitted ones are computed on the CPU too
    }
  }
  if (tid == 0) {
    *a.n_fetch = n_got;
    count_up(s, SC_FETCHED, n_got + n_admit);  // experts copied over PCIe
    s.counters[SC_THRASH] = thrash;
    if (n_probation) count_up(s, SC_PROBATION, n_probation);
  }
  __syncthreads();
  if (tid < na) s.recency[base + active[tid]] = step;
  if (tid < a.count) {
    int i = 0;
    while (ids[tid] >= 0 && active[i] != ids[tid]) ++i;
    a.slot_ids[tid] = ids[tid] < 0 ? -1 : slot_of[i];
    if constexpr (HYBRID) cpu[tid] = ids[tid] >= 0 && slot_of[i] < 0 ? ids[tid] : -1;
  }
  if constexpr (HYBRID) {
    if (n_got < n_miss) {  // uniform: shared, written before the last barrier
      __syncthreads();
      submit_job<THREADS>(a, h, cpu, tid);
    } else if (tid == 0) {
      *h.share.pending = 0;
    }
  }
}

}  // namespace ft::cuda
