// moe: the experts layer on stacked expert weights. Decode: a fused gate/up GEMV per (token, k)
// slot, then one down GEMV over all k fused with the weighted combine (and the residual add),
// with no host sync; with 16-byte rows gate/up runs as a streaming kernel (a persistent grid of
// warps, each with its next chunk of weights in flight while it computes the current one) and
// down as down_ahead_kernel (every weight of a warp's row loaded before the PDL wait, under
// gate_up's tail; down_stream_kernel where its rows or top-k are too long). FT_MOE_STREAM=0
// selects the block-per-8-rows kernels, FT_MOE_DOWN_AHEAD=0 down_stream_kernel, for A/B runs.
// Prefill: slots grouped by expert (count -> offsets -> gather, stable in slot order),
// per-expert matmul through cuBLAS, then the same combine through the slot -> row map (top-k
// order, deterministic).
// Block-quantized experts decode through quant_experts_gemv (gate+up, then down per slot on
// silu(gate) * up, SwiGLU fused into its input), then the combine; their prefill matmuls
// dispatch to quant_gemm.
#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/fetch.cuh"
#include "backend/cuda/moe_combine.cuh"
#include "base/env.h"

namespace ft::cuda {

namespace {
constexpr int k_rows = 8;  // output rows (warps) per GEMV block

__device__ __forceinline__ float silu(float g) { return g / (1.f + expf(-g)); }

// ---- kernels
// act[s, r] = silu(x[t] . gate[e][r]) * (x[t] . up[e][r]) for slot s = t * top_k + k.
template <typename W, bool VEC>
__global__ void gate_up_kernel(const float* __restrict__ x, const int32_t* __restrict__ ids,
                               int top_k, const W* __restrict__ gate, const W* __restrict__ up,
                               int64_t hidden, int64_t inter, bool stage,
                               float* __restrict__ act, float* __restrict__ up_raw = nullptr) {
  extern __shared__ float4 gu_smem[];
  pdl_wait();
  pdl_trigger();
  const int64_t r = blockIdx.x * int64_t{k_rows} + threadIdx.y, s = blockIdx.y;
  const int64_t e = ids[s];
  if (e < 0) return;  // computed elsewhere (uniform over the block)
  const int64_t off = (e * inter + r) * hidden;
  const W* ws[2] = {gate + off, up + off};
  // VEC: the rows' first weight vectors are in flight while the activations are staged.
  uint4 pre[2][8];
  if constexpr (VEC)
    if (r < inter) rows_load<W, 2>(ws, hidden, int64_t{threadIdx.x} * k_vec<W>, pre);
  const float* xt = x + (s / top_k) * hidden;
  if (stage) {  // the token's activations once per block, in shared memory
    float* xs = reinterpret_cast<float*>(gu_smem);
    stage_floats(xs, xt, hidden);
    __syncthreads();
    xt = xs;
  }
  if (r >= inter) return;
  float gs, us;
  if constexpr (VEC) {  // gate and up rows loaded together
    const float* xs[2] = {xt, xt};
    float acc[2] = {0.f, 0.f};
    warp_dot_rows_pre<W, 2>(xs, ws, hidden, pre, acc);
    gs = warp_sum(acc[0]), us = warp_sum(acc[1]);
  } else {
    float g[1] = {0.f}, u[1] = {0.f};
    warp_dot_partial<W, VEC, 1>(xt, hidden, ws[0], hidden, g);
    warp_dot_partial<W, VEC, 1>(xt, hidden, ws[1], hidden, u);
    gs = warp_sum(g[0]), us = warp_sum(u[0]);
  }
  if (threadIdx.x == 0 && up_raw)  // gpt-oss: raw gate and up (moe_oss_act follows)
    act[s * inter + r] = gs, up_raw[s * inter + r] = us;
  else if (threadIdx.x == 0)
    act[s * inter + r] = silu(gs) * us;
}

// out[t, r] (+)= sum_k w[t, k] * (act[t*top_k+k] . down[ids][r]), k ascending (ids < 0
// skipped); a warp per output row, four experts' rows loaded together.
template <typename W, bool VEC>
__global__ void down_combine_kernel(const float* __restrict__ act, const int32_t* __restrict__ ids,
                                    const float* __restrict__ w, int top_k,
                                    const W* __restrict__ down, int64_t hidden, int64_t inter,
                                    bool accumulate, bool stage, float* __restrict__ out) {
  extern __shared__ float4 dc_smem[];
  pdl_wait();
  pdl_trigger();
  const int64_t r = blockIdx.x * int64_t{k_rows} + threadIdx.y, t = blockIdx.y;
  const float* at = act + t * top_k * inter;  // the token's top_k activation rows
  if (stage) {  // once per block, in shared memory
    float* as = reinterpret_cast<float*>(dc_smem);
    stage_floats(as, at, top_k * inter);
    __syncthreads();
    at = as;
  }
  if (r >= hidden) return;
  float o = 0.f;
  for (int k0 = 0; k0 < top_k; k0 += 4) {
    float acc[4] = {};
    const float* xs[4];
    const W* ws[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t s = t * top_k + k0 + j;
      const bool on = k0 + j < top_k && ids[s] >= 0;
      xs[j] = at + (k0 + j) * inter;
      ws[j] = on ? down + (ids[s] * hidden + r) * inter : nullptr;
    }
    if constexpr (VEC) {
      warp_dot_rows<W, 4>(xs, ws, inter, acc);
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        float a1[1] = {0.f};
        if (ws[j]) warp_dot_partial<W, VEC, 1>(xs[j], inter, ws[j], inter, a1);
        acc[j] = a1[0];
      }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j)
      if (ws[j]) o += w[t * top_k + k0 + j] * warp_sum(acc[j]);
  }
  if (threadIdx.x == 0) {
    float* y = out + t * hidden + r;
    *y = accumulate ? *y + o : o;
  }
}

// ---- streaming decode kernels (VEC layout: rows 16-byte aligned, cols % k_vec<W> == 0)
// A warp walks its units (u = warp, warp + n_warps, ...) in steps of B 16-byte vectors per lane
// of R rows (a chunk of 32 * V * B columns); the next step's loads are issued before the current
// step is used, so every warp keeps two steps of weights in flight with no block-wide syncs.
// A lane's columns and their order are those of warp_dot_rows (lane * V +
// m * 32 * V, m ascending), so the sums are the same.
constexpr int k_stream_threads = 128;

// gate_up_kernel's result by streaming: unit u = (slot u / inter, row u % inter), its gate and
// up rows together (R = 2, one x); a slot with id < 0 is skipped.
template <typename W, bool FETCH>
__global__ void __launch_bounds__(k_stream_threads)
    gate_up_stream_kernel(const float* __restrict__ x, const int32_t* __restrict__ ids, int top_k,
                          const W* __restrict__ gate, const W* __restrict__ up, int64_t hidden,
                          int64_t inter, int64_t slots, float* __restrict__ act,
                          float* __restrict__ up_raw, const __grid_constant__ MoeFetch fetch) {
  constexpr int R = 2, B = 4, CH = 32 * k_vec<W> * B;
  pdl_wait();
  // The layer's misses first (FETCH: the slot cache's bookkeeping ran in the previous
  // kernel, so the count is final): the whole grid copies them, then meets, and only then lets
  // the next kernel launch (down_ahead_kernel reads its slots' rows before its own wait). The
  // rows read below are ones no block read before the barrier, so the non-coherent loads cannot
  // hold a stale line.
  if constexpr (FETCH) {
    const int nf = *fetch.copy.n_fetch;  // uniform over the grid
    if (nf > 0) {
      copy_fetched<uint4>(fetch.copy, nf, blockIdx.x * int64_t{k_stream_threads} + threadIdx.x,
                          int64_t{gridDim.x} * k_stream_threads);
      grid_sync(fetch.barrier);
    }
  }
  pdl_trigger();
  const int64_t nw = int64_t{gridDim.x} * (k_stream_threads / 32), units = slots * inter;
  const int64_t nc = (hidden + CH - 1) / CH, i0 = int64_t{threadIdx.x & 31} * k_vec<W>;
  int64_t u = (int64_t{blockIdx.x} * k_stream_threads + threadIdx.x) / 32;
  if (u >= units) return;  // uniform over the warp
  auto rows = [&](int64_t v, const W* (&w)[R]) {
    const int64_t e = __ldg(ids + v / inter);
    const int64_t off = (e * inter + v % inter) * hidden;
    w[0] = e < 0 ? nullptr : gate + off;
    w[1] = e < 0 ? nullptr : up + off;
  };
  const W* w[R];
  rows(u, w);
  int64_t c = 0;
  uint4 raw[R][B];
  rows_load<W, R, B>(w, hidden, i0, raw);
  float acc[R] = {0.f, 0.f};
  while (true) {
    int64_t un = u, cn = c + 1;
    const W* wn[R] = {w[0], w[1]};
    if (cn == nc) {
      cn = 0, un += nw;
      if (un < units) rows(un, wn);
    }
    uint4 nxt[R][B];
    if (un < units) rows_load<W, R, B>(wn, hidden, i0 + cn * CH, nxt);
    const int64_t s = u / inter;
    const float* xt = x + (s / top_k) * hidden;
    const float* xs[R] = {xt, xt};
    rows_use<W, R, B>(xs, w, hidden, i0 + c * CH, raw, acc);
    if (c == nc - 1) {
      const float gs = warp_sum(acc[0]), us = warp_sum(acc[1]);
      const int64_t o = s * inter + u % inter;
      if (w[0] && (threadIdx.x & 31) == 0) {
        if (up_raw)  // gpt-oss: raw gate and up (moe_oss_act follows)
          act[o] = gs, up_raw[o] = us;
        else
          act[o] = silu(gs) * us;
      }
      acc[0] = acc[1] = 0.f;
    }
    if (un >= units) break;
    u = un, c = cn;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      w[r] = wn[r];
#pragma unroll
      for (int b = 0; b < B; ++b) raw[r][b] = nxt[r][b];
    }
  }
}

// down_combine_kernel's result by streaming: unit u = output row (token u / hidden, row
// u % hidden); its steps run over groups of R = 4 experts (k ascending), then the group's
// chunks; o += w[t, k] * dot after each group, as down_combine_kernel sums.
template <typename W>
__global__ void __launch_bounds__(k_stream_threads)
    down_stream_kernel(const float* __restrict__ act, const int32_t* __restrict__ ids,
                       const float* __restrict__ wk, int top_k, const W* __restrict__ down,
                       int64_t hidden, int64_t inter, int64_t n, bool accumulate,
                       float* __restrict__ out) {
  constexpr int R = 4, B = 2, CH = 32 * k_vec<W> * B;
  const int64_t nw = int64_t{gridDim.x} * (k_stream_threads / 32), units = n * hidden;
  const int64_t nc = (inter + CH - 1) / CH, i0 = int64_t{threadIdx.x & 31} * k_vec<W>;
  const int ng = (top_k + R - 1) / R;
  int64_t u = (int64_t{blockIdx.x} * k_stream_threads + threadIdx.x) / 32;
  if (u >= units) {  // uniform over the warp
    pdl_wait();
    return pdl_trigger();
  }
  // Rows of group g of unit v: expert k = g * R + j of token v / hidden (null when k >= top_k
  // or its id < 0).
  auto rows = [&](int64_t v, int g, const W* (&w)[R]) {
    const int64_t t = v / hidden, r = v % hidden;
#pragma unroll
    for (int j = 0; j < R; ++j) {
      const int k = g * R + j;
      const int64_t e = k < top_k ? __ldg(ids + t * top_k + k) : -1;
      w[j] = e < 0 ? nullptr : down + (e * hidden + r) * inter;
    }
  };
  // The first step's ids and weights are read before the grid dependency wait (while
  // gate_up's last blocks run): both were final before gate_up started (routing or the slot
  // bookkeeping and the miss fetch come before it), and gate_up waits for its predecessor before
  // it triggers this launch. Only act (gate_up's output) and out need the wait.
  const W* w[R];
  rows(u, 0, w);
  int64_t c = 0;
  int g = 0;
  uint4 raw[R][B];
  rows_load<W, R, B>(w, inter, i0, raw);
  pdl_wait();
  pdl_trigger();
  float acc[R] = {0.f, 0.f, 0.f, 0.f}, o = 0.f;
  while (true) {
    int64_t un = u, cn = c + 1;
    int gn = g;
    const W* wn[R] = {w[0], w[1], w[2], w[3]};
    if (cn == nc) {
      cn = 0, ++gn;
      if (gn == ng) gn = 0, un += nw;
      if (un < units) rows(un, gn, wn);
    }
    uint4 nxt[R][B];
    if (un < units) rows_load<W, R, B>(wn, inter, i0 + cn * CH, nxt);
    const int64_t t = u / hidden;
    const float* at = act + (t * top_k + int64_t{g} * R) * inter;  // the group's first row
    const float* xs[R] = {at, at + inter, at + 2 * inter, at + 3 * inter};
    rows_use<W, R, B>(xs, w, inter, i0 + c * CH, raw, acc);
    if (c == nc - 1) {
#pragma unroll
      for (int j = 0; j < R; ++j) {
        if (w[j]) o += wk[t * top_k + g * R + j] * warp_sum(acc[j]);
        acc[j] = 0.f;
      }
      if (g == ng - 1) {
        if ((threadIdx.x & 31) == 0) {
          float* y = out + u;
          *y = accumulate ? *y + o : o;
        }
        o = 0.f;
      }
    }
    if (un >= units) break;
    u = un, c = cn, g = gn;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      w[r] = wn[r];
#pragma unroll
      for (int b = 0; b < B; ++b) raw[r][b] = nxt[r][b];
    }
  }
}

// down_stream_kernel's result with every weight of a warp's unit in flight before the grid
// dependency wait: a warp per output row (token t, row r) loads its top_k (<= K) experts' whole
// rows (B 16-byte vectors per lane each: inter <= 32 * V * B) as soon as it is resident, so the
// down matrices stream while gate_up still runs (when gate_up leaves room on the SMs); after the
// wait the block stages the token's activations in shared memory and only the dots remain.
// Sums as down_stream_kernel's (lane columns ascending, k ascending).
template <typename W, int K, int B>
__global__ void __launch_bounds__(k_stream_threads, 4)
    down_ahead_kernel(const float* __restrict__ act, const int32_t* __restrict__ ids,
                      const float* __restrict__ wk, int top_k, const W* __restrict__ down,
                      int64_t hidden, int64_t inter, bool accumulate, float* __restrict__ out) {
  constexpr int V = k_vec<W>;
  extern __shared__ float4 da_smem[];
  const int64_t t = blockIdx.y, r = blockIdx.x * int64_t{k_stream_threads / 32} + threadIdx.x / 32;
  const int64_t i0 = int64_t{threadIdx.x & 31} * V;
  uint4 raw[K][B];
  unsigned on = 0;  // bit k: expert k is computed here
#pragma unroll
  for (int k = 0; k < K; ++k) {  // ids are final before gate_up started (down_stream_kernel)
    const int64_t e = k < top_k && r < hidden ? __ldg(ids + t * top_k + k) : -1;
    if (e < 0) continue;
    on |= 1u << k;
    const W* w = down + (e * hidden + r) * inter;
#pragma unroll
    for (int b = 0; b < B; ++b) {
      const int64_t i = i0 + int64_t{b} * 32 * V;
      if (i < inter) raw[k][b] = ldg_stream(w + i);
    }
  }
  pdl_wait();
  pdl_trigger();
  // The token's activations, every piece in flight at once (cp.async, no register round trip).
  float* as = reinterpret_cast<float*>(da_smem);
  const float* at = act + t * top_k * inter;
  const uint32_t as_s = static_cast<uint32_t>(__cvta_generic_to_shared(as));
  for (int64_t c = threadIdx.x; c < top_k * inter / 4; c += k_stream_threads)
    cp_async16(as_s + 16 * static_cast<uint32_t>(c), at + 4 * c);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  if (r >= hidden) return;
  // rows_use reads w[k] only as "expert k computed here" (null: skipped) and its element type.
  const W* w[K];
  const float* xs[K];
#pragma unroll
  for (int k = 0; k < K; ++k) w[k] = on >> k & 1u ? down : nullptr, xs[k] = as + k * inter;
  float acc[K] = {};
  rows_use<W, K, B>(xs, w, inter, i0, raw, acc);
  float o = 0.f;
#pragma unroll
  for (int k = 0; k < K; ++k)
    if (w[k]) o += wk[t * top_k + k] * warp_sum(acc[k]);
  if ((threadIdx.x & 31) == 0) {
    float* y = out + t * hidden + r;
    *y = accumulate ? *y + o : o;
  }
}

// combine_slots (moe_combine.cuh): a block per token.
__global__ void combine_kernel(const float* __restrict__ d, const int32_t* __restrict__ slot_row,
                               const float* __restrict__ w, int top_k, int64_t hidden,
                               bool accumulate, float* __restrict__ out) {
  pdl_wait();
  pdl_trigger();
  const int64_t t = blockIdx.x;
  for (int64_t j = threadIdx.x; j < hidden; j += blockDim.x) {
    float o = 0.f;
    for (int k = 0; k < top_k; ++k) {
      const int64_t s = t * top_k + k, row = slot_row ? slot_row[s] : s;
      if (row >= 0) o += w[s] * d[row * hidden + j];  // row < 0: an id < 0, not computed here
    }
    out[t * hidden + j] = accumulate ? out[t * hidden + j] + o : o;
  }
}

// One block: offsets[e] = first grouped row of expert e; rows keep slot order within an
// expert. Thread e scans the slots (slots are few: max_tokens * top_k). Slots with ids < 0
// (another shard's experts) get no row: slot_row -1.
__global__ void group_kernel(const int32_t* __restrict__ ids, int64_t slots, int n_experts,
                             int32_t* __restrict__ offsets, int32_t* __restrict__ row_slot,
                             int32_t* __restrict__ slot_row) {
  for (int e = threadIdx.x; e < n_experts; e += blockDim.x) {
    int32_t c = 0;
    for (int64_t i = 0; i < slots; ++i) c += ids[i] == e;
    offsets[e + 1] = c;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    offsets[0] = 0;
    for (int e = 0; e < n_experts; ++e) offsets[e + 1] += offsets[e];
  }
  __syncthreads();
  for (int64_t i = threadIdx.x; i < slots; i += blockDim.x)
    if (ids[i] < 0) slot_row[i] = -1;
  for (int e = threadIdx.x; e < n_experts; e += blockDim.x) {
    int32_t row = offsets[e];
    for (int64_t i = 0; i < slots; ++i)
      if (ids[i] == e) {
        row_slot[row] = static_cast<int32_t>(i);
        slot_row[i] = row++;
      }
  }
}

// xs[r] = x[row_slot[r] / top_k] for the grouped rows r < rows (= offsets[n_experts]).
__global__ void gather_kernel(const float* __restrict__ x, const int32_t* __restrict__ row_slot,
                              const int32_t* __restrict__ rows, int top_k, int64_t hidden,
                              float* __restrict__ xs) {
  if (blockIdx.x >= *rows) return;
  const float* src = x + (row_slot[blockIdx.x] / top_k) * hidden;
  for (int64_t j = threadIdx.x; j < hidden; j += blockDim.x) xs[blockIdx.x * hidden + j] = src[j];
}

// ---- launchers
// Blocks for a streaming kernel K over `units` warp units: every SM full (K's occupancy), fewer
// when there are fewer units than resident warps.
template <auto K>
unsigned stream_grid(int64_t units) {
  const int64_t resident = resident_blocks(reinterpret_cast<const void*>(K), k_stream_threads, 0);
  constexpr int64_t warps = k_stream_threads / 32;
  return static_cast<unsigned>(std::min((units + warps - 1) / warps, resident));
}

// FT_MOE_DOWN_AHEAD=0: down_stream_kernel instead of down_ahead_kernel (A/B runs).
bool down_ahead() {
  static const bool on = env_on("FT_MOE_DOWN_AHEAD");
  return on;
}

// FT_MOE_STREAM=0: the block-per-8-rows kernels instead of the streaming ones (A/B runs).
bool stream_kernels() {
  static const bool on = env_on("FT_MOE_STREAM");
  return on;
}

void decode(const DeviceExperts& e, const MoeArgs& a, MoeWorkspace& ws) {
  const int64_t slots = a.n * a.top_k, H = e.hidden, I = e.inter;
  float* act = ws.act.as<float>();
  float* up_raw = a.oss ? ws.up.as<float>() : nullptr;  // gpt-oss: gate and up kept apart
  const int k = static_cast<int>(a.top_k);
  dispatch_weight_type(e.dtype, [&](auto tag) {
    using W = typename decltype(tag)::type;
    const auto *g = static_cast<const W*>(e.gate), *u = static_cast<const W*>(e.up),
               *dn = static_cast<const W*>(e.down);
    const dim3 block(32, k_rows);
    const dim3 grid_gu(static_cast<unsigned>((I + k_rows - 1) / k_rows),
                       static_cast<unsigned>(slots));
    const dim3 grid_d(static_cast<unsigned>((H + k_rows - 1) / k_rows),
                      static_cast<unsigned>(a.n));
    const bool vec_gu =
        vec_ok<W>(e.gate, H) && vec_ok<W>(e.up, H) && reinterpret_cast<uintptr_t>(a.x) % 16 == 0;
    const bool vec_d = vec_ok<W>(e.down, I) && I % 4 == 0;  // act rows: ld I, cudaMalloc'd
    const bool st_gu = vec_gu && H * sizeof(float) <= k_stage_smem;
    const size_t sm_gu = st_gu ? H * sizeof(float) : 0;
    // The misses' copy inside the streaming gate/up kernel (one resident wave, so its grid
    // barrier is safe), else its own launch before the experts.
    const bool fused = a.fetch && vec_gu && stream_kernels() &&
                       fetch_vectorizable(a.fetch->copy) && a.fetch->barrier;
    if (a.fetch && !fused) fetch_experts(a.fetch->copy);
    if (fused)
      launch_kernel(gate_up_stream_kernel<W, true>,
                    dim3(stream_grid<gate_up_stream_kernel<W, true>>(slots * I)),
                    dim3(k_stream_threads), 0, a.x, a.ids, k, g, u, H, I, slots, act, up_raw,
                    *a.fetch);
    else if (vec_gu && stream_kernels())
      launch_kernel(gate_up_stream_kernel<W, false>,
                    dim3(stream_grid<gate_up_stream_kernel<W, false>>(slots * I)),
                    dim3(k_stream_threads), 0, a.x, a.ids, k, g, u, H, I, slots, act, up_raw,
                    MoeFetch{});
    else if (vec_gu)
      launch_kernel(gate_up_kernel<W, true>, grid_gu, block, sm_gu, a.x, a.ids, k, g, u, H, I,
                    st_gu, act, up_raw);
    else
      launch_kernel(gate_up_kernel<W, false>, grid_gu, block, 0, a.x, a.ids, k, g, u, H, I, false,
                    act, up_raw);
    if (a.oss) moe_oss_act(*a.oss, act, up_raw, slots, I, nullptr);
    const bool st_d = vec_d && a.top_k * I * sizeof(float) <= k_stage_smem;
    const size_t sm_d = st_d ? a.top_k * I * sizeof(float) : 0;
    // 16-bit rows of at most 768 (3 vectors per lane), top-k <= 8: down_ahead_kernel.
    auto ahead = [&] {
      constexpr int K = 8, B = 3;
      if constexpr (sizeof(W) == 2) {
        if (!st_d || !stream_kernels() || !down_ahead() || a.top_k > K || I > 32 * k_vec<W> * B)
          return false;
        constexpr int rows = k_stream_threads / 32;  // a warp per output row
        const dim3 grid(static_cast<unsigned>((H + rows - 1) / rows), static_cast<unsigned>(a.n));
        launch_kernel(down_ahead_kernel<W, K, B>, grid, dim3(k_stream_threads), sm_d, act, a.ids,
                      a.weights, k, dn, H, I, a.accumulate, a.out);
        return true;
      }
      return false;
    };
    if (ahead()) return;
    if (vec_d && stream_kernels())
      launch_kernel(down_stream_kernel<W>, dim3(stream_grid<down_stream_kernel<W>>(a.n * H)),
                    dim3(k_stream_threads), 0, act, a.ids, a.weights, k, dn, H, I, a.n,
                    a.accumulate, a.out);
    else if (vec_d)
      launch_kernel(down_combine_kernel<W, true>, grid_d, block, sm_d, act, a.ids, a.weights, k,
                    dn, H, I, a.accumulate, st_d, a.out);
    else
      launch_kernel(down_combine_kernel<W, false>, grid_d, block, 0, act, a.ids, a.weights, k, dn,
                    H, I, a.accumulate, false, a.out);
  });
}

// Quantized experts, decode: slot GEMVs with the expert id read on the device (no host sync).
void decode_quant(const DeviceExperts& e, const MoeArgs& a, MoeWorkspace& ws) {
  const int64_t slots = a.n * a.top_k, H = e.hidden, I = e.inter;
  const int k = static_cast<int>(a.top_k);
  float *act = ws.act.as<float>(), *up = ws.up.as<float>(), *d = ws.down.as<float>();
  quant_experts_gemv({.x = a.x, .x_slot = H, .x_div = k, .ids = a.ids, .slots = slots,
                      .w = {e.gate, e.up}, .y = {act, up}, .count = 2, .dtype = e.dtype,
                      .rows = I, .cols = H, .y_slot = I});
  if (a.oss) moe_oss_act(*a.oss, act, up, slots, I, nullptr);  // gpt-oss: act in place
  quant_experts_gemv({.x = act, .x_slot = I, .x_div = 1, .ids = a.ids, .slots = slots,
                      .w = {e.down, nullptr}, .y = {d, nullptr}, .count = 1, .dtype = e.dtype,
                      .rows = H, .cols = I, .y_slot = H,
                      .x_up = a.oss ? nullptr : up,  // on silu(act) * up
                      .ids_early = true});  // final since before gate+up started
  combine_slots(d, nullptr, a.weights, k, H, a.n, a.accumulate, a.out);
}

void prefill(Blas& blas, const DeviceExperts& e, const MoeArgs& a, MoeWorkspace& ws) {
  const int64_t slots = a.n * a.top_k, H = e.hidden, I = e.inter, E = e.n_experts;
  const int k = static_cast<int>(a.top_k);
  auto* offsets = ws.offsets.as<int32_t>();
  auto* row_slot = ws.row_slot.as<int32_t>();
  auto* slot_row = ws.slot_row.as<int32_t>();
  group_kernel<<<1, 256, 0, stream()>>>(a.ids, slots, static_cast<int>(E), offsets, row_slot, slot_row);
  CUDA_CHECK_LAUNCH();
  gather_kernel<<<static_cast<unsigned>(slots), 128, 0, stream()>>>(a.x, row_slot, offsets + E, k,
                                                                    H, ws.xs.as<float>());
  CUDA_CHECK_LAUNCH();
  // The host needs the group sizes to size each expert's GEMM: one sync per MoE layer.
  copy_to_host(ws.host_offsets.data(), offsets, (E + 1) * sizeof(int32_t));
  // Expert ex's matrix m (0 gate, 1 up, 2 down) in its own dtype, stride and scales (h6f).
  auto mat = [&](int m, int64_t ex) {
    const DType t = e.type(m);
    DeviceMatrix d;
    d.data = static_cast<const char*>(e.matrix(m)) + ex * e.expert_stride(m);
    d.dtype = t, d.rows = e.rows(m), d.cols = e.cols(m);
    const size_t so = expert_record(t, d.rows, d.cols).scale_offset;
    if (t == DType::F8_E4M3_B128)
      d.scale_inv = reinterpret_cast<const float*>(static_cast<const char*>(d.data) + so);
    if (t == DType::NVFP4) {
      FT_CHECK(e.host_gscale[m], "moe_experts: NVFP4 experts without host global scales");
      d.global_scale = e.host_gscale[m][ex];
    }
    return d;
  };
  float *xs = ws.xs.as<float>(), *act = ws.act.as<float>(), *up = ws.up.as<float>(),
        *d = ws.down.as<float>();
  for (int64_t ex = 0; ex < E; ++ex) {
    const int64_t r0 = ws.host_offsets[ex], cnt = ws.host_offsets[ex + 1] - r0;
    if (cnt == 0) continue;
    matmul(blas, xs + r0 * H, cnt, mat(0, ex), act + r0 * I);
    matmul(blas, xs + r0 * H, cnt, mat(1, ex), up + r0 * I);
  }
  if (a.oss)
    moe_oss_act(*a.oss, act, up, slots, I, row_slot);  // gpt-oss: biases, clamped SwiGLU
  else
    silu_mul(act, up, slots * I, act);
  for (int64_t ex = 0; ex < E; ++ex) {
    const int64_t r0 = ws.host_offsets[ex], cnt = ws.host_offsets[ex + 1] - r0;
    if (cnt > 0) matmul(blas, act + r0 * I, cnt, mat(2, ex), d + r0 * H);
  }
  combine_slots(d, slot_row, a.weights, k, H, a.n, a.accumulate, a.out);
}
}  // namespace

void combine_slots(const float* d, const int32_t* slot_row, const float* w, int top_k,
                   int64_t hidden, int64_t tokens, bool accumulate, float* out) {
  launch_kernel(combine_kernel, dim3(static_cast<unsigned>(tokens)), dim3(256), 0, d, slot_row, w,
                top_k, hidden, accumulate, out);
}

MoeWorkspace::MoeWorkspace(int64_t max_tokens_, int64_t top_k_, int64_t n_experts_, int64_t hidden_,
                           int64_t inter_)
    : max_tokens(max_tokens_),
      top_k(top_k_),
      n_experts(n_experts_),
      hidden(hidden_),
      inter(inter_),
      xs(max_tokens_ * top_k_ * hidden_ * sizeof(float)),
      act(max_tokens_ * top_k_ * inter_ * sizeof(float)),
      up(max_tokens_ * top_k_ * inter_ * sizeof(float)),
      down(max_tokens_ * top_k_ * hidden_ * sizeof(float)),
      offsets((n_experts_ + 1) * sizeof(int32_t)),
      row_slot(max_tokens_ * top_k_ * sizeof(int32_t)),
      slot_row(max_tokens_ * top_k_ * sizeof(int32_t)),
      host_offsets(n_experts_ + 1) {}

// The path by size and formats (moe_experts adds gpt-oss's down bias after it).
static void moe_experts_core(Blas& blas, const DeviceExperts& e, const MoeArgs& a,
                             MoeWorkspace& ws);

void moe_experts(Blas& blas, const DeviceExperts& e, const MoeArgs& a, MoeWorkspace& ws) {
  FT_CHECK(e.gate && e.up && e.down && e.n_experts > 0 && e.hidden > 0 && e.inter > 0,
           "moe_experts: empty experts");
  FT_CHECK(a.n >= 0 && a.n <= ws.max_tokens && a.top_k == ws.top_k && e.n_experts == ws.n_experts &&
               e.hidden == ws.hidden && e.inter == ws.inter,
           "moe_experts: {} tokens x top-{} do not fit the workspace ({} x top-{})", a.n, a.top_k,
           ws.max_tokens, ws.top_k);
  if (a.n == 0) return;
  if (a.oss && a.n <= k_gemv_max_tokens && !e.uniform())
    fail("moe_experts: gpt-oss expert biases / clamped SwiGLU with mixed-format experts are not "
         "supported on CUDA yet");
  if (a.oss) {  // gpt-oss: every path below applies the activation; the down bias after
    FT_CHECK(a.oss->expert_ids, "moe_experts: gpt-oss without expert ids");
    moe_experts_core(blas, e, a, ws);
    return moe_oss_down_bias(*a.oss, a.weights, a.n, a.top_k, e.hidden, a.out);
  }
  moe_experts_core(blas, e, a, ws);
}

static void moe_experts_core(Blas& blas, const DeviceExperts& e, const MoeArgs& a,
                             MoeWorkspace& ws) {
  const bool gemv = a.n <= k_gemv_max_tokens;
  if (gemv && e.uniform() && !dtype_is_quant(e.dtype))
    return decode(e, a, ws);  // copies a.fetch itself (inside gate/up where it can)
  if (a.fetch) fetch_experts(a.fetch->copy);
  if (gemv && !e.uniform())  // mixed dtypes / strides, per-expert scales
    moe_decode_mixed(e, a, ws);
  else if (gemv)
    decode_quant(e, a, ws);
  else
    prefill(blas, e, a, ws);
}

}  // namespace ft::cuda
