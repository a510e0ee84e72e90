// quant_gemv_stream: the one-token quantized GEMV with int8 activations (decode, and the routed
// experts' form: one token per slot), launched by quant_gemv_q8.cu's launch_q8. Each warp owns
// a contiguous run of rows (an even split over every warp that fits on the GPU at once, so
// there is no second wave) and streams them in 2 or 4 KiB chunks through a k_stages-deep
// cp.async ring in shared memory (no register staging; the chunks of the next rows load while
// this one's math runs; rows of 1/16 to 1/2 of a chunk go several to a chunk, summed per row
// over the lanes that hold its units). Every lane takes whole 32-element units (quant_dot32.cuh:
// a 32-element block, a 256-element block's sub-block, two NVFP4 blocks), lane l the chunk's
// units l, l + 32, ...; the activations are quantized per block into shared memory once (int8
// codes in the format's order, scales per 16 elements, or per 32 for the nibble-codebook
// formats, XUnit).
#include <algorithm>
#include <atomic>

#include "backend/cuda/quant_device.cuh"
#include "backend/cuda/quant_dot32.cuh"
#include "backend/cuda/quant_gemv.cuh"

namespace ft::cuda::qgemv {

namespace {
constexpr int k_threads = 32 * k_warps;
constexpr int k_stages = 3;

template <class F>
struct SGeometry {
  using Block = typename F::Block;
  static constexpr int kBB = sizeof(Block), kE = F::kElems;
  static constexpr int kUPB = kE >= 32 ? kE / 32 : 1;  // units per block
  static constexpr int kBPU = kE >= 32 ? 1 : 32 / kE;  // blocks per unit (NVFP4: 2)
  static constexpr int kUB2 = 2 * kBB * kBPU / kUPB;  // twice the bytes per unit
  // Units per lane per chunk: about k_schunk_bytes per chunk. Measured on the H200 (sm_90):
  // 4 KiB chunks are faster for the formats of >= 5 bits (units of >= 20 bytes: Q8_0 4096x14336
  // 57 -> 63% of the copy bandwidth, Q4_1 98304x2048 65 -> 74%), 2 KiB for the 4-bit and
  // smaller ones (MXFP4 / Q4_K 98304x2048: 48 / 58% vs 50 / 54%, Q4_0 62 vs 57%).
  static constexpr int k_schunk_bytes = kUB2 >= 40 ? 4096 : 2048;
  static constexpr int kUPL0 = (2 * k_schunk_bytes / 32 + kUB2 / 2) / kUB2;
  static constexpr int kUPL = kUPL0 < 1 ? 1 : (kUPL0 > 8 ? 8 : kUPL0);
  static constexpr int kCB = 32 * kUPL * kBPU / kUPB;  // blocks per chunk
  static constexpr int kBuf = (kCB * kBB + 15) / 16 * 16 + 32;  // + misalignment + ld slack
  static constexpr int kVpl = (kBuf / 16 + 31) / 32;
  static constexpr size_t kStageSmem = size_t{k_warps} * k_stages * kBuf;
  static_assert(32 * kUPL * kBPU % kUPB == 0, "a chunk is whole blocks");
};

// Activations for the streaming kernel, per 32-element unit u (units rounded up to whole 32s):
// two 16-byte pieces of int8 codes at slots 64 (u / 32) + u % 32 and 32 after it (a warp's
// lanes read consecutive slots), then a float4 {dx0, dx1, dx0 * S0, dx1 * S1} per unit.
__host__ __device__ inline int64_t sunits(int64_t cols) { return (cols / 32 + 31) / 32 * 32; }
size_t sact_smem(int64_t cols) { return static_cast<size_t>(sunits(cols) * 48); }

// x (one token; with xu: silu(x) * xu) -> per 32-element unit int8 codes q = rint(x * 127 /
// amax per 16 elements, or per 32 for NIBBLE_PAIRS formats) in x_order<F>, and {dx0, dx1,
// dx0 * S0, dx1 * S1} (dx = amax / 127, S: the halves' code sums).
template <class F>
__device__ __forceinline__ void quantize_acts32(const float* __restrict__ x,
                                                const float* __restrict__ xu, int64_t cols,
                                                uint8_t* xsm) {
  const int nu = static_cast<int>(cols / 32);
  uint4* pieces = reinterpret_cast<uint4*>(xsm);
  float4* scales = reinterpret_cast<float4*>(xsm + 32 * sunits(cols));
  for (int u = threadIdx.x; u < nu; u += blockDim.x) {
    const float4* src = reinterpret_cast<const float4*>(x + 32 * int64_t{u});
    float f[32];
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      float4 v = __ldg(src + k);
      if (xu) v = silu_mul4(v, __ldg(reinterpret_cast<const float4*>(xu + 32 * int64_t{u}) + k));
      f[4 * k] = v.x, f[4 * k + 1] = v.y, f[4 * k + 2] = v.z, f[4 * k + 3] = v.w;
    }
    // per 16 (NATURAL) or per 32 (NIBBLE_PAIRS: the code words mix the halves)
    float a0 = 0.f, a1 = 0.f;
#pragma unroll
    for (int i = 0; i < 16; ++i) a0 = fmaxf(a0, fabsf(f[i])), a1 = fmaxf(a1, fabsf(f[16 + i]));
    if (x_order<F>() == XOrder::NIBBLE_PAIRS) a0 = a1 = fmaxf(a0, a1);
    const float inv0 = a0 > 0.f ? 127.f / a0 : 0.f, inv1 = a1 > 0.f ? 127.f / a1 : 0.f;
    int q[32], s0 = 0, s1 = 0;
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      q[i] = __float2int_rn(f[i] * (i < 16 ? inv0 : inv1));
      (i < 16 ? s0 : s1) += q[i];
    }
    uint32_t wd[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      uint32_t v = 0;
#pragma unroll
      for (int b = 0; b < 4; ++b)
        v |= (static_cast<uint32_t>(q[x_element(x_order<F>(), 4 * k + b)]) & 0xffu) << (8 * b);
      wd[k] = v;
    }
    const int slot = 64 * (u >> 5) + (u & 31);
    pieces[slot] = make_uint4(wd[0], wd[1], wd[2], wd[3]);
    pieces[slot + 32] = make_uint4(wd[4], wd[5], wd[6], wd[7]);
    const float dx0 = a0 * (1.f / 127.f), dx1 = a1 * (1.f / 127.f);
    scales[u] = make_float4(dx0, dx1, dx0 * i2f(s0), dx1 * i2f(s1));
  }
}

// This lane's units of one chunk (nu units, all of them when FULL) at block alignment A: v[i]
// gets the dot of unit lane + 32 i (0 past nu). Its activations: unit xu0 + lane + 32 i of the
// row (xu0 a multiple of 32), or in a chunk of whole rows (ROWS) unit jrow[i] (the unit's index
// in its row).
template <class F, int A, bool FULL, bool ROWS>
__device__ __forceinline__ void chunk_units(const uint8_t* buf, int nu, int64_t xu0,
                                            const int (&jrow)[SGeometry<F>::kUPL],
                                            const uint8_t* xsm, const float4* xscales, int lane,
                                            float (&v)[SGeometry<F>::kUPL]) {
  using Gm = SGeometry<F>;
#pragma unroll
  for (int i = 0; i < Gm::kUPL; ++i) {
    v[i] = 0.f;
    const int u = lane + 32 * i;
    if (!FULL && u >= nu) continue;
    const int64_t j = ROWS ? jrow[i] : xu0 + u;  // the activations' unit
    const uint4* pc = reinterpret_cast<const uint4*>(xsm) + 64 * (j >> 5) + (j & 31);
    XUnit x;
    const uint4 a = pc[0], b = pc[32];
    x.q[0] = a.x, x.q[1] = a.y, x.q[2] = a.z, x.q[3] = a.w;
    x.q[4] = b.x, x.q[5] = b.y, x.q[6] = b.z, x.q[7] = b.w;
    const float4 sc = xscales[j];
    x.dx0 = sc.x, x.dx1 = sc.y, x.s0 = sc.z, x.s1 = sc.w;
    const uint8_t* blk = buf + (u / Gm::kUPB) * Gm::kBPU * Gm::kBB;
    v[i] = dot32<F, A>(blk, u % Gm::kUPB, x);
  }
}

// chunk_units at the chunk's alignment (al: kAl-aligned) and fullness.
template <class F, bool ROWS>
__device__ __forceinline__ void chunk_units_at(bool al, const uint8_t* buf, int nu, int64_t xu0,
                                               const int (&jrow)[SGeometry<F>::kUPL],
                                               const uint8_t* xsm, const float4* xscales,
                                               int lane, float (&v)[SGeometry<F>::kUPL]) {
  constexpr int kAl = block_align<F>(), full = 32 * SGeometry<F>::kUPL;
  if (nu == full) {
    if (al) chunk_units<F, kAl, true, ROWS>(buf, nu, xu0, jrow, xsm, xscales, lane, v);
    else chunk_units<F, 1, true, ROWS>(buf, nu, xu0, jrow, xsm, xscales, lane, v);
  } else {  // a row's last, partial chunk, or fewer rows than a chunk holds
    if (al) chunk_units<F, kAl, false, ROWS>(buf, nu, xu0, jrow, xsm, xscales, lane, v);
    else chunk_units<F, 1, false, ROWS>(buf, nu, xu0, jrow, xsm, xscales, lane, v);
  }
}

template <class F>
__global__ void __launch_bounds__(k_threads, 3) qgemv_stream_kernel(const __grid_constant__ QParams p) {
  using Gm = SGeometry<F>;
  constexpr int BB = Gm::kBB, CB = Gm::kCB, BUF = Gm::kBuf, S = k_stages, UPL = Gm::kUPL;
  constexpr int kAl = block_align<F>();
  extern __shared__ __align__(16) uint8_t smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  uint8_t* wbuf = smem + warp * S * BUF;
  uint8_t* xsm = smem + Gm::kStageSmem;
  const int64_t cols = p.cols;
  const int nb = static_cast<int>(cols / F::kElems);
  const int nchunk = (nb + CB - 1) / CB;
  // Rows of at most half a chunk (and at least 1/16): chunks of rpc whole rows, contiguous in
  // memory, so short rows (an expert's down projection: 24 units) do not leave lanes idle.
  // Lane unit lane + 32 i then belongs to row rowi[i] of the chunk, as its unit jrow[i].
  const int units = nb * Gm::kUPB / Gm::kBPU;
  const bool rows_mode = 2 * units <= 32 * UPL && 32 * UPL <= 16 * units;
  const int rpc = rows_mode ? 32 * UPL / units : 1;
  int rowi[UPL], jrow[UPL];
#pragma unroll
  for (int i = 0; i < UPL; ++i) {
    const int u = lane + 32 * i;
    rowi[i] = rows_mode ? u / units : 0;
    jrow[i] = rows_mode ? u - rowi[i] * units : 0;
  }
  const int64_t total = p.rows0[p.count];
  const int64_t r0 = (int64_t{blockIdx.x} * k_warps + warp) * p.rows_per_warp;
  const int64_t r1 = r0 + p.rows_per_warp < total ? r0 + p.rows_per_warp : total;
  size_t eoff = 0;  // experts form: the slot's expert

  // A cursor over the warp's chunks: row r (of matrix m) and chunk c of the row.
  struct Cur {
    int64_t r;
    int m, c;
  };
  auto settle = [&](Cur& k) {
    while (k.m + 1 < p.count && k.r >= p.rows0[k.m + 1]) ++k.m;
  };
  // The chunk at k: its rows (within the warp's range and the matrix), first block and blocks.
  auto span = [&](const Cur& k, int& nrows, int& b0, int& nbc) {
    if (rows_mode) {
      const int64_t lim = r1 < p.rows0[k.m + 1] ? r1 : p.rows0[k.m + 1];
      nrows = static_cast<int>(lim - k.r < rpc ? lim - k.r : rpc);
      b0 = 0, nbc = nrows * nb;
    } else {
      nrows = 1, b0 = k.c * CB, nbc = nb - b0 < CB ? nb - b0 : CB;
    }
  };
  auto advance = [&](Cur& k, int nrows) {
    if (rows_mode) {
      k.r += nrows;
    } else if (++k.c == nchunk) {
      k.c = 0, ++k.r;
    }
    settle(k);
  };

  Cur ld{r0, 0, 0};  // load cursor: the next chunk to issue
  settle(ld);
  int issued = 0;
  auto issue = [&]() {  // one commit group per call (empty past the last chunk)
    if (ld.r < r1) {
      int nrows, b0, nbc;
      span(ld, nrows, b0, nbc);
      const uint8_t* base = p.w[ld.m] + eoff;
      const uint8_t* src = base + (ld.r - p.rows0[ld.m]) * p.row_bytes + int64_t{b0} * BB;
      const uint8_t* end = base + p.rows[ld.m] * p.row_bytes;
      const uint8_t* al =
          reinterpret_cast<const uint8_t*>(reinterpret_cast<uintptr_t>(src) & ~uintptr_t{15});
      const int nv = (static_cast<int>(src - al) + nbc * BB + 15) / 16;
      const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(wbuf + (issued % S) * BUF));
      if (al + 16 * nv <= end) {  // whole vectors inside the matrix: no size operand
#pragma unroll
        for (int j = 0; j < Gm::kVpl; ++j)
          if (lane + 32 * j < nv) cp_async16(dst + 16 * (lane + 32 * j), al + 16 * (lane + 32 * j));
      } else {
#pragma unroll
        for (int j = 0; j < Gm::kVpl; ++j) {
          const int i = lane + 32 * j;
          if (i < nv) {
            const int64_t left = end - (al + 16 * i);
            cp_async16(dst + 16 * i, al + 16 * i, left >= 16 ? 16 : (left > 0 ? static_cast<int>(left) : 0));
          }
        }
      }
      ++issued;
      advance(ld, nrows);
    }
    cp_async_commit();
  };

  const float* x = p.x;
  const float* xu = p.x_up;
  int64_t yoff = 0;
  if (!p.ids)  // weights are immutable: in flight before the wait
    for (int k = 0; k < S - 1; ++k) issue();
  pdl_wait();
  pdl_trigger();
  if (p.ids) {
    const int64_t s = blockIdx.y, e = p.ids[s];
    yoff = s * p.y_slot;
    if (e < 0) {  // computed elsewhere: contributes nothing
      for (int64_t r = r0 + lane; r < r1; r += 32) {
        int m = 0;
        while (m + 1 < p.count && r >= p.rows0[m + 1]) ++m;
        p.y[m][yoff + r - p.rows0[m]] = 0.f;
      }
      return;
    }
    eoff = static_cast<size_t>(e) * p.expert_bytes;
    x += (s / p.x_div) * p.x_slot;
    if (xu) xu += (s / p.x_div) * p.x_slot;
    for (int k = 0; k < S - 1; ++k) issue();
  }
  quantize_acts32<F>(x, xu, cols, xsm);
  __syncthreads();
  if (r0 >= r1) return;

  const float4* xscales = reinterpret_cast<const float4*>(xsm + 32 * sunits(cols));
  auto store = [&](int m, int64_t r, float s) {  // row r (of the whole run) of matrix m is done
    if (lane != 0) return;
    const int64_t row = r - p.rows0[m];
    if constexpr (quant_ext<F>() == QuantExt::GLOBAL) s *= p.gscale[m];
    if (p.bias[m]) s += p.bias[m][row];
    float* o = p.y[m] + yoff + row;
    *o = p.accumulate[m] ? *o + s : s;
  };
  Cur cp{r0, 0, 0};  // compute cursor
  settle(cp);
  float acc = 0.f;
  for (int step = 0; cp.r < r1; ++step) {
    issue();  // step + S - 1 into the stage step - 1 left
    cp_async_wait<S - 1>();
    __syncwarp();
    int nrows, b0, nbc;
    span(cp, nrows, b0, nbc);
    const uint8_t* src = p.w[cp.m] + eoff + (cp.r - p.rows0[cp.m]) * p.row_bytes + int64_t{b0} * BB;
    const uint8_t* buf = wbuf + (step % S) * BUF + (reinterpret_cast<uintptr_t>(src) & 15);
    const int nu = nbc * Gm::kUPB / Gm::kBPU;
    const int64_t xu0 = int64_t{b0} * Gm::kUPB / Gm::kBPU;
    // Every block of the chunk shares buf's alignment modulo kAl (uniform over the warp).
    const bool al = kAl > 1 && (reinterpret_cast<uintptr_t>(buf) & (kAl - 1)) == 0;
    float v[UPL];
    if (rows_mode)
      chunk_units_at<F, true>(al, buf, nu, xu0, jrow, xsm, xscales, lane, v);
    else
      chunk_units_at<F, false>(al, buf, nu, xu0, jrow, xsm, xscales, lane, v);
    __syncwarp();
    if (rows_mode) {  // whole rows: a warp sum per row over the lanes' units in it
      for (int rr = 0; rr < nrows; ++rr) {
        float t = 0.f;
#pragma unroll
        for (int i = 0; i < UPL; ++i)
          if (rowi[i] == rr) t += v[i];
        store(cp.m, cp.r + rr, warp_sum(t));
      }
    } else {
#pragma unroll
      for (int i = 0; i < UPL; ++i) acc += v[i];
      if (cp.c + 1 == nchunk) {
        store(cp.m, cp.r, warp_sum(acc));
        acc = 0.f;
      }
    }
    advance(cp, nrows);
  }
  cp_async_wait<0>();
}


// The streaming kernel for one token on format F; false when its shared memory does not fit.
template <class F>
bool launch_f(QParams& p, int64_t slots) {
  using Gm = SGeometry<F>;
  if (p.cols % 32 != 0) return false;  // whole 32-element units
  const size_t dyn = Gm::kStageSmem + sact_smem(p.cols);
  static const int sms = sm_count();
  static const int smem_sm = device_attribute(cudaDevAttrMaxSharedMemoryPerMultiprocessor);
  static const int smem_block = device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin);
  if (dyn > static_cast<size_t>(smem_block)) return false;
  static const int regs = [] {
    cudaFuncAttributes a{};
    CUDA_CHECK(cudaFuncGetAttributes(&a, qgemv_stream_kernel<F>));
    return a.numRegs;
  }();
  // Blocks resident per SM (<= 3 by the launch bounds; registers in warps of 32 x a multiple of
  // 8; shared memory with the runtime's 1 KiB per block), then an even split of the rows over
  // all their warps: one wave.
  const int by_regs = 65536 / ((regs + 7) / 8 * 8 * k_threads);
  const int bps = std::clamp(std::min(static_cast<int>(smem_sm / (dyn + 1024)), by_regs), 1, 3);
  const int64_t s = std::max<int64_t>(slots, 1);
  p.rows0[0] = 0;
  for (int m = 0; m < p.count; ++m) p.rows0[m + 1] = p.rows0[m] + p.rows[m];
  const int64_t total = p.rows0[p.count];
  const int64_t warps = std::max<int64_t>(int64_t{sms} * bps * k_warps / s, 1);  // per slot
  p.rows_per_warp = static_cast<int>((total + warps - 1) / warps);
  const int64_t used = (total + p.rows_per_warp - 1) / p.rows_per_warp;
  const dim3 grid(static_cast<unsigned>((used + k_warps - 1) / k_warps), static_cast<unsigned>(s));
  static std::atomic<uint64_t> opted{0};
  opt_in_smem(qgemv_stream_kernel<F>, smem_block, opted);
  launch_kernel(qgemv_stream_kernel<F>, grid, dim3(k_threads), dyn, p);
  return true;
}
}  // namespace

bool launch_stream(DType dt, QParams& p, int64_t slots) {
  bool launched = false;
  dispatch_quant(dt, [&](auto f) {
    using F = decltype(f);
    if constexpr (has_code_words<F>()) launched = launch_f<F>(p, slots);
  });
  return launched;
}

}  // namespace ft::cuda::qgemv
