// attention_decode_gqa: decode attention over a bf16 KV cache on bf16 tensor cores, a block per
// (token, kv head, key chunk) for all G = n_heads / n_kv_heads q heads of the group. The group's
// heads are the rows of one 16-row MMA tile, so each K/V row crosses from memory once per group;
// attention_decode.cu's block per q head reads it G times (at 16k keys Qwen3-30B-A3B's 8-head
// groups kept that kernel at ~8x its HBM bytes of L2 traffic, 64-112 us per layer against 8 us
// of bytes). 8 warps (4 at head_dim 256); K/V tiles of 16 keys per warp in flight in shared
// memory by cp.async (k_stages, loaded L2 evict-first), each warp with its own online softmax
// (S = Q K^T and O += P V as in attention_flash.cu, Q and P as bf16 hi + lo, f32
// accumulation; groups of at most 8 heads put the lo parts in the tile's rows 8-15, one MMA
// for both), the warps merged through shared memory, the chunks through the split
// workspace as attention_decode.cu does (the last block of a (token, kv head) merges its G
// rows). The same chunk plan (one wave), PDL prologue and L2 prefetches as that kernel, with
// the K/V prefetch capped for the whole launch (split.prefetch_bytes).
// With AttentionArgs::rope the block norms and rotates the group's q heads and the run's keys
// (qk_rope.cuh), stores the token's own K/V rows and scores the run's keys from shared memory.
#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>

#include "backend/cuda/attention_decode.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/l2_prefetch.cuh"
#include "backend/cuda/mma_bf16.cuh"
#include "backend/cuda/qk_rope.cuh"
#include "base/env.h"

namespace ft::cuda {

namespace {
using bf16 = __nv_bfloat16;
constexpr int k_rows = 16;  // rows: the group's q heads, zero-padded
// W warps a block, 16 keys each per K/V tile. The key loop is issue-bound (one block per SM at
// long contexts: ncu at 16k keys, 4 warps: 0.23 issued per scheduler-cycle, DRAM 21% busy), so
// head dims up to 128 take 8 warps (128-key tiles) where the device's shared memory holds
// them (`warps`); 256 keeps 4 (8 would not fit two stages).
template <int HD>
constexpr int block_warps() {
  return HD <= 128 ? 8 : 4;
}
constexpr int k_max_group = k_rows;
constexpr float k_log2e = 1.4426950408889634f;
static_assert(k_attention_max_splits <= 32, "the split merge keeps one chunk per lane");

template <int HD>
constexpr int pitch() {  // shared-memory row pitch in bf16: +8 keeps ldmatrix conflict-free
  return HD + 8;
}
// K/V tile stages (one loading while one is used). Four at head_dim 128 (148 KB: one block per
// SM) measured no faster at 16k keys (35 vs 36 us per Qwen3-30B-A3B layer) and 7% slower decode
// at short contexts, so the long-context cost is not the tiles' latency (DEVELOPERS.md).
constexpr int k_stages = 2;
template <int HD, int W>
constexpr size_t smem_bytes() {  // Q hi, Q lo, then the K and V stages
  return sizeof(bf16) * pitch<HD>() * (2 * k_rows + 2 * k_stages * 16 * W);
}
// After the key loop the K/V tiles hold the warps' (o[HD], max, sum) per row.
template <int HD, int W>
constexpr bool merge_fits() {
  return sizeof(float) * W * k_rows * (HD + 2) <=
         sizeof(bf16) * pitch<HD>() * 2 * k_stages * 16 * W;
}
static_assert(merge_fits<32, 4>() && merge_fits<32, 8>() && merge_fits<128, 8>() &&
              merge_fits<256, 4>());
static_assert(smem_bytes<128, 8>() <= 227 * 1024 && smem_bytes<256, 4>() <= 227 * 1024);
// (Within sm_90's 227 KiB; smaller GPUs are checked at run time: fits.)

// ---- kernels
// PACK (groups of at most 8 heads): Q's hi parts are rows 0-7 of the MMA tile and its lo parts
// rows 8-15 (P's likewise in O += P V), so one MMA does what the hi and lo MMAs of a 16-row
// tile of G <= 8 real rows did; each thread sums its rows gid and gid + 8.
template <int HD, int W, bool ROPE, bool PACK>
__global__ void __launch_bounds__(32 * W) gqa_kernel(const __grid_constant__ AttentionArgs a) {
  constexpr int k_warps = W, k_tile = 16 * W;  // keys per K/V tile
  constexpr int P = pitch<HD>(), DT = HD / 8, DPL = HD / 32, C = (DPL + 1) / 2, S = k_stages;
  constexpr int64_t kSlot = HD + 4;  // a chunk's partial: max, sum, 2 pad, o[HD]
  extern __shared__ float4 smem4[];
  bf16* qs = reinterpret_cast<bf16*>(smem4);  // [k_rows][P] hi
  bf16* ql = qs + k_rows * P;                 // [k_rows][P] lo
  bf16* ks = ql + k_rows * P;                 // [S][k_tile][P]
  bf16* vs = ks + S * k_tile * P;             // [S][k_tile][P]
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, gid = lane >> 2, tig = lane & 3;
  const int64_t g = blockIdx.x, t = blockIdx.y, split = blockIdx.z;
  const int64_t G = a.n_heads / a.n_kv_heads, kv_dim = a.n_kv_heads * HD, q_dim = a.n_heads * HD;
  // Before the wait: positions (host copies), the chunk, the L2 prefetches (attention_decode.cu).
  const int64_t pos = a.pos ? a.pos[t] : a.pos0 + t;
  const DecodeChunk ch = decode_chunk(a, pos, split, k_tile, int64_t{gridDim.x} * gridDim.y);
  // Token 0's blocks of the first wave share the prefetch of the later GEMVs' weights (a short
  // context's few chunks alone would each issue megabytes: one SM's bulk prefetches are slow).
  const int64_t pf = min(int64_t{gridDim.z}, max(ch.used, ch.wave));
  if (t == 0 && split < pf) l2_prefetch_share(a.next, g + gridDim.x * split, gridDim.x * pf);
  if (split >= ch.used) return;
  const int64_t c0 = ch.c0, c1 = ch.c1, used = ch.used;
  const int64_t cache0 = a.seq ? a.seq[t] * a.seq_stride : 0;
  const bf16* kc = static_cast<const bf16*>(a.k_cache) + cache0 + g * HD;
  const bf16* vc = static_cast<const bf16*>(a.v_cache) + cache0 + g * HD;
  // ROPE: keys fresh0 .. pos are the pass's own (their cache rows may be being written by
  // other blocks): they come from shared memory, never from the cache.
  const int nf = ROPE ? fresh_run(a, t, pos) : 1;
  const int64_t fresh0 = ROPE ? pos - nf + 1 : c1;
  // ROPE: the warps take the q heads, then the run's keys (task = warp + k_warps * i); their
  // norm weights and cos / sin rows are immutable, so they are loaded before the wait.
  constexpr int TASKS = ROPE ? (k_max_group + k_run + k_warps - 1) / k_warps : 1;
  const int tasks = ROPE ? static_cast<int>(G) + (c1 > fresh0 ? nf : 0) : 0;
  float wq[ROPE ? DPL : 1], wk[ROPE ? DPL : 1], cs[TASKS][C], sn[TASKS][C];
  if constexpr (ROPE) {
    head_norm_weights(a.rope.q_norm, HD, wq);
    head_norm_weights(a.rope.k_norm, HD, wk);
#pragma unroll
    for (int i = 0; i < TASKS; ++i) {
      const int task = warp + k_warps * i;
      rope_cos_sin(a.rope.cos, a.rope.sin, task < G ? pos : fresh0 + (task - G), a.rope.rot_dim,
                   task < tasks, cs[i], sn[i]);
    }
  }
  // The launch's K/V prefetch budget shared by its working blocks (rows of 2 * HD bf16).
  int64_t pk = k_prefetch_keys;
  if (a.split.prefetch_bytes >= 0)
    pk = min(pk, a.split.prefetch_bytes /
                     (int64_t{gridDim.x} * gridDim.y * used * 2 * HD * int64_t{sizeof(bf16)}));
  prefetch_rows(kc, vc, kv_dim, HD, c0, min(c1, c0 + pk));
  pdl_wait();
  pdl_trigger();

  const int n_tiles = static_cast<int>((c1 - c0 + k_tile - 1) / k_tile);
  const bool evict_first = a.split.kv_evict_first;
  const uint64_t policy = evict_first ? l2_evict_first_policy() : 0;
  auto load_tile = [&](int tile, int stage) {
    const int64_t kt = c0 + int64_t{tile} * k_tile;
    for (int i = tid; i < k_tile * (HD / 8); i += 32 * k_warps) {
      const int r = i / (HD / 8), c = (i % (HD / 8)) * 8;
      const int64_t key = kt + r;
      const bool ok = key < c1 && key < fresh0;  // else zero-filled
      const int64_t off = ok ? key * kv_dim + c : 0;
      const uint32_t kd = smem_u32(ks + (stage * k_tile + r) * P + c),
                     vd = smem_u32(vs + (stage * k_tile + r) * P + c);
      if (evict_first) {
        cp_async16_hint(kd, kc + off, ok ? 16 : 0, policy);
        cp_async16_hint(vd, vc + off, ok ? 16 : 0, policy);
      } else {
        cp_async16(kd, kc + off, ok ? 16 : 0);
        cp_async16(vd, vc + off, ok ? 16 : 0);
      }
    }
  };
#pragma unroll
  for (int i = 0; i < S - 1; ++i) {
    if (i < n_tiles) load_tile(i, i);
    cp_async_commit();  // possibly empty: keeps the group count per tile
  }

  // The group's q heads as rows 0 .. G-1 (bf16 hi + lo), rows G .. 15 zero. ROPE: every task's
  // q / k (and v) loads are issued first, one memory round trip for all of a warp's tasks.
  __shared__ float s_stage[k_warps][ROPE ? HD : 1];
  __shared__ alignas(16) bf16 s_kf[ROPE ? k_run : 1][ROPE ? HD : 1],
      s_vf[ROPE ? k_run : 1][ROPE ? HD : 1];
  auto put_q = [&](int64_t r, int64_t d, float x) {
    const bf16 h = __float2bfloat16_rn(x);
    qs[r * P + d] = h;
    (PACK ? qs + 8 * P : ql)[r * P + d] = __float2bfloat16_rn(x - __bfloat162float(h));
  };
  if constexpr (ROPE) {
    float val[TASKS][DPL], vv[TASKS][DPL];
#pragma unroll
    for (int i = 0; i < TASKS; ++i) {
      const int task = warp + k_warps * i, f = task - static_cast<int>(G);
      const int64_t tf = t - (nf - 1 - f);  // a key task's token
      const bool on = task < tasks, is_q = task < G;
      const float* src =
          is_q ? a.q + t * q_dim + (g * G + task) * HD : a.rope.k + tf * kv_dim + g * HD;
      const float* vsrc = a.rope.v + tf * kv_dim + g * HD;
#pragma unroll
      for (int j = 0; j < DPL; ++j) {
        val[i][j] = on ? src[lane + 32 * j] : 0.f;
        vv[i][j] = on && !is_q ? vsrc[lane + 32 * j] : 0.f;
      }
    }
#pragma unroll
    for (int i = 0; i < TASKS; ++i) {
      const int task = warp + k_warps * i, f = task - static_cast<int>(G);
      if (task >= tasks) break;
      if (task < G) {
        head_norm_rope(val[i], wq, a.rope.q_norm != nullptr, a.rope.eps, HD, a.rope.rot_dim,
                       a.rope.interleaved, cs[i], sn[i], s_stage[warp],
                       [&](int64_t d, float x) { put_q(task, d, x); });
      } else {
        // The token's own rows, stored by the block of its last chunk.
        const bool store = f == nf - 1 && split == used - 1;
        const int64_t row = cache0 + pos * kv_dim + g * HD;
        bf16* kw = store ? static_cast<bf16*>(const_cast<void*>(a.k_cache)) + row : nullptr;
        bf16* vw = store ? static_cast<bf16*>(const_cast<void*>(a.v_cache)) + row : nullptr;
        head_norm_rope(val[i], wk, a.rope.k_norm != nullptr, a.rope.eps, HD, a.rope.rot_dim,
                       a.rope.interleaved, cs[i], sn[i], s_stage[warp], [&](int64_t d, float x) {
                         const bf16 e = to_elem<bf16>(x);
                         s_kf[f][d] = e;
                         if (kw) kw[d] = e;
                       });
#pragma unroll
        for (int j = 0; j < DPL; ++j) {
          const int d = lane + 32 * j;
          const bf16 e = to_elem<bf16>(vv[i][j]);
          s_vf[f][d] = e;
          if (vw) vw[d] = e;
        }
      }
      __syncwarp();  // s_stage[warp] read out before the warp's next task writes it
    }
  } else {
    for (int i = tid; i < G * (HD / 4); i += 32 * k_warps) {
      const int64_t r = i / (HD / 4), c = (i % (HD / 4)) * 4;
      const float4 v = *reinterpret_cast<const float4*>(a.q + t * q_dim + (g * G + r) * HD + c);
      put_q(r, c, v.x), put_q(r, c + 1, v.y), put_q(r, c + 2, v.z), put_q(r, c + 3, v.w);
    }
  }
  if constexpr (PACK) {  // rows G .. 7 and their lo rows 8 + G .. 15
    for (int i = static_cast<int>(G) * HD + tid; i < 8 * HD; i += 32 * k_warps)
      qs[i / HD * P + i % HD] = qs[(i / HD + 8) * P + i % HD] = __float2bfloat16_rn(0.f);
  } else {
    for (int i = static_cast<int>(G) * HD + tid; i < k_rows * HD; i += 32 * k_warps)
      qs[i / HD * P + i % HD] = ql[i / HD * P + i % HD] = __float2bfloat16_rn(0.f);
  }

  const float sl = a.scale * k_log2e;  // scores in log2 units
  float o[DT][4];
#pragma unroll
  for (int j = 0; j < DT; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
  float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.f, l_b = 0.f;  // rows gid, gid + 8
  for (int tile = 0; tile < n_tiles; ++tile) {
    if (tile + S - 1 < n_tiles) load_tile(tile + S - 1, (tile + S - 1) % S);
    cp_async_commit();  // possibly empty: keeps "wait S - 1" meaning "this tile has landed"
    cp_async_wait<S - 1>();
    __syncthreads();  // the tile (and, the first time, Q) visible to every warp
    const int stage = tile % S;
    const int64_t kt = c0 + int64_t{tile} * k_tile;
    bf16* kst = ks + stage * k_tile * P;
    bf16* vst = vs + stage * k_tile * P;
    if (ROPE && kt + k_tile > fresh0 && fresh0 < c1) {  // the run's keys, over the zero rows
      const int64_t r0 = max(kt, fresh0), r1 = min(kt + k_tile, c1);
      for (int64_t i = tid; i < (r1 - r0) * HD; i += 32 * k_warps) {
        const int64_t key = r0 + i / HD, d = i % HD;
        kst[(key - kt) * P + d] = s_kf[key - fresh0][d];
        vst[(key - kt) * P + d] = s_vf[key - fresh0][d];
      }
      __syncthreads();
    }
    const int64_t kw = kt + warp * 16;  // this warp's 16 keys
    if (kw < c1) {
      // S = Q K^T: 16 rows x 16 keys.
      float s[2][4] = {};
#pragma unroll
      for (int k0 = 0; k0 < HD; k0 += 16) {
        uint32_t qa[4], qb[4], kb[4];
        const int q_off = (lane & 15) * P + k0 + (lane >> 4) * 8;
        ldsm_x4(qa, smem_u32(qs + q_off));
        if constexpr (!PACK) ldsm_x4(qb, smem_u32(ql + q_off));
        ldsm_x4(kb, smem_u32(kst + (warp * 16 + (lane & 7) + (lane >> 4) * 8) * P + k0 +
                             ((lane >> 3) & 1) * 8));
        if constexpr (!PACK) {
          mma(s[0], qb, kb[0], kb[1]);
          mma(s[1], qb, kb[2], kb[3]);
        }
        mma(s[0], qa, kb[0], kb[1]);
        mma(s[1], qa, kb[2], kb[3]);
      }
      if constexpr (PACK)  // row gid's score: its hi part plus its lo part (row gid + 8)
#pragma unroll
        for (int j = 0; j < 2; ++j) s[j][0] += s[j][2], s[j][1] += s[j][3];
      // Scale, mask keys past the chunk, online softmax, O += P V.
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int64_t key = kw + j * 8 + 2 * tig + (e & 1);
          s[j][e] = key < c1 ? s[j][e] * sl : -INFINITY;
        }
      if constexpr (PACK)  // rows gid + 8 follow row gid (same max, so o's halves scale alike)
#pragma unroll
        for (int j = 0; j < 2; ++j) s[j][2] = s[j][0], s[j][3] = s[j][1];
      online_softmax(s, m_a, m_b, l_a, l_b, o);
      if constexpr (PACK)
        mma_pv16_packed<HD, P>(o, s[0], s[1], vst + warp * 16 * P);
      else
        mma_pv16<HD, P>(o, s[0], s[1], vst + warp * 16 * P);
    }
    __syncthreads();  // this stage is consumed before the next iteration refills it
  }
  // Row sums over the quad; each warp's rows into the merge area (the K/V tiles, now free).
#pragma unroll
  for (int o2 = 1; o2 < 4; o2 <<= 1) {
    l_a += __shfl_xor_sync(0xffffffffu, l_a, o2);
    l_b += __shfl_xor_sync(0xffffffffu, l_b, o2);
  }
  if constexpr (PACK)  // o's P_lo V half (rows gid + 8) into row gid
#pragma unroll
    for (int j = 0; j < DT; ++j) o[j][0] += o[j][2], o[j][1] += o[j][3];
  float* s_o = reinterpret_cast<float*>(ks);  // [k_warps][k_rows][HD]
  float* s_ml = s_o + k_warps * k_rows * HD;  // [k_warps][k_rows][max, sum]
  const int ra = warp * k_rows + gid, rb = ra + 8;
#pragma unroll
  for (int j = 0; j < DT; ++j) {
    *reinterpret_cast<float2*>(s_o + ra * HD + j * 8 + 2 * tig) = make_float2(o[j][0], o[j][1]);
    *reinterpret_cast<float2*>(s_o + rb * HD + j * 8 + 2 * tig) = make_float2(o[j][2], o[j][3]);
  }
  if (tig == 0) {
    s_ml[2 * ra] = m_a, s_ml[2 * ra + 1] = l_a;
    s_ml[2 * rb] = m_b, s_ml[2 * rb + 1] = l_b;
  }
  __syncthreads();
  // The block's (max, sum, o) per row: its output, or its chunk's partial.
  for (int i = tid; i < G * HD; i += 32 * k_warps) {
    const int r = i / HD, d = i % HD;
    const int64_t h = g * G + r;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < k_warps; ++w) mx = fmaxf(mx, s_ml[2 * (w * k_rows + r)]);
    float sum = 0.f, acc = 0.f;
#pragma unroll
    for (int w = 0; w < k_warps; ++w) {
      const float mw = s_ml[2 * (w * k_rows + r)];
      const float f = mw == -INFINITY ? 0.f : exp2f(mw - mx);  // a warp that saw no key
      sum += s_ml[2 * (w * k_rows + r) + 1] * f;
      acc += s_o[(w * k_rows + r) * HD + d] * f;
    }
    if (used > 1) {
      float* part = a.split.partial + ((t * a.n_heads + h) * a.split.max_splits + split) * kSlot;
      if (d == 0) part[0] = mx, part[1] = sum;
      part[4 + d] = acc;
    } else {
      if (a.sinks) sum += exp2f(a.sinks[h] * k_log2e - mx);
      a.out[t * q_dim + h * HD + d] = acc / sum;
    }
  }
  if (used == 1) return;
  // The last block of the (token, kv head) merges every chunk of its G rows.
  __shared__ uint32_t s_last;
  __syncthreads();  // the block's partials stored before thread 0 counts the chunk
  uint32_t* counter = a.split.counters + t * a.n_heads + g * G;
  if (tid == 0) s_last = atomic_add_acq_rel(counter, 1u) + 1 == static_cast<uint32_t>(used);
  __syncthreads();  // thread 0's acquire ordered before every thread's reads below
  if (!s_last) return;
  if (tid == 0) *counter = 0;  // ready for the next launch
  // Chunk weights per row (a warp per row, lane c holds chunk c's (max, sum)) and 1 / sum.
  __shared__ float s_f[k_rows][k_attention_max_splits], s_inv[k_rows];
  const int64_t ms = a.split.max_splits;
  const float* base = a.split.partial + (t * a.n_heads + g * G) * ms * kSlot;  // row r: + r ms
  for (int64_t r = warp; r < G; r += k_warps) {
    const float* pr = base + r * ms * kSlot;
    float mc = -INFINITY, lc = 0.f;
    if (lane < used) mc = __ldcg(pr + lane * kSlot), lc = __ldcg(pr + lane * kSlot + 1);
    float mx = mc;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    const float fc = lane < used ? exp2f(mc - mx) : 0.f;  // every chunk saw keys
    float sum = warp_sum(lc * fc);
    if (a.sinks) sum += exp2f(a.sinks[g * G + r] * k_log2e - mx);
    s_f[r][lane] = fc;
    if (lane == 0) s_inv[r] = 1.f / sum;
  }
  // The chunks' o rows staged in shared memory by cp.async (a batch of chunks at a time: all of
  // a batch's loads in flight at once), summed into s_acc by the thread owning (row, 4 dims).
  float* s_acc = reinterpret_cast<float*>(ks);  // [G][HD]
  float* stage = s_acc + k_rows * HD;           // [G][batch][HD]
  constexpr int64_t kRegion = sizeof(bf16) * P * 2 * S * k_tile / sizeof(float) - k_rows * HD;
  // (32-bit indices and no division by a runtime value: 64-bit divisions are ~70 instructions.)
  constexpr int quads = HD / 4;
  const int gi = static_cast<int>(G), batch = static_cast<int>(kRegion / (G * HD));
  for (int i = tid; i < gi * HD; i += 32 * k_warps) s_acc[i] = 0.f;
  for (int b0 = 0; b0 < used; b0 += batch) {
    const int nb = min(batch, static_cast<int>(used) - b0);
    for (int cc = 0; cc < nb; ++cc)
      for (int r = warp; r < gi; r += k_warps)
        for (int k4 = lane; k4 < quads; k4 += 32)
          cp_async16(smem_u32(stage + (r * nb + cc) * HD + 4 * k4),
                     base + (int64_t{r} * ms + b0 + cc) * kSlot + 4 + 4 * k4);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();  // the batch (and, the first time, s_f / s_acc) visible to every thread
    for (int i = tid; i < gi * quads; i += 32 * k_warps) {
      const int r = i / quads, k4 = i % quads;
      float4 acc = reinterpret_cast<float4*>(s_acc)[i];
      for (int cc = 0; cc < nb; ++cc) {
        const float f = s_f[r][b0 + cc];
        const float4 v = reinterpret_cast<const float4*>(stage + (r * nb + cc) * HD)[k4];
        acc.x += f * v.x, acc.y += f * v.y, acc.z += f * v.z, acc.w += f * v.w;
      }
      reinterpret_cast<float4*>(s_acc)[i] = acc;
    }
    __syncthreads();  // the batch is consumed before the next one is staged over it
  }
  for (int i = tid; i < gi * quads; i += 32 * k_warps) {
    const int r = i / quads, k4 = i % quads;
    float4 v = reinterpret_cast<float4*>(s_acc)[i];
    const float inv = s_inv[r];
    v.x *= inv, v.y *= inv, v.z *= inv, v.w *= inv;
    reinterpret_cast<float4*>(a.out + t * q_dim + (g * G + r) * HD)[k4] = v;
  }
}

// FT_ATTN_GQA_PACK=0: the hi and lo MMAs apart for groups of <= 8 heads too (A/B runs), until
// set_attention_gqa_pack(true).
std::atomic<bool>& pack_on() {
  static std::atomic<bool> on{env_on("FT_ATTN_GQA_PACK")};
  return on;
}

template <int HD, int W>
void launch_warps(const AttentionArgs& a) {
  const bool pack = pack_on().load() && a.n_heads / a.n_kv_heads <= 8;
  const auto kernel = a.rope.k ? (pack ? gqa_kernel<HD, W, true, true>
                                       : gqa_kernel<HD, W, true, false>)
                               : (pack ? gqa_kernel<HD, W, false, true>
                                       : gqa_kernel<HD, W, false, false>);
  constexpr size_t smem = smem_bytes<HD, W>();
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(smem)));
  // FT_ATTN_ONE_WAVE=0: chunks of one tile's keys however many waves they take (A/B).
  static const bool one_wave = env_on("FT_ATTN_ONE_WAVE");
  // The K/V prefetched into L2 before the wait: 8 MiB for the whole launch (the first keys of
  // each chunk), the rest streamed L2 evict-first. At 16k keys the per-chunk 512 keys were the
  // layer's whole 33.5 MB, which with the O / router prefetch and the QKV GEMV overflowed the
  // 50 MB L2 (DEVELOPERS.md). A/B: FT_ATTN_PREFETCH_KB (-1: 512 keys a chunk),
  // FT_ATTN_KV_EVICT_FIRST=0.
  // (A sixth of L2 where that is less: 8 MiB on the H200's 50 MiB, 1 MiB on a 6 MiB L2.)
  static const int64_t prefetch_kb =
      env_int("FT_ATTN_PREFETCH_KB",
              std::min<int64_t>(8192, static_cast<int64_t>(l2_cache_bytes()) / 6144));
  static const bool evict_first = env_on("FT_ATTN_KV_EVICT_FIRST");
  AttentionArgs b = a;
  b.split.resident =
      one_wave ? resident_blocks(reinterpret_cast<const void*>(kernel), 32 * W, smem) : 0;
  b.split.prefetch_bytes = prefetch_kb < 0 ? -1 : prefetch_kb * 1024;
  b.split.kv_evict_first = evict_first;
  const unsigned splits = a.split.max_splits > 0 ? static_cast<unsigned>(a.split.max_splits) : 1u;
  const dim3 grid(static_cast<unsigned>(a.n_kv_heads), static_cast<unsigned>(a.n_tokens), splits);
  launch_kernel(kernel, grid, dim3(32 * W), smem, b);
}

// Whether W-warp blocks at HD fit the device's shared memory (consumer GPUs allow 99 KiB a
// block: 4 warps at head_dim 128, none at 256).
template <int HD, int W>
bool fits() {
  if constexpr (W > block_warps<HD>()) {
    return false;
  } else {
    // The fused-rope variant: more static shared memory.
    return smem_fits(gqa_kernel<HD, W, true, false>, smem_bytes<HD, W>());
  }
}

// The block's warps at HD: 8 where they fit, else 4, else 0 (unsupported: attention_decode()
// takes the block per q head). FT_ATTN_GQA_WARPS=4: 4-warp blocks at every head dim (A/B).
template <int HD>
int warps() {
  static const bool four = env_int("FT_ATTN_GQA_WARPS", 0) == 4;
  if (!four && fits<HD, 8>()) return 8;
  return fits<HD, 4>() ? 4 : 0;
}

int warps(int64_t head_dim) {
  int w = 0;
  with_head_dim(head_dim, [&](auto hd) { w = warps<decltype(hd)::value>(); });
  return w;
}

template <int HD>
void launch(const AttentionArgs& a) {
  if constexpr (block_warps<HD>() == 8)
    if (warps<HD>() == 8) return launch_warps<HD, 8>(a);
  launch_warps<HD, 4>(a);
}

std::atomic<bool>& gqa_on() {  // FT_ATTN_GQA=0: off until set_attention_gqa(true)
  static std::atomic<bool> on{env_on("FT_ATTN_GQA")};
  return on;
}
}  // namespace

void set_attention_gqa(bool on) { gqa_on().store(on); }
void set_attention_gqa_pack(bool on) { pack_on().store(on); }

bool attention_decode_gqa_supported(const AttentionArgs& a) {
  const int64_t G = a.n_heads / a.n_kv_heads, hd = a.head_dim;
  return gqa_on().load() && a.kv_dtype == DType::BF16 && G >= 2 && G <= k_max_group &&
         warps(hd) > 0 && reinterpret_cast<uintptr_t>(a.q) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(a.k_cache) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(a.v_cache) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(a.out) % 16 == 0 && a.seq_stride % 8 == 0;
}

// ---- launcher (attention_decode() dispatches here where attention_decode_gqa_supported)
void attention_decode_gqa(const AttentionArgs& a) {
  with_head_dim(a.head_dim, [&](auto hd) { launch<decltype(hd)::value>(a); });
}

}  // namespace ft::cuda
