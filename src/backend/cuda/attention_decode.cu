// attention_decode: per-token attention over an f32 or bf16 KV cache with flash-decoding.
// One block per (token, head, key chunk): each of 16 warps scores a few keys per iteration
// (their K and V loads in flight together) with a running max, sum and lane-strided head_dim
// accumulator, and the warps merge through shared memory. Without a split one block takes all
// of a token's keys and writes the output. With a split (AttentionSplit) the keys go in chunks
// of k_attention_split_keys to as many blocks (fewer, longer chunks where they would overflow
// one wave of resident blocks), each writing (max, sum, acc) to the workspace;
// the last block of a (token, head) to finish (a counter per pair, reset by that block) merges
// them, so a step is one launch with a grid fixed by max_splits (graph-capturable; blocks past
// the token's length exit at once). Per-token positions and sequences (pos/seq), optional
// per-head sink logits and a sliding window. Before its PDL wait a block reads pos/seq and
// prefetches its chunk's first K/V rows into L2, so the cache reads overlap the previous kernel.
// With AttentionArgs::rope the kernel also does qk_rope_store's work (q/k norm, rotation, the
// new K/V rows), so a decode layer's attention is one launch after the QKV GEMV. The first
// token's blocks first prefetch their share of AttentionArgs::next (the O projection and the
// router) into L2: the attention barely touches HBM, and those GEMVs then read from L2.
#include <cuda_bf16.h>

#include "backend/cuda/attention_decode.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/l2_prefetch.cuh"
#include "backend/cuda/qk_rope.cuh"
#include "base/env.h"

namespace ft::cuda {

namespace {
constexpr int k_warps = 16;
// The split merge keeps one chunk per lane.
static_assert(k_attention_max_splits <= 32);
// Keys a warp scores per iteration, by head dims per lane (registers of a 512-thread block).
template <int DPL>
constexpr int k_keys = DPL <= 4 ? 8 : 4;

// A lane's DPL consecutive cache elements of one K or V row, as raw 32-bit words (a bf16 pair
// per word), loaded unconditionally (callers clamp the row and the dims to valid ones) so that
// a round's loads are all in flight before the first is used.
template <typename T, int DPL>
struct LaneRow {
  static constexpr int kBytes = static_cast<int>(sizeof(T)) * DPL;
  static constexpr int kWords = kBytes >= 4 ? kBytes / 4 : 1;
  uint32_t w[kWords];
  // Element j as f32.
  __device__ __forceinline__ float at(int j) const {
    if constexpr (sizeof(T) == 4)
      return __uint_as_float(w[j]);
    else
      return __uint_as_float(j % 2 == 0 ? w[j / 2] << 16 : w[j / 2] & 0xffff0000u);
  }
};
// VEC (head_dim % DPL == 0): the lane's dims are one aligned vector of a row (rows start at
// multiples of head_dim and kv_dim elements), read with 2- to 16-byte loads; else element by
// element, each index clamped to the head (the extra dims meet q = 0).
template <typename T, int DPL, bool VEC>
__device__ __forceinline__ LaneRow<T, DPL> load_lane(const T* row, int64_t d0, int64_t hd) {
  using L = LaneRow<T, DPL>;
  L r;
  if constexpr (!VEC) {
#pragma unroll
    for (int j = 0; j < DPL; ++j) {
      const T e = row[min(d0 + j, hd - 1)];
      if constexpr (sizeof(T) == 4)
        r.w[j] = __float_as_uint(e);
      else if (j % 2 == 0)
        r.w[j / 2] = __bfloat16_as_ushort(e);
      else
        r.w[j / 2] |= uint32_t{__bfloat16_as_ushort(e)} << 16;
    }
  } else if constexpr (L::kBytes == 2) {
    r.w[0] = *reinterpret_cast<const uint16_t*>(row + d0);
  } else if constexpr (L::kBytes == 4) {
    r.w[0] = *reinterpret_cast<const uint32_t*>(row + d0);
  } else if constexpr (L::kBytes == 8) {
    const uint2 v = *reinterpret_cast<const uint2*>(row + d0);
    r.w[0] = v.x, r.w[1] = v.y;
  } else {
#pragma unroll
    for (int i = 0; i < L::kWords / 4; ++i) {
      const uint4 v = reinterpret_cast<const uint4*>(row + d0)[i];
      r.w[4 * i] = v.x, r.w[4 * i + 1] = v.y, r.w[4 * i + 2] = v.z, r.w[4 * i + 3] = v.w;
    }
  }
  return r;
}

// ---- kernels
// T: cache element; DPL: head dims per lane (head_dim <= 32 * DPL). ROPE (a.rope.k set): the
// block first norms and rotates its q head (warp 0) and, when its chunk reaches the keys of the
// pass's own tokens (the run of its sequence's tokens ending at t, at most k_run), warp 1 + f
// does key f of the run (k norm + rotation, rounded to T) and its value into shared memory; the
// block of the group's first head holding the chunk with pos stores the token's own K/V rows.
template <typename T, int DPL, bool ROPE, bool VEC>
__global__ void __launch_bounds__(32 * k_warps)
    decode_kernel(const __grid_constant__ AttentionArgs a) {
  const int64_t h = blockIdx.x, t = blockIdx.y, split = blockIdx.z;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t hd = a.head_dim, g = h / (a.n_heads / a.n_kv_heads);
  const int64_t kv_dim = a.n_kv_heads * hd, q_dim = a.n_heads * hd;
  // pos / seq are host copies made before a pass's first kernel (the runtime never writes them
  // from a kernel), so they are read before the wait.
  const int64_t pos = a.pos ? a.pos[t] : a.pos0 + t;
  const DecodeChunk ch =
      decode_chunk(a, pos, split, k_attention_split_keys, int64_t{gridDim.x} * gridDim.y);
  const int64_t used = ch.used, c0 = ch.c0, c1 = ch.c1;
  // Token 0's chunks prefetch the later GEMVs' weights (not the chunks past the length: with a
  // long KV capacity those are most of the grid, and a block with a bulk prefetch in flight
  // apparently keeps its SM slot: DEVELOPERS.md).
  if (t == 0 && split < used) l2_prefetch_share(a.next, h + gridDim.x * split, gridDim.x * used);
  // A chunk past this token's keys exits at once, before the dependency wait (it reads nothing
  // the previous kernel writes): with a long KV capacity most of the grid's max_splits chunks
  // are such blocks, and waiting they would hold the SM slots the token's real chunks need.
  if (split >= used) return;
  const int64_t cache0 = a.seq ? a.seq[t] * a.seq_stride : 0;
  // ROPE: this token's run (tokens t - nf + 1 .. t of its sequence, keys fresh0 .. pos) and
  // this warp's role; norm weights and cos/sin rows are loaded before the wait.
  constexpr int C = (DPL + 1) / 2;  // rotation pairs per lane
  const int nf = ROPE ? fresh_run(a, t, pos) : 1;
  const int64_t fresh0 = pos - nf + 1;
  const bool fresh = ROPE && c1 > fresh0;  // the chunk has keys of the run
  const bool is_q = ROPE && warp == 0, is_k = fresh && warp >= 1 && warp <= nf;
  float wr[ROPE ? DPL : 1], cs[ROPE ? C : 1], sn[ROPE ? C : 1];
  if constexpr (ROPE) {
    head_norm_weights(is_q ? a.rope.q_norm : is_k ? a.rope.k_norm : nullptr, hd, wr);
    rope_cos_sin(a.rope.cos, a.rope.sin, is_q ? pos : fresh0 + warp - 1, a.rope.rot_dim,
                 is_q || is_k, cs, sn);
  }
  // The chunk's first K/V rows into L2 while the previous kernel runs.
  prefetch_rows(static_cast<const T*>(a.k_cache) + cache0 + g * hd,
                static_cast<const T*>(a.v_cache) + cache0 + g * hd, kv_dim, hd, c0,
                min(c1, c0 + k_prefetch_keys));
  pdl_wait();
  pdl_trigger();
  // ROPE: the q head (f32) and the run's keys and values (cache elements) in shared memory.
  __shared__ float s_q[ROPE ? 32 * DPL : 1], s_stage[ROPE ? 1 + k_run : 1][ROPE ? 32 * DPL : 1];
  __shared__ alignas(16) T s_kf[ROPE ? k_run : 1][ROPE ? 32 * DPL : 1],
      s_vf[ROPE ? k_run : 1][ROPE ? 32 * DPL : 1];
  if constexpr (ROPE) {
    if (is_q || is_k) {
      const int f = warp - 1;
      const int64_t tf = t - (nf - 1 - f);  // is_k: the run's token whose key is f
      const float* src = is_q ? a.q + t * q_dim + h * hd : a.rope.k + tf * kv_dim + g * hd;
      float val[DPL];
#pragma unroll
      for (int j = 0; j < DPL; ++j) {
        const int64_t d = lane + 32 * j;
        val[j] = d < hd ? src[d] : 0.f;
      }
      // The token's own rows, stored by one block per (token, kv head).
      const bool store =
          is_k && f == nf - 1 && h % (a.n_heads / a.n_kv_heads) == 0 && split == used - 1;
      const int64_t row = cache0 + pos * kv_dim + g * hd;
      T* kc = store ? static_cast<T*>(const_cast<void*>(a.k_cache)) + row : nullptr;
      const bool norm = (is_q ? a.rope.q_norm : a.rope.k_norm) != nullptr;
      if (is_q)
        head_norm_rope(val, wr, norm, a.rope.eps, hd, a.rope.rot_dim, a.rope.interleaved, cs, sn,
                       s_stage[0], [&](int64_t d, float x) { s_q[d] = x; });
      else
        head_norm_rope(val, wr, norm, a.rope.eps, hd, a.rope.rot_dim, a.rope.interleaved, cs, sn,
                       s_stage[warp], [&](int64_t d, float x) {
                         const T e = to_elem<T>(x);
                         s_kf[f][d] = e;
                         if (kc) kc[d] = e;
                       });
      if (is_k) {
        const float* vs = a.rope.v + tf * kv_dim + g * hd;
        T* vc = store ? static_cast<T*>(const_cast<void*>(a.v_cache)) + row : nullptr;
#pragma unroll
        for (int j = 0; j < DPL; ++j) {
          const int64_t d = lane + 32 * j;
          if (d >= hd) continue;
          const T e = to_elem<T>(vs[d]);
          s_vf[f][d] = e;
          if (vc) vc[d] = e;
        }
      }
    }
    __syncthreads();
  }
  // The key loop's lane owns DPL consecutive dims d0 .. d0 + DPL - 1 (vector loads of K and V).
  // dl: where the lane loads from (lanes past the head read dims 0.., and meet q = 0).
  const int64_t d0 = int64_t{lane} * DPL, dl = d0 < hd ? d0 : 0;
  float qr[DPL], acc[DPL];
#pragma unroll
  for (int j = 0; j < DPL; ++j) {
    const int64_t d = d0 + j;
    if constexpr (ROPE)
      qr[j] = d < hd ? s_q[d] : 0.f;
    else
      qr[j] = d < hd ? a.q[t * q_dim + h * hd + d] : 0.f;
    acc[j] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  const T* kb = static_cast<const T*>(a.k_cache) + cache0 + g * hd;
  const T* vb = static_cast<const T*>(a.v_cache) + cache0 + g * hd;
  constexpr int KEYS = k_keys<DPL>;
  for (int64_t key0 = c0 + int64_t{warp} * KEYS; key0 < c1; key0 += int64_t{k_warps} * KEYS) {
    // Every K and V row of the round is loaded before any is used: one round trip per round,
    // not one per dim. Keys past the chunk read its last row (their weight is 0). A key of the
    // pass comes from shared memory: its cache row may be being written by another block.
    LaneRow<T, DPL> kr[KEYS], vr[KEYS];
#pragma unroll
    for (int u = 0; u < KEYS; ++u) {
      const int64_t key = min(key0 + u, c1 - 1);
      kr[u] = load_lane<T, DPL, VEC>(kb + key * kv_dim, dl, hd);
      vr[u] = load_lane<T, DPL, VEC>(vb + key * kv_dim, dl, hd);
    }
    if constexpr (ROPE) {
#pragma unroll
      for (int u = 0; u < KEYS; ++u) {
        const int64_t key = min(key0 + u, c1 - 1);
        if (key >= fresh0) {
          kr[u] = load_lane<T, DPL, VEC>(s_kf[key - fresh0], dl, hd);
          vr[u] = load_lane<T, DPL, VEC>(s_vf[key - fresh0], dl, hd);
        }
      }
    }
    float s[KEYS];
#pragma unroll
    for (int u = 0; u < KEYS; ++u) {
      float dot = 0.f;
#pragma unroll
      for (int j = 0; j < DPL; ++j) dot += qr[j] * kr[u].at(j);
      s[u] = dot;
    }
    float m_new = m;
#pragma unroll
    for (int u = 0; u < KEYS; ++u) {
      s[u] = warp_sum(s[u]) * a.scale;
      if (key0 + u < c1) m_new = fmaxf(m_new, s[u]);
    }
    const float corr = expf(m - m_new);
    float p[KEYS];
    l *= corr;
#pragma unroll
    for (int u = 0; u < KEYS; ++u) {
      p[u] = key0 + u < c1 ? expf(s[u] - m_new) : 0.f;
      l += p[u];
    }
#pragma unroll
    for (int j = 0; j < DPL; ++j) {
      float o = acc[j] * corr;
#pragma unroll
      for (int u = 0; u < KEYS; ++u) o += p[u] * vr[u].at(j);
      acc[j] = o;
    }
    m = m_new;
  }
  __shared__ float s_m[k_warps], s_l[k_warps], s_acc[k_warps][32 * DPL];
  if (lane == 0) s_m[warp] = m, s_l[warp] = l;
#pragma unroll
  for (int j = 0; j < DPL; ++j) s_acc[warp][d0 + j] = acc[j];
  __syncthreads();
  if (warp != 0) return;
  // Warp 0 merges the warps: (mx, sum, o[]) of this block's keys.
  float mx = -INFINITY;
#pragma unroll
  for (int w = 0; w < k_warps; ++w) mx = fmaxf(mx, s_m[w]);
  float f[k_warps], sum = 0.f;
#pragma unroll
  for (int w = 0; w < k_warps; ++w) {
    f[w] = s_m[w] == -INFINITY ? 0.f : expf(s_m[w] - mx);  // a warp that saw no key
    sum += s_l[w] * f[w];
  }
  float o[DPL];
#pragma unroll
  for (int j = 0; j < DPL; ++j) {
    const int64_t d = lane + 32 * j;
    o[j] = 0.f;
    if (d >= hd) continue;
#pragma unroll
    for (int w = 0; w < k_warps; ++w) o[j] += s_acc[w][d] * f[w];
  }
  if (used > 1) {
    // Publish this chunk's partial; the last block of the (token, head) merges them all.
    const int64_t pair = t * a.n_heads + h;
    float* part = a.split.partial + (pair * a.split.max_splits + split) * (hd + 2);
    if (lane == 0) part[0] = mx, part[1] = sum;
#pragma unroll
    for (int j = 0; j < DPL; ++j)
      if (lane + 32 * j < hd) part[2 + lane + 32 * j] = o[j];
    __syncwarp();  // the warp's partial stored before lane 0 counts the chunk
    uint32_t prev = 0;
    if (lane == 0) prev = atomic_add_acq_rel(a.split.counters + pair, 1u);
    prev = __shfl_sync(0xffffffffu, prev, 0);
    if (prev + 1 != static_cast<uint32_t>(used)) return;
    __syncwarp();  // lane 0's acquire ordered before every lane's reads below (past L1)
    if (lane == 0) a.split.counters[pair] = 0;  // ready for the next launch
    // Lane c holds chunk c's (max, sum) (used <= max_splits <= 32), so the merge is two rounds
    // of loads, not two per chunk in series.
    const float* base = a.split.partial + pair * a.split.max_splits * (hd + 2);
    float mc = -INFINITY, lc = 0.f;
    if (lane < used) mc = __ldcg(base + lane * (hd + 2)), lc = __ldcg(base + lane * (hd + 2) + 1);
    mx = mc;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    const float fc = mc == -INFINITY ? 0.f : expf(mc - mx);  // a chunk that saw no key
    sum = warp_sum(lc * fc);
#pragma unroll
    for (int j = 0; j < DPL; ++j) o[j] = 0.f;
#pragma unroll 4
    for (int64_t c = 0; c < used; ++c) {
      const float f = __shfl_sync(0xffffffffu, fc, static_cast<int>(c));
      const float* pc = base + c * (hd + 2) + 2;
#pragma unroll
      for (int j = 0; j < DPL; ++j)
        if (lane + 32 * j < hd) o[j] += __ldcg(pc + lane + 32 * j) * f;
    }
  }
  if (a.sinks) sum += expf(a.sinks[h] - mx);
  const float inv = 1.f / sum;
  float* out = a.out + t * q_dim + h * hd;
#pragma unroll
  for (int j = 0; j < DPL; ++j) {
    const int64_t d = lane + 32 * j;
    if (d < hd) out[d] = o[j] * inv;
  }
}

template <typename T, int DPL>
void launch(const AttentionArgs& a) {
  const unsigned splits = a.split.max_splits > 0 ? static_cast<unsigned>(a.split.max_splits) : 1u;
  const dim3 grid(static_cast<unsigned>(a.n_heads), static_cast<unsigned>(a.n_tokens), splits);
  const dim3 block(32 * k_warps);
  const bool vec = a.head_dim % DPL == 0;  // a lane's dims are one aligned vector
  const auto kernel =
      a.rope.k ? (vec ? decode_kernel<T, DPL, true, true> : decode_kernel<T, DPL, true, false>)
               : (vec ? decode_kernel<T, DPL, false, true> : decode_kernel<T, DPL, false, false>);
  // FT_ATTN_ONE_WAVE=0: chunks of k_attention_split_keys however many waves they take (A/B).
  static const bool one_wave = env_on("FT_ATTN_ONE_WAVE");
  AttentionArgs b = a;
  b.split.resident =
      one_wave ? resident_blocks(reinterpret_cast<const void*>(kernel), k_warps * 32, 0) : 0;
  launch_kernel(kernel, grid, block, 0, b);
}

template <typename T>
void launch_t(const AttentionArgs& a) {
  if (a.head_dim <= 32)
    launch<T, 1>(a);
  else if (a.head_dim <= 64)
    launch<T, 2>(a);
  else if (a.head_dim <= 128)
    launch<T, 4>(a);
  else
    launch<T, 8>(a);
}
}  // namespace

int64_t attention_split_floats(int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                               int64_t max_splits) {
  // A chunk's partial per (token, q head): (max, sum, o[head_dim]); the GQA kernel pads the
  // pair to 4 floats so o is 16-byte aligned.
  return n_tokens * n_heads * max_splits * (head_dim + 4);
}

// ---- launcher (attention() dispatches BF16 decode here)
void attention_decode(const AttentionArgs& a) {
  FT_CHECK(a.n_heads > 0 && a.n_kv_heads > 0 && a.n_heads % a.n_kv_heads == 0 && a.head_dim > 0 &&
               a.head_dim <= 256 && a.window >= 0 &&
               (a.kv_dtype == DType::F32 || a.kv_dtype == DType::BF16),
           "attention_decode: bad shape (heads {}, kv heads {}, head_dim {})", a.n_heads,
           a.n_kv_heads, a.head_dim);
  FT_CHECK(a.split.max_splits == 0 || (a.split.partial && a.split.counters &&
                                       a.split.max_splits <= k_attention_max_splits),
           "attention_decode: a split needs its workspace and at most {} chunks",
           k_attention_max_splits);
  FT_CHECK(!a.rope.k || (a.rope.v && a.pos && a.seq && a.n_tokens <= k_gemv_max_tokens &&
                         a.rope.cos && a.rope.sin && a.rope.rot_dim > 0 &&
                         a.rope.rot_dim % 2 == 0 && a.rope.rot_dim <= a.head_dim),
           "attention_decode: bad fused rope (rot_dim {}, {} tokens, at most {})", a.rope.rot_dim,
           a.n_tokens, k_gemv_max_tokens);
  if (a.n_tokens == 0) return;
  if (attention_decode_gqa_supported(a)) return attention_decode_gqa(a);
  if (a.kv_dtype == DType::BF16)
    launch_t<__nv_bfloat16>(a);
  else
    launch_t<float>(a);
}

}  // namespace ft::cuda
