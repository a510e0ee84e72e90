// attention_flash: flash-attention prefill over a bf16 KV cache on bf16 tensor cores
// (mma.sync m16n8k16, f32 accumulation, online softmax in f32 registers). K and V are exact
// bf16; the f32 operands Q and P go in as two bf16 parts (x = hi + lo, two MMAs each), so the
// only rounding left is the cache's (the decode kernel's accuracy: a tie-prone MoE router sees
// the same hidden states from prefill and decode).
// A block owns 64 rows of one KV head, a row being one (query token, q head of the group): the
// group's q heads share every K/V tile. Rows are token-major (row = token * group + head), so a
// warp's 16 rows are consecutive tokens (or heads of one token). K/V tiles stream through
// shared memory with cp.async, double-buffered; S = Q K^T stays in registers and becomes the A
// operand of O += P V without a round trip through shared memory. Causal masking per row (keys
// <= pos; > pos - window when a window is set); a warp skips tiles wholly after its rows (or
// before their windows), and blocks are issued heaviest first. Optional per-head sink logits
// join the softmax denominator only (gpt-oss).
#include <cuda_bf16.h>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/mma_bf16.cuh"

namespace ft::cuda {

namespace {
constexpr int k_warps = 4, k_rows = 16 * k_warps;  // rows per block
constexpr float k_log2e = 1.4426950408889634f;

// Keys per K/V tile: 64, or 32 at head_dim 256 (registers: O is head_dim / 2 floats a thread);
// half that where the device's shared memory cannot hold two stages of them (consumer GPUs'
// 99 KiB a block: 32 at head_dim 128, 16 at 256; tile()).
template <int HD>
constexpr int bk() {
  return HD >= 256 ? 32 : 64;
}
template <int HD>
constexpr int pitch() {  // shared-memory row pitch in bf16: +8 keeps ldmatrix conflict-free
  return HD + 8;
}
template <int HD, int BK>
constexpr size_t smem_bytes() {  // Q hi, Q lo, then K and V double-buffered
  return sizeof(__nv_bfloat16) * pitch<HD>() * (2 * k_rows + 4 * BK);
}

// ---- kernels
template <int HD, int BK>
__global__ void __launch_bounds__(32 * k_warps)
    flash_kernel(const __grid_constant__ AttentionArgs a) {
  constexpr int P = pitch<HD>(), NT = BK / 8, DT = HD / 8;
  extern __shared__ float4 smem4[];
  __nv_bfloat16* qs = reinterpret_cast<__nv_bfloat16*>(smem4);  // [k_rows][P] hi
  __nv_bfloat16* ql = qs + k_rows * P;                          // [k_rows][P] lo
  __nv_bfloat16* ks = ql + k_rows * P;                          // [2][BK][P]
  __nv_bfloat16* vs = ks + 2 * BK * P;                          // [2][BK][P]
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int gid = lane >> 2, tig = lane & 3;
  const int64_t G = a.n_heads / a.n_kv_heads, g = blockIdx.y;
  const int64_t kv_dim = a.n_kv_heads * HD, q_dim = a.n_heads * HD;
  const int64_t n_rows = a.n_tokens * G;
  const int64_t r0 = (gridDim.x - 1 - blockIdx.x) * int64_t{k_rows};  // heaviest blocks first
  const __nv_bfloat16* kc = static_cast<const __nv_bfloat16*>(a.k_cache);
  const __nv_bfloat16* vc = static_cast<const __nv_bfloat16*>(a.v_cache);

  // Q rows as bf16 hi + lo in shared memory.
  for (int i = tid; i < k_rows * (HD / 4); i += 32 * k_warps) {
    const int r = i / (HD / 4), c = (i % (HD / 4)) * 4;
    const int64_t R = r0 + r;
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (R < n_rows) {
      const int64_t t = R / G, h = g * G + R % G;
      v = *reinterpret_cast<const float4*>(a.q + t * q_dim + h * HD + c);
    }
    uint2 hi, lo;
    split_bf16(v.x, v.y, hi.x, lo.x);
    split_bf16(v.z, v.w, hi.y, lo.y);
    *reinterpret_cast<uint2*>(qs + r * P + c) = hi;
    *reinterpret_cast<uint2*>(ql + r * P + c) = lo;
  }
  // This thread's two rows (gid, gid + 8 of the warp's 16): positions, -1 when past the end.
  const int64_t Ra = r0 + warp * 16 + gid, Rb = Ra + 8;
  const int pa = Ra < n_rows ? static_cast<int>(a.pos0 + Ra / G) : -1;
  const int pb = Rb < n_rows ? static_cast<int>(a.pos0 + Rb / G) : -1;
  const int win = static_cast<int>(a.window);
  const int w_max = __reduce_max_sync(0xffffffffu, max(pa, pb));
  const int w_min =
      __reduce_min_sync(0xffffffffu, min(pa < 0 ? INT32_MAX : pa, pb < 0 ? INT32_MAX : pb));
  const bool w_partial = __any_sync(0xffffffffu, pa < 0 || pb < 0);
  // The block's keys: [k_begin, k_end).
  const int64_t last_row = min(r0 + k_rows, n_rows) - 1;
  const int64_t blk_min = a.pos0 + r0 / G, blk_max = a.pos0 + last_row / G;
  const int64_t k_end = blk_max + 1;
  const int64_t k_begin = win > 0 ? max(int64_t{0}, blk_min - win + 1) / BK * BK : 0;
  const int n_tiles = static_cast<int>((k_end - k_begin + BK - 1) / BK);

  auto load_tile = [&](int tile, int stage) {
    const int64_t kt = k_begin + int64_t{tile} * BK;
    for (int i = tid; i < BK * (HD / 8); i += 32 * k_warps) {
      const int r = i / (HD / 8), c = (i % (HD / 8)) * 8;
      const int64_t key = kt + r;
      const bool ok = key < k_end;
      const int64_t off = ok ? key * kv_dim + g * HD + c : 0;
      cp_async16(smem_u32(ks + (stage * BK + r) * P + c), kc + off, ok ? 16 : 0);
      cp_async16(smem_u32(vs + (stage * BK + r) * P + c), vc + off, ok ? 16 : 0);
    }
  };

  const float sl = a.scale * k_log2e;  // scores in log2 units
  float o[DT][4];
#pragma unroll
  for (int j = 0; j < DT; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
  float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.f, l_b = 0.f;

  load_tile(0, 0);
  cp_async_commit();
  for (int tile = 0; tile < n_tiles; ++tile) {
    if (tile + 1 < n_tiles) load_tile(tile + 1, (tile + 1) & 1);
    cp_async_commit();  // possibly empty: keeps "wait 1" meaning "this tile has landed"
    cp_async_wait<1>();
    __syncthreads();
    const int stage = tile & 1;
    const int kt = static_cast<int>(k_begin) + tile * BK;
    const bool skip = w_max < 0 || kt > w_max || (win > 0 && kt + BK - 1 <= w_min - win);
    if (!skip) {
      const __nv_bfloat16* kst = ks + stage * BK * P;
      const __nv_bfloat16* vst = vs + stage * BK * P;
      // S = Q K^T: 16 rows x BK keys per warp.
      float s[NT][4];
#pragma unroll
      for (int j = 0; j < NT; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
      for (int k0 = 0; k0 < HD; k0 += 16) {
        uint32_t qa[4], qb[4];  // Q hi, lo
        const int q_off = (warp * 16 + (lane & 15)) * P + k0 + (lane >> 4) * 8;
        ldsm_x4(qa, smem_u32(qs + q_off));
        ldsm_x4(qb, smem_u32(ql + q_off));
#pragma unroll
        for (int n0 = 0; n0 < BK; n0 += 16) {
          uint32_t kb[4];
          ldsm_x4(kb, smem_u32(kst + (n0 + (lane & 7) + (lane >> 4) * 8) * P + k0 +
                               ((lane >> 3) & 1) * 8));
          mma(s[n0 / 8], qb, kb[0], kb[1]);
          mma(s[n0 / 8 + 1], qb, kb[2], kb[3]);
          mma(s[n0 / 8], qa, kb[0], kb[1]);
          mma(s[n0 / 8 + 1], qa, kb[2], kb[3]);
        }
      }
      // Scale, mask, online softmax (rows a = gid, b = gid + 8; a quad shares a row).
      const bool need_mask = w_partial || kt + BK - 1 > w_min || (win > 0 && kt <= w_max - win);
#pragma unroll
      for (int j = 0; j < NT; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float v = s[j][e] * sl;
          if (need_mask) {
            const int key = kt + j * 8 + 2 * tig + (e & 1);
            const int p = e < 2 ? pa : pb;
            if (key > p || (win > 0 && key <= p - win)) v = -INFINITY;
          }
          s[j][e] = v;
        }
      }
      online_softmax(s, m_a, m_b, l_a, l_b, o);
      // O += P V, 16 keys at a time.
#pragma unroll
      for (int kk = 0; kk < BK / 16; ++kk)
        mma_pv16<HD, P>(o, s[2 * kk], s[2 * kk + 1], vst + kk * 16 * P);
    }
    __syncthreads();  // this stage is consumed before the next iteration refills it
  }
  // Row sums over the quad, the sink, then O / l.
#pragma unroll
  for (int o2 = 1; o2 < 4; o2 <<= 1) {
    l_a += __shfl_xor_sync(0xffffffffu, l_a, o2);
    l_b += __shfl_xor_sync(0xffffffffu, l_b, o2);
  }
  const int64_t rows[2] = {Ra, Rb};
  const float ls[2] = {l_a, l_b}, ms[2] = {m_a, m_b};
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t R = rows[half];
    if (R >= n_rows) continue;
    const int64_t t = R / G, h = g * G + R % G;
    float l = ls[half];
    if (a.sinks) l += exp2f(a.sinks[h] * k_log2e - ms[half]);
    const float inv = 1.f / l;
    float* out = a.out + t * q_dim + h * HD;
#pragma unroll
    for (int j = 0; j < DT; ++j)
      *reinterpret_cast<float2*>(out + j * 8 + 2 * tig) =
          make_float2(o[j][2 * half] * inv, o[j][2 * half + 1] * inv);
  }
}

template <int HD, int BK>
void launch_bk(const AttentionArgs& a) {
  constexpr size_t smem = smem_bytes<HD, BK>();
  CUDA_CHECK(cudaFuncSetAttribute(flash_kernel<HD, BK>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(smem)));
  const int64_t rows = a.n_tokens * (a.n_heads / a.n_kv_heads);
  const dim3 grid(static_cast<unsigned>((rows + k_rows - 1) / k_rows),
                  static_cast<unsigned>(a.n_kv_heads));
  flash_kernel<HD, BK><<<grid, 32 * k_warps, smem, stream()>>>(a);
  CUDA_CHECK_LAUNCH();
}

template <int HD, int BK>
bool fits() {
  return smem_fits(flash_kernel<HD, BK>, smem_bytes<HD, BK>());
}

// Keys per tile at HD on this device: bk<HD>(), else half of it, else 0 (unsupported).
template <int HD>
int tile() {
  constexpr int B = bk<HD>();
  if (fits<HD, B>()) return B;
  if constexpr (HD >= 128)
    if (fits<HD, B / 2>()) return B / 2;
  return 0;
}

int tile(int64_t head_dim) {
  int bk = 0;
  with_head_dim(head_dim, [&](auto hd) { bk = tile<decltype(hd)::value>(); });
  return bk;
}

template <int HD>
void launch(const AttentionArgs& a) {
  if constexpr (HD >= 128)
    if (tile<HD>() != bk<HD>()) return launch_bk<HD, bk<HD>() / 2>(a);
  launch_bk<HD, bk<HD>()>(a);
}
}  // namespace

bool attention_flash_supported(int64_t head_dim) { return tile(head_dim) > 0; }

// ---- launcher (attention() dispatches BF16 prefill here)
void attention_flash(const AttentionArgs& a) {
  FT_CHECK(a.kv_dtype == DType::BF16 && attention_flash_supported(a.head_dim) && !a.pos && !a.seq &&
               a.window >= 0 && a.pos0 + a.n_tokens <= INT32_MAX,
           "attention_flash: needs bf16 caches, head_dim 32/64/128/256 (tiles that fit the "
           "device's shared memory) and pos0-based positions (head_dim {})",
           a.head_dim);
  FT_CHECK(reinterpret_cast<uintptr_t>(a.q) % 16 == 0 &&
               reinterpret_cast<uintptr_t>(a.k_cache) % 16 == 0 &&
               reinterpret_cast<uintptr_t>(a.v_cache) % 16 == 0 &&
               reinterpret_cast<uintptr_t>(a.out) % 8 == 0,
           "attention_flash: unaligned q/k/v/out");
  if (a.n_tokens == 0) return;
  with_head_dim(a.head_dim, [&](auto hd) { launch<decltype(hd)::value>(a); });
}

}  // namespace ft::cuda
