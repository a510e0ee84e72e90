// quant_gemv_fp8: the FP8 (e4m3, 128x128 block scales) GEMV for 1..4 tokens on tensor cores.
// e4m3 is not an integer grid, so the int8-activation kernels do not apply, and decoding to f32
// for FFMA costs a conversion per weight (the f32 kernel: ~38% of the copy bandwidth on the
// H200). Here e4m3 pairs become f16x2 (one cvt, exact: f16 holds every e4m3 value) and go
// straight into mma.sync m16n8k16 (f16 in, f32 accumulation) as the A operand; the B operand
// is the tokens' activations, rounded to f16 after scaling each 128-column block by a power of
// two that puts its max in [2^14, 2^15) (relative error <= 2^-11 per element, the factor folded
// into the tile's scale). Only n of the 8 B columns carry tokens; the tensor pipe has the
// slack. (Decoding e4m3 with shifts and masks instead of the cvt measured slower: 60 vs 63%.)
//
// Layout: a strip is 16 rows of one matrix (the mma's M); a tile is the strip's 128 columns
// under one scale_inv value. Lane (g, t) of a warp (g = lane / 4, t = lane % 4) takes 16 bytes
// at columns 16t and 64 + 16t of rows g and g + 8 (each copy instruction of the warp reads 64
// contiguous bytes of 8 rows: whole sectors). mma j of the tile's 8 takes word j of the lane's
// row bytes: bytes 0,1 are its A columns 2t, 2t + 1 and bytes 2,3 its columns 2t + 8, 2t + 9, so
// the B fragment (token g, the same columns) is 4 consecutive activations: one 8-byte read.
// Each lane streams its 64 bytes per tile through a k_stages-deep cp.async ring in shared
// memory (it reads back only what it copied: no warp sync) so several tiles per warp are in
// flight. Blocks persist (grid: every resident block); S warps (1, 2, 4 or 8, chosen so every
// warp has strips) share each strip, warp w of the S taking tiles w, w + S, ..., and sum their
// partial rows through shared memory behind a named barrier at the strip's end (S = 1: no
// barrier, the warp stores its rows).
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <atomic>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/quant_gemv.cuh"

namespace ft::cuda::qgemv {

namespace {
constexpr int k_fwarps = 8, k_fthreads = 32 * k_fwarps;
constexpr int k_tile = 128;   // columns per scale tile
constexpr int k_max_tok = 4;  // tokens per launch (B columns used)
constexpr size_t k_fp8_smem_max = 200 * 1024;

// The launch's QParams (plain matrices, or the experts form: ids, expert_bytes, x_div, x_slot,
// y_slot, x_up) and what this kernel adds.
struct Fp8Params {
  QParams q;
  int n;               // tokens
  int tiles;           // ceil(cols / 128)
  int split;           // S: warps per strip
  int tiles_per_warp;  // ceil(tiles / S): the same for every warp of a group (barriers line up)
  int64_t strip0[k_gemv_multi + 1];  // first strip of each matrix
  size_t scale_offset;  // experts form: the scale tiles' offset in each expert's record
  bool ids_early;       // experts form: ids may be read before the PDL wait (QuantExpertGemv)
};

// Two e4m3 (the low 16 bits of v) -> f16x2, exactly (one cvt on sm_89+).
__device__ __forceinline__ uint32_t e4m3x2_h2(uint32_t v) {
  const __half2_raw h =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(v & 0xffffu), __NV_E4M3);
  return static_cast<uint32_t>(h.x) | static_cast<uint32_t>(h.y) << 16;
}

__device__ __forceinline__ void mma16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

constexpr int k_stages = 4;  // tiles per warp in the cp.async ring (3 in flight while one is used)
constexpr int k_lane_bytes = 64, k_warp_ring = k_stages * 32 * k_lane_bytes;

// Shared memory: activations f16 [n][tiles * 128], the warps' partial rows f32
// [2][k_fwarps][16][k_max_tok], the warps' rings, the activations' factors f32 [n][tiles].
// A token's activations are tiles * 128 + 64 halves apart: the tokens' B reads (4 lanes x 16
// bytes at 32-byte steps each) then fall on different banks.
__host__ __device__ inline int fp8_xstride(int tiles) { return tiles * k_tile + 64; }
__host__ __device__ inline size_t fp8_ring_at(int n, int tiles) {
  return size_t(n) * fp8_xstride(tiles) * 2 + size_t{2} * k_fwarps * 16 * k_max_tok * 4;
}
inline size_t fp8_smem(int n, int tiles) {
  return fp8_ring_at(n, tiles) + size_t{k_fwarps} * k_warp_ring + size_t(n) * tiles * 4;
}

__global__ void __launch_bounds__(k_fthreads, 3)
    fp8_mma_kernel(const __grid_constant__ Fp8Params p) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int ncols = fp8_xstride(p.tiles);
  __half* xs = reinterpret_cast<__half*>(smem);
  float* part = reinterpret_cast<float*>(smem + size_t(p.n) * ncols * 2);
  uint8_t* ring = smem + fp8_ring_at(p.n, p.tiles);  // 16-byte aligned: ncols % 128 == 0
  float* xf = reinterpret_cast<float*>(ring + k_fwarps * k_warp_ring);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int S = p.split, ipw = p.tiles_per_warp, sub = warp % S;
  // This warp's group takes strips grp, grp + ngrp, ...; items: its tiles of each.
  const int64_t nstrips = p.strip0[p.q.count];
  const int64_t ngrp = int64_t{gridDim.x} * (k_fwarps / S),
                grp = int64_t{blockIdx.x} * (k_fwarps / S) + warp / S;
  const int64_t items = grp < nstrips ? ((nstrips - 1 - grp) / ngrp + 1) * ipw : 0;

  // A cursor over the warp's items: strip s (of matrix m, first row row0), tile index k < ipw.
  struct Cur {
    int64_t s, row0;
    int m, k;
  };
  auto locate = [&](Cur& c) {
    while (c.m + 1 < p.q.count && c.s >= p.strip0[c.m + 1]) ++c.m;
    c.row0 = (c.s - p.strip0[c.m]) * 16;
  };
  auto advance = [&](Cur& c) {
    if (++c.k == ipw) c.k = 0, c.s += ngrp, locate(c);
  };
  Cur ld{grp, 0, 0, 0};
  locate(ld);
  // Matrix m's weights, scales and output (the experts form: the slot's expert, offsets set
  // below).
  size_t eoff = 0;
  int64_t yoff = 0;
  const float* x = p.q.x;
  const float* xu = p.q.x_up;
  auto wmat = [&](int m) { return p.q.w[m] + eoff; };
  // A stage holds chunk c (16 bytes) of lane l at (32 c + l) * 16: each copy and each read-back
  // of the warp is 512 contiguous bytes (no bank conflicts).
  const uint32_t slot0 =
      static_cast<uint32_t>(__cvta_generic_to_shared(ring + warp * k_warp_ring)) + lane * 16;
  int64_t issued = 0;
  int ist = 0;
  auto issue = [&]() {  // the load cursor's tile into stage ist; one commit group per call
    if (issued < items) {
      const int tile = sub + S * ld.k;
      const int64_t row = ld.row0 + g, col = int64_t{tile} * k_tile + 16 * t;
      const uint8_t* src = wmat(ld.m) + row * p.q.cols + col;
      const uint32_t dst = slot0 + ist * 32 * k_lane_bytes;
#pragma unroll
      for (int h = 0; h < 2; ++h) {  // row g, then g + 8
        const bool rok = tile < p.tiles && row + 8 * h < p.q.rows[ld.m];
#pragma unroll
        for (int v = 0; v < 2; ++v) {  // cols % 16 == 0: whole vectors in or out
          const bool ok = rok && col + 64 * v < p.q.cols;
          cp_async16(dst + (2 * h + v) * 512, ok ? src + 8 * h * p.q.cols + 64 * v : p.q.w[0],
                     ok ? 16 : 0);
        }
      }
      ist = ist + 1 == k_stages ? 0 : ist + 1;
      ++issued;
      advance(ld);
    }
    cp_async_commit();
  };
  // Weights are immutable: in flight before the wait, and the expert's too when its id is.
  const int64_t slot = blockIdx.y, e_early = p.q.ids && p.ids_early ? p.q.ids[slot] : -1;
  if (e_early >= 0) eoff = static_cast<size_t>(e_early) * p.q.expert_bytes;
  if (!p.q.ids || e_early >= 0)
    for (int k = 0; k < k_stages - 1; ++k) issue();
  pdl_wait();
  pdl_trigger();
  if (p.q.ids) {
    const int64_t e = p.ids_early ? e_early : p.q.ids[slot];
    yoff = slot * p.q.y_slot;
    if (e < 0) {  // computed elsewhere: contributes nothing
      for (Cur z{grp, 0, 0, 0}; z.s < nstrips; z.s += ngrp) {
        locate(z);
        if (sub == 0 && lane < 16 && z.row0 + lane < p.q.rows[z.m])
          p.q.y[z.m][yoff + z.row0 + lane] = 0.f;
      }
      return;
    }
    x += (slot / p.q.x_div) * p.q.x_slot;
    if (xu) xu += (slot / p.q.x_div) * p.q.x_slot;
    if (!p.ids_early) {
      eoff = static_cast<size_t>(e) * p.q.expert_bytes;
      for (int k = 0; k < k_stages - 1; ++k) issue();
    }
  }

  // Stage the activations: per (token, 128-column block) one warp finds max|x|, picks
  // 2^e with max * 2^e in [2^14, 2^15) and stores f16(x * 2^e) and 2^-e (0 past the columns).
  for (int j = warp; j < p.n * p.tiles; j += k_fwarps) {
    const int tok = j / p.tiles, b = j - tok * p.tiles;
    const int64_t c = int64_t{b} * k_tile + 4 * lane;
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (c < p.q.cols) {
      v = __ldg(reinterpret_cast<const float4*>(x + tok * p.q.ldx + c));
      if (xu) v = silu_mul4(v, __ldg(reinterpret_cast<const float4*>(xu + tok * p.q.ldx + c)));
    }
    float a = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));
    // e = 14 - floor(log2 a), kept so both 2^e and 2^-e are normal floats
    const int ex = a > 0.f ? static_cast<int>((__float_as_uint(a) >> 23) & 0xff) - 127 : 0;
    const int e = 14 - max(ex, -100);
    const float up = __uint_as_float(static_cast<uint32_t>(127 + e) << 23);
    const __half2 h0 = __floats2half2_rn(v.x * up, v.y * up),
                  h1 = __floats2half2_rn(v.z * up, v.w * up);
    uint2 packed;
    packed.x = *reinterpret_cast<const uint32_t*>(&h0);
    packed.y = *reinterpret_cast<const uint32_t*>(&h1);
    *reinterpret_cast<uint2*>(xs + int64_t{tok} * ncols + b * k_tile + 4 * lane) = packed;
    if (lane == 0)
      xf[tok * p.tiles + b] = a > 0.f ? __uint_as_float(static_cast<uint32_t>(127 - e) << 23) : 0.f;
  }
  __syncthreads();

  // This lane's B column: token g at the tile's columns 32t .. (lanes g >= n read token 0: finite
  // columns no output uses); its outputs: tokens 2t, 2t + 1 of rows g and g + 8 (acc[0..3]),
  // kept where the token exists.
  const __half* xb = xs + int64_t{g < p.n ? g : 0} * ncols + 16 * t;
  const bool live0 = 2 * t < p.n, live1 = 2 * t + 1 < p.n;
  const float* xf0 = xf + (live0 ? 2 * t : 0) * p.tiles;
  const float* xf1 = xf + (live1 ? 2 * t + 1 : 0) * p.tiles;
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  Cur cp{grp, 0, 0, 0};
  locate(cp);
  int cst = 0, parity = 0;
  for (int64_t i = 0; i < items; ++i) {
    issue();
    cp_async_wait<k_stages - 1>();  // this lane's copies of item i have landed
    const uint4* mine =
        reinterpret_cast<const uint4*>(ring + warp * k_warp_ring + cst * 32 * k_lane_bytes) + lane;
    cst = cst + 1 == k_stages ? 0 : cst + 1;
    const int tile = sub + S * cp.k;
    if (tile < p.tiles) {
      uint4 wv[4];
#pragma unroll
      for (int c = 0; c < 4; ++c) wv[c] = mine[32 * c];
      const uint32_t* wg = reinterpret_cast<const uint32_t*>(&wv[0]);  // row g: 8 words
      const uint32_t* wh = reinterpret_cast<const uint32_t*>(&wv[2]);  // row g + 8
      const uint4* xv = reinterpret_cast<const uint4*>(xb + tile * k_tile);
      float d[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int q = 0; q < 4; ++q) {  // 8 activations (two mmas' B) per 16-byte read
        const uint4 b = xv[8 * (q >> 1) + (q & 1)];
#pragma unroll
        for (int jj = 0; jj < 2; ++jj) {
          const int j = 2 * q + jj;
          mma16816(d, e4m3x2_h2(wg[j]), e4m3x2_h2(wh[j]), e4m3x2_h2(wg[j] >> 16),
                   e4m3x2_h2(wh[j] >> 16), jj ? b.z : b.x, jj ? b.w : b.y);
        }
      }
      const float* sm = p.q.ids ? reinterpret_cast<const float*>(wmat(cp.m) + p.scale_offset)
                                : p.q.scale_inv[cp.m];
      const float sc = __ldg(sm + (cp.row0 / 128) * p.tiles + tile);
      const float f0 = live0 ? sc * xf0[tile] : 0.f, f1 = live1 ? sc * xf1[tile] : 0.f;
      acc[0] = fmaf(f0, d[0], acc[0]), acc[1] = fmaf(f1, d[1], acc[1]);
      acc[2] = fmaf(f0, d[2], acc[2]), acc[3] = fmaf(f1, d[3], acc[3]);
    }
    if (cp.k == ipw - 1) {  // the strip's last tile for this warp: its rows are done
      const int m = cp.m;
      auto put = [&](int64_t row, int tok, float v) {
        if (row >= p.q.rows[m]) return;
        if (p.q.bias[m]) v += p.q.bias[m][row];
        float* o = p.q.y[m] + yoff + tok * p.q.rows[m] + row;
        *o = p.q.accumulate[m] ? *o + v : v;
      };
      if (S == 1) {
        if (live0) put(cp.row0 + g, 2 * t, acc[0]), put(cp.row0 + g + 8, 2 * t, acc[2]);
        if (live1) put(cp.row0 + g, 2 * t + 1, acc[1]), put(cp.row0 + g + 8, 2 * t + 1, acc[3]);
      } else {  // partial rows to shared memory; after the group's barrier its threads sum them
        float* pw = part + (parity * k_fwarps + warp) * 16 * k_max_tok;
        if (2 * t < k_max_tok) {
          pw[g * k_max_tok + 2 * t] = acc[0], pw[g * k_max_tok + 2 * t + 1] = acc[1];
          pw[(g + 8) * k_max_tok + 2 * t] = acc[2], pw[(g + 8) * k_max_tok + 2 * t + 1] = acc[3];
        }
        asm volatile("bar.sync %0, %1;" ::"r"(1 + warp / S), "r"(32 * S) : "memory");
        const int j = sub * 32 + lane;  // the group's thread j
        if (j < 16 * p.n) {
          const int r = j / p.n, tok = j - r * p.n;
          const float* pb = part + (parity * k_fwarps + warp - sub) * 16 * k_max_tok;
          float v = 0.f;
          for (int w = 0; w < S; ++w) v += pb[(w * 16 + r) * k_max_tok + tok];
          put(cp.row0 + r, tok, v);
        }
        parity ^= 1;
      }
      acc[0] = acc[1] = acc[2] = acc[3] = 0.f;
    }
    advance(cp);
  }
  cp_async_wait<0>();
}

// slots: the experts form's slot count (grid.y), 1 for plain matrices.
bool launch(Fp8Params& p, int64_t slots) {
  const size_t dyn = fp8_smem(p.n, p.tiles);
  // At most what this device allows a block (consumer GPUs: 99 KiB; sm_80: 163).
  const size_t most =
      std::min(k_fp8_smem_max, max_dynamic_smem(reinterpret_cast<const void*>(fp8_mma_kernel)));
  if (dyn > most) return false;
  static std::atomic<uint64_t> opted{0};
  opt_in_smem(fp8_mma_kernel, static_cast<int>(most), opted);
  const int64_t resident =
      resident_blocks(reinterpret_cast<const void*>(fp8_mma_kernel), k_fthreads, dyn);
  // S: the fewest warps per strip that still give every resident warp a strip (up to 8).
  const int64_t strips = p.strip0[p.q.count], warps = resident * k_fwarps;
  p.split = 1;
  while (p.split < k_fwarps && strips * slots * p.split < warps) p.split *= 2;
  p.tiles_per_warp = (p.tiles + p.split - 1) / p.split;
  const int64_t per_block = k_fwarps / p.split;  // groups per block: enough for the strips
  const int64_t grid = std::clamp<int64_t>((strips + per_block - 1) / per_block, 1,
                                           std::max<int64_t>(resident / slots, 1));
  launch_kernel(fp8_mma_kernel, dim3(static_cast<unsigned>(grid), static_cast<unsigned>(slots)),
                dim3(k_fthreads), dyn, p);
  return true;
}
}  // namespace

bool launch_fp8(const QParams& q, int64_t nt, int64_t slots, size_t scale_offset, bool ids_early) {
  // 16-byte loads of the weights (every row: cols % 16 == 0) and of the activations
  const auto al16 = [](const void* v) { return reinterpret_cast<uintptr_t>(v) % 16 == 0; };
  if (!fast_on() || nt < 1 || nt > k_max_tok || q.cols % 16 != 0 || !al16(q.x) || q.ldx % 4 != 0)
    return false;
  if (q.ids ? nt != 1 || q.x_slot % 4 != 0 || q.expert_bytes % 16 != 0 || scale_offset % 4 != 0 ||
                  (q.x_up && !al16(q.x_up))
            : q.x_up != nullptr)
    return false;
  Fp8Params p{.q = q,
              .n = static_cast<int>(nt),
              .tiles = static_cast<int>((q.cols + k_tile - 1) / k_tile),
              .split = 1,
              .tiles_per_warp = 1,
              .strip0 = {0},
              .scale_offset = scale_offset,
              .ids_early = ids_early};
  for (int m = 0; m < q.count; ++m) {
    if (!al16(q.w[m])) return false;
    p.strip0[m + 1] = p.strip0[m] + (q.rows[m] + 15) / 16;
  }
  return launch(p, q.ids ? slots : 1);
}

}  // namespace ft::cuda::qgemv
