// What the two decode attention kernels share (attention_decode.cu: a block per q head;
// attention_decode_gqa.cu: a block per kv head on tensor cores): how a token's keys split into
// chunks, the run of a pass's own keys the fused rope path scores from shared memory, the L2
// prefetch of a chunk's rows and the cache element rounding.
#pragma once
#include <cuda_bf16.h>

#include "backend/cuda/cuda_ops.h"

namespace ft::cuda {

// Keys of a chunk whose K/V rows a block prefetches into L2 before its dependency wait (one
// k_attention_split_keys chunk; bounded so long contexts do not flush L2).
constexpr int64_t k_prefetch_keys = 512;

// ROPE: the pass's tokens a block may score keys of (one sequence's run).
constexpr int k_run = static_cast<int>(k_gemv_max_tokens);

#if defined(__CUDACC__)  // device code (the chunk plan below is host-callable too)
// prefetch.global.L2 of K and V rows [r0, r1) (row r at k + r * ld, hd elements) by the block.
// Always safe: L2 is the point of coherence, so a row the previous kernel still writes (the new
// key) is read correctly after pdl_wait() whether or not it was prefetched.
template <typename T>
__device__ __forceinline__ void prefetch_rows(const T* k, const T* v, int64_t ld, int64_t hd,
                                              int64_t r0, int64_t r1) {
  const int64_t lines = (hd * int64_t{sizeof(T)} + 127) / 128, per = 2 * lines;
  for (int64_t i = threadIdx.x; i < (r1 - r0) * per; i += blockDim.x) {
    const int64_t r = r0 + i / per, part = i % per;
    const T* row = (part < lines ? k : v) + r * ld;
    const char* at = reinterpret_cast<const char*>(row) + (part % lines) * 128;
    asm volatile("prefetch.global.L2 [%0];" ::"l"(at));
  }
}

// A cache element from f32 (bf16: round to nearest even, as qk_rope_store stores it).
template <typename T>
__device__ __forceinline__ T to_elem(float x) {
  if constexpr (sizeof(T) == 2)
    return __float2bfloat16_rn(x);
  else
    return x;
}

#endif

// A token's keys [k_lo, k_hi) and this block's chunk [c0, c1) of them (`used` chunks hold
// keys). Chunks of min_chunk keys, longer when max_splits would not cover the length. One
// wave: a (token, head)'s chunks past the grid's resident blocks (split.resident over `pairs`
// (token, head) pairs) would run as a second wave, each paying a whole block's latency (and
// long contexts as many waves); the chunks that fit take longer runs of keys instead.
struct DecodeChunk {
  int64_t k_lo, k_hi, used, c0, c1;
  int64_t wave;  // a pair's chunks that fit in one wave (0: not known)
};
// Host-callable (decode_chunk_test checks the plan).
__host__ __device__ inline DecodeChunk decode_chunk(const AttentionArgs& a, int64_t pos,
                                                    int64_t split, int64_t min_chunk,
                                                    int64_t pairs) {
  DecodeChunk c;
  c.k_lo = a.window > 0 && pos - a.window + 1 > 0 ? pos - a.window + 1 : 0, c.k_hi = pos + 1;
  const int64_t len = c.k_hi - c.k_lo, want = (len + min_chunk - 1) / min_chunk;
  int64_t splits = want < a.split.max_splits ? want : a.split.max_splits;
  const int64_t fit = a.split.resident / pairs;
  if (fit >= 1 && splits > fit) splits = fit;
  c.wave = fit;
  const int64_t even = splits > 0 ? (len + splits - 1) / splits : len;
  const int64_t chunk = a.split.max_splits > 0 ? (even > min_chunk ? even : min_chunk) : len;
  c.used = (len + chunk - 1) / chunk;
  c.c0 = c.k_lo + split * chunk, c.c1 = c.k_hi < c.c0 + chunk ? c.k_hi : c.c0 + chunk;
  return c;
}

#if defined(__CUDACC__)
// ROPE: how many of the pass's tokens t - n + 1 .. t are one sequence's consecutive run ending
// at t (their keys pos - n + 1 .. pos are this pass's, at most k_run). pos / seq are host copies
// made before a pass's first kernel, so this may run before the dependency wait.
__device__ __forceinline__ int fresh_run(const AttentionArgs& a, int64_t t, int64_t pos) {
  int n = 1;
  while (n < k_run && n <= t && a.seq[t - n] == a.seq[t] && a.pos[t - n] == pos - n) ++n;
  return n;
}
#endif

}  // namespace ft::cuda
