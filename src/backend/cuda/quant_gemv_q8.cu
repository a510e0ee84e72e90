// quant_gemv_q8: the quantized GEMV for 1..4 tokens with int8 activations, one kernel template
// over the format traits' code_words (quant_device.cuh). Each block first quantizes the
// activations it needs into shared memory (int8 per 16 elements, scale max|x| / 127: the CPU
// quant matmul's rounding), then each warp streams k_rows_per_warp rows in ~1 KiB chunks
// (aligned 16-byte loads, the next chunk in flight while this one is computed) and every lane
// takes whole 16-element groups: four __dp4a of the code words with the int8 activations, then
// d * dx * sum(u q) + m * dx * sum(q). A block covers row_iters row groups so the activation
// quantization is amortised over many rows on large matrices. One token (decode, experts) goes
// through the streaming kernel below instead (one wave, cp.async ring, group pairs); the
// chunked one serves 2..4 tokens and FT_CUDA_QGEMV=chunked.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/quant_device.cuh"
#include "backend/cuda/quant_gemv.cuh"

namespace ft::cuda::qgemv {

namespace {
constexpr int k_threads = 32 * k_warps;
constexpr size_t k_max_dyn_smem = 160 * 1024;  // activations staged per block, at most

template <class F>
struct Geometry {
  using Block = typename F::Block;
  static constexpr int kBB = sizeof(Block), kG = F::kElems / 16;
  // Blocks per chunk: about k_chunk_bytes, a multiple of the blocks that hold 32 groups so
  // every lane decodes the same number of groups.
  static constexpr int kM = kG >= 32 ? 1 : 32 / kG;
  static constexpr int kCB0 = (k_chunk_bytes / kBB + kM / 2) / kM * kM;
  static constexpr int kCB = kCB0 > 0 ? kCB0 : kM;
  // bytes: the chunk, its misalignment (< 16) and the words ld32 may read past the end
  static constexpr int kBuf = (kCB * kBB + 15) / 16 * 16 + 32;
  static constexpr int kVpl = (kBuf / 16 + 31) / 32;  // 16-byte vectors per lane
};

// Dynamic shared memory for nt tokens of cols: int8 codes, then one f32 scale per 16.
size_t act_smem(int64_t nt, int64_t cols) { return static_cast<size_t>(nt * cols + nt * cols / 4); }

// nrows rows of x (row stride ldx) -> int8 q [nrows][cols] and scales dx [nrows][cols / 16] in
// smem: q = rint(x * 127 / amax) per 16 elements, x ~= dx * q with dx = amax / 127. With xu:
// the input is silu(x) * xu.
__device__ __forceinline__ void quantize_acts(const float* __restrict__ x,
                                              const float* __restrict__ xu, int64_t ldx,
                                              int64_t cols, int nrows, uint8_t* xsm) {
  const int ng = static_cast<int>(cols / 16);
  float* dx = reinterpret_cast<float*>(xsm + nrows * cols);
  for (int j = threadIdx.x; j < nrows * ng; j += blockDim.x) {
    const int t = j / ng, g = j - t * ng;
    const float4* src = reinterpret_cast<const float4*>(x + t * ldx + 16 * int64_t{g});
    float4 f[4];
    float a = 0.f;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      f[k] = __ldg(src + k);
      if (xu) f[k] = silu_mul4(f[k], __ldg(reinterpret_cast<const float4*>(xu + t * ldx + 16 * int64_t{g}) + k));
      a = fmaxf(a, fmaxf(fmaxf(fabsf(f[k].x), fabsf(f[k].y)), fmaxf(fabsf(f[k].z), fabsf(f[k].w))));
    }
    const float inv = a > 0.f ? 127.f / a : 0.f;
    uint32_t wd[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint32_t b0 = static_cast<uint32_t>(__float2int_rn(f[k].x * inv)) & 0xffu;
      const uint32_t b1 = static_cast<uint32_t>(__float2int_rn(f[k].y * inv)) & 0xffu;
      const uint32_t b2 = static_cast<uint32_t>(__float2int_rn(f[k].z * inv)) & 0xffu;
      const uint32_t b3 = static_cast<uint32_t>(__float2int_rn(f[k].w * inv)) & 0xffu;
      wd[k] = b0 | b1 << 8 | b2 << 16 | b3 << 24;
    }
    *reinterpret_cast<uint4*>(xsm + t * cols + 16 * int64_t{g}) = make_uint4(wd[0], wd[1], wd[2], wd[3]);
    dx[j] = a * (1.f / 127.f);
  }
}

// Occupancy bound: 3 blocks per SM for one token (85 registers: room for the unrolled groups'
// independent chains), 2 for more. NT: tokens sharing the weights (1 in the experts form).
template <class F, int NT>
__global__ void __launch_bounds__(k_threads, NT == 1 ? 3 : 2)
    qgemv_q8_kernel(const __grid_constant__ QParams p) {
  using Gm = Geometry<F>;
  using Block = typename Gm::Block;
  constexpr int R = k_rows_per_warp, G = Gm::kG, BB = Gm::kBB, CB = Gm::kCB, VPL = Gm::kVpl;
  __shared__ __align__(16) uint8_t wsm[k_warps][R][Gm::kBuf];
  static_assert(sizeof(wsm) <= 22 * 1024, "chunk buffers: see launch_nt's opt-in threshold");
  static_assert(CB * G % 32 == 0, "a chunk is whole groups for every lane");
  extern __shared__ __align__(16) uint8_t xsm[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  int m = 0;
  while (m + 1 < p.count && blockIdx.x >= p.block0[m + 1]) ++m;
  const int64_t rows = p.rows[m], cols = p.cols;
  const int64_t per_block = int64_t{k_warps} * R * p.row_iters;
  const int64_t rb0 = (blockIdx.x - p.block0[m]) * per_block;
  const int64_t nb = cols / F::kElems;
  const int nchunk = static_cast<int>((nb + CB - 1) / CB);
  auto row_of = [&](int it) { return rb0 + (int64_t{it} * k_warps + warp) * R; };
  int nit = 0;  // this warp's row groups that start inside the matrix
  while (nit < p.row_iters && row_of(nit) < rows) ++nit;

  const uint8_t* w = p.w[m];
  const uint8_t* end = w + rows * p.row_bytes;
  uint4 v[R][VPL];
  int off[R];  // misalignment of the chunk in v
  auto load = [&](int step) {  // step: row group step / nchunk, chunk step % nchunk
    const int it = step / nchunk, c = step - it * nchunk;
    const int64_t row0 = row_of(it), b0 = int64_t{c} * CB;
    const int nbc = static_cast<int>(nb - b0 < CB ? nb - b0 : CB);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const uint8_t* src = w + (row0 + r) * p.row_bytes + b0 * BB;
      const uint8_t* al =
          reinterpret_cast<const uint8_t*>(reinterpret_cast<uintptr_t>(src) & ~uintptr_t{15});
      off[r] = static_cast<int>(src - al);
      const int nv = (off[r] + nbc * BB + 15) / 16;
#pragma unroll
      for (int j = 0; j < VPL; ++j) {
        const int i = lane + 32 * j;
        if (row0 + r < rows && i < nv) v[r][j] = load16(al + 16 * i, end);
      }
    }
  };

  const float* x = p.x;
  const float* xu = p.x_up;
  float* y = p.y[m];
  if (!p.ids && nit > 0) load(0);  // weights are immutable: in flight before the wait
  pdl_wait();
  pdl_trigger();
  if (p.ids) {
    const int64_t s = blockIdx.y, e = p.ids[s];
    y += s * p.y_slot;
    if (e < 0) {  // computed elsewhere: contributes nothing (uniform over the block)
      const int64_t hi = rb0 + per_block < rows ? rb0 + per_block : rows;
      for (int64_t r = rb0 + threadIdx.x; r < hi; r += k_threads) y[r] = 0.f;
      return;
    }
    w += e * p.expert_bytes, end = w + rows * p.row_bytes;
    x += (s / p.x_div) * p.x_slot;
    if (xu) xu += (s / p.x_div) * p.x_slot;
    if (nit > 0) load(0);
  }
  quantize_acts(x, xu, p.ldx, cols, NT, xsm);
  __syncthreads();
  const int steps = nit * nchunk;
  if (steps == 0) return;

  const int ng = static_cast<int>(cols / 16);
  const float* dxs = reinterpret_cast<const float*>(xsm + NT * cols);
  float acc[R][NT] = {};
  for (int step = 0; step < steps; ++step) {
    const int it = step / nchunk, c = step - it * nchunk;
    const int64_t row0 = row_of(it), b0 = int64_t{c} * CB;
    const int nbc = static_cast<int>(nb - b0 < CB ? nb - b0 : CB);
    int oc[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      oc[r] = off[r];
      const int nv = (off[r] + nbc * BB + 15) / 16;
#pragma unroll
      for (int j = 0; j < VPL; ++j) {
        const int i = lane + 32 * j;
        if (row0 + r < rows && i < nv) *reinterpret_cast<uint4*>(&wsm[warp][r][16 * i]) = v[r][j];
      }
    }
    __syncwarp();
    if (step + 1 < steps) load(step + 1);  // the next chunk streams in during this one's math
    // One 16-element group of block blk: its activations (shared by the R rows), then each
    // row's codes dotted with them.
    auto group = [&](int gi) {
      const int blk = gi / G, g = gi - blk * G;
      const int64_t col = (b0 + blk) * F::kElems + 16 * g;
      uint4 q[NT];
      float dx[NT], dsum[NT];
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        q[t] = *reinterpret_cast<const uint4*>(xsm + t * cols + col);
        dx[t] = dxs[t * ng + col / 16];
        const int sq = __dp4a(static_cast<int>(q[t].w), 0x01010101,
                              __dp4a(static_cast<int>(q[t].z), 0x01010101,
                                     __dp4a(static_cast<int>(q[t].y), 0x01010101,
                                            __dp4a(static_cast<int>(q[t].x), 0x01010101, 0))));
        dsum[t] = dx[t] * i2f(sq);
      }
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (row0 + r >= rows) continue;
        const Block& bk = *reinterpret_cast<const Block*>(&wsm[warp][r][oc[r] + blk * BB]);
        uint32_t u[4];
        float d, mm;  // w = d * u + mm: dot = d * dx * sum(u q) + mm * dx * sum(q)
        code_words(bk, g, u, d, mm);
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          const int su = dot_u8s8(u[3], q[t].w, dot_u8s8(u[2], q[t].z,
                                  dot_u8s8(u[1], q[t].y, dot_u8s8(u[0], q[t].x, 0))));
          acc[r][t] = fmaf(d * dx[t], i2f(su), fmaf(mm, dsum[t], acc[r][t]));
        }
      }
    };
    if (nbc == CB) {  // a whole chunk: every lane's groups unrolled, independent chains in flight
#pragma unroll
      for (int ii = 0; ii < CB * G / 32; ++ii) group(lane + 32 * ii);
    } else {  // the row's last, partial chunk
#pragma unroll
      for (int ii = 0; ii < CB * G / 32; ++ii)
        if (lane + 32 * ii < nbc * G) group(lane + 32 * ii);
    }
    __syncwarp();
    if (c + 1 < nchunk) continue;
#pragma unroll
    for (int r = 0; r < R; ++r)  // the row group is done: its outputs
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        float s = warp_sum(acc[r][t]);
        acc[r][t] = 0.f;
        const int64_t row = row0 + r;
        if (lane != 0 || row >= rows) continue;
        if constexpr (quant_ext<F>() == QuantExt::GLOBAL) s *= p.gscale[m];
        if (p.bias[m]) s += p.bias[m][row];
        float* o = y + t * rows + row;
        *o = p.accumulate[m] ? *o + s : s;
      }
  }
}

// ---- the streaming kernel: one token (plain matrices and the experts form). Each warp owns a
// contiguous run of rows (an even split over every warp that fits on the GPU at once, so there
// is no second wave) and streams them in ~2 KiB chunks through a k_stages-deep cp.async ring in
// shared memory (no register staging; the chunks of the next rows load while this one's math
// runs). Lanes take pairs of 16-element groups (code_pair: a whole Q8_0 / MXFP4 block, a Q4_K
// sub-block, so scales decode once per pair); the activations' int8 codes, scales and scaled
// sums are precomputed per block in shared memory.
constexpr int k_stages = 3;
constexpr int k_schunk_bytes = 2048;

template <class F>
struct SGeometry {
  using Block = typename F::Block;
  static constexpr int kBB = sizeof(Block), kG = F::kElems / 16;
  static constexpr int kM = kG >= 64 ? 1 : 64 / kG;  // blocks whose group pairs fill 32 lanes
  static constexpr int kCB0 = (k_schunk_bytes / kBB + kM / 2) / kM * kM;
  static constexpr int kCB = kCB0 > 0 ? kCB0 : kM;
  static constexpr int kBuf = (kCB * kBB + 15) / 16 * 16 + 32;  // + misalignment + ld32 slack
  static constexpr int kVpl = (kBuf / 16 + 31) / 32;
  static constexpr int kPairs = kCB * kG / 64;  // group pairs per lane per chunk
  static constexpr size_t kStageSmem = size_t{k_warps} * k_stages * kBuf;
};

// Activations for the streaming kernel: int8 codes, then {dx, dx * sum(q)}, per 16-group in
// the order sgroup_pos gives (groups rounded up to whole 64s).
__host__ __device__ inline int64_t sgroups(int64_t cols) { return (cols / 16 + 63) / 64 * 64; }
size_t sact_smem(int64_t cols) { return static_cast<size_t>(sgroups(cols) * 24); }
// Group gx's slot: in each run of 64 groups the even ones first, then the odd ones, so the lanes
// of a warp reading pair (2 lane, 2 lane + 1) each touch consecutive 16-byte slots (no bank
// conflicts); the pair's second group sits 32 slots after its first.
__device__ __forceinline__ int64_t sgroup_pos(int64_t gx) {
  return (gx & ~int64_t{63}) | (gx & 1) << 5 | ((gx >> 1) & 31);
}

__device__ __forceinline__ void cp_async16(uint32_t dst, const uint8_t* src, int n) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// x (one token; with xu: silu(x) * xu) -> per 16-group (at sgroup_pos) int8 q and {dx, dx *
// sum(q)} in smem, rounded as quantize_acts.
__device__ __forceinline__ void quantize_acts_sums(const float* __restrict__ x,
                                                   const float* __restrict__ xu, int64_t cols,
                                                   uint8_t* xsm) {
  const int ng = static_cast<int>(cols / 16);
  float2* ds = reinterpret_cast<float2*>(xsm + 16 * sgroups(cols));
  for (int g = threadIdx.x; g < ng; g += blockDim.x) {
    const float4* src = reinterpret_cast<const float4*>(x + 16 * int64_t{g});
    float4 f[4];
    float a = 0.f;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      f[k] = __ldg(src + k);
      if (xu) f[k] = silu_mul4(f[k], __ldg(reinterpret_cast<const float4*>(xu + 16 * int64_t{g}) + k));
      a = fmaxf(a, fmaxf(fmaxf(fabsf(f[k].x), fabsf(f[k].y)), fmaxf(fabsf(f[k].z), fabsf(f[k].w))));
    }
    const float inv = a > 0.f ? 127.f / a : 0.f;
    uint32_t wd[4];
    int sq = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int i0 = __float2int_rn(f[k].x * inv), i1 = __float2int_rn(f[k].y * inv);
      const int i2 = __float2int_rn(f[k].z * inv), i3 = __float2int_rn(f[k].w * inv);
      sq += i0 + i1 + i2 + i3;
      wd[k] = (static_cast<uint32_t>(i0) & 0xffu) | (static_cast<uint32_t>(i1) & 0xffu) << 8 |
              (static_cast<uint32_t>(i2) & 0xffu) << 16 | (static_cast<uint32_t>(i3) & 0xffu) << 24;
    }
    const int64_t at = sgroup_pos(g);
    *reinterpret_cast<uint4*>(xsm + 16 * at) = make_uint4(wd[0], wd[1], wd[2], wd[3]);
    const float dx = a * (1.f / 127.f);
    ds[at] = make_float2(dx, dx * i2f(sq));
  }
}

template <class F>
__global__ void __launch_bounds__(k_threads, 3) qgemv_stream_kernel(const __grid_constant__ QParams p) {
  using Gm = SGeometry<F>;
  using Block = typename Gm::Block;
  constexpr int G = Gm::kG, BB = Gm::kBB, CB = Gm::kCB, BUF = Gm::kBuf, S = k_stages;
  extern __shared__ __align__(16) uint8_t smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  uint8_t* wbuf = smem + warp * S * BUF;
  uint8_t* xsm = smem + Gm::kStageSmem;
  const int64_t cols = p.cols, nb = cols / F::kElems;
  const int nchunk = static_cast<int>((nb + CB - 1) / CB);
  const int64_t total = p.rows0[p.count];
  const int64_t r0 = (int64_t{blockIdx.x} * k_warps + warp) * p.rows_per_warp;
  const int64_t r1 = r0 + p.rows_per_warp < total ? r0 + p.rows_per_warp : total;
  const int steps = r0 < r1 ? static_cast<int>(r1 - r0) * nchunk : 0;
  size_t eoff = 0;  // experts form: the slot's expert

  // Load cursor: the next (row, chunk) to issue; lm its matrix.
  int64_t lr = r0;
  int lm = 0, lc = 0, issued = 0;
  while (lm + 1 < p.count && lr >= p.rows0[lm + 1]) ++lm;
  auto issue = [&]() {  // one commit group per call (empty past the last step)
    if (issued < steps) {
      const uint8_t* base = p.w[lm] + eoff;
      const uint8_t* src = base + (lr - p.rows0[lm]) * p.row_bytes + int64_t{lc} * CB * BB;
      const uint8_t* end = base + p.rows[lm] * p.row_bytes;
      const int nbc = static_cast<int>(nb - int64_t{lc} * CB < CB ? nb - int64_t{lc} * CB : CB);
      const uint8_t* al =
          reinterpret_cast<const uint8_t*>(reinterpret_cast<uintptr_t>(src) & ~uintptr_t{15});
      const int nv = (static_cast<int>(src - al) + nbc * BB + 15) / 16;
      const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(wbuf + (issued % S) * BUF));
#pragma unroll
      for (int j = 0; j < Gm::kVpl; ++j) {
        const int i = lane + 32 * j;
        if (i < nv) {
          const int64_t left = end - (al + 16 * i);
          cp_async16(dst + 16 * i, al + 16 * i, left >= 16 ? 16 : (left > 0 ? static_cast<int>(left) : 0));
        }
      }
      ++issued;
      if (++lc == nchunk) {
        lc = 0, ++lr;
        while (lm + 1 < p.count && lr >= p.rows0[lm + 1]) ++lm;
      }
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
  quantize_acts_sums(x, xu, cols, xsm);
  __syncthreads();
  if (steps == 0) return;

  const float2* dsm = reinterpret_cast<const float2*>(xsm + 16 * sgroups(cols));
  int64_t cr = r0;  // compute cursor
  int cm = 0, cc = 0;
  while (cm + 1 < p.count && cr >= p.rows0[cm + 1]) ++cm;
  float acc0 = 0.f, acc1 = 0.f;
  for (int step = 0; step < steps; ++step) {
    issue();  // step + S - 1 into the stage step - 1 left
    cp_async_wait<S - 1>();
    __syncwarp();
    const int64_t b0 = int64_t{cc} * CB;
    const int nbc = static_cast<int>(nb - b0 < CB ? nb - b0 : CB);
    const uint8_t* src = p.w[cm] + eoff + (cr - p.rows0[cm]) * p.row_bytes + b0 * BB;
    const uint8_t* buf = wbuf + (step % S) * BUF + (reinterpret_cast<uintptr_t>(src) & 15);
    // Lane pair ii: groups gi = 2 (lane + 32 ii) and gi + 1 of the chunk, block gi / G; their
    // activations sit at slot b0 G + 64 ii + lane and 32 after it (sgroup_pos).
    constexpr int kBlkStep = 64 / G;  // blocks between a lane's pairs
    const int gl = 2 * lane, bl = gl / G, g0 = gl - bl * G;
    const uint8_t* bk0 = buf + bl * BB;
    const int xg = static_cast<int>(b0) * G + lane;
    const uint8_t* xq = xsm + 16 * xg;
    const float2* xd = dsm + xg;
    auto pair = [&](int ii) {
      uint32_t u0[4], u1[4];
      float d0, m0, d1, m1;
      const uint8_t* bk = bk0 + ii * kBlkStep * BB;
      if constexpr (G == 1) {  // 16-element blocks: the pair is two blocks
        code_words(*reinterpret_cast<const Block*>(bk), 0, u0, d0, m0);
        code_words(*reinterpret_cast<const Block*>(bk + BB), 0, u1, d1, m1);
      } else {
        code_pair(*reinterpret_cast<const Block*>(bk), g0, u0, u1, d0, m0, d1, m1);
      }
      const uint4 q0 = *reinterpret_cast<const uint4*>(xq + 1024 * ii);
      const uint4 q1 = *reinterpret_cast<const uint4*>(xq + 1024 * ii + 512);
      const float2 s0 = xd[64 * ii], s1 = xd[64 * ii + 32];
      const int su0 = dot_u8s8(u0[3], q0.w, dot_u8s8(u0[2], q0.z, dot_u8s8(u0[1], q0.y, dot_u8s8(u0[0], q0.x, 0))));
      const int su1 = dot_u8s8(u1[3], q1.w, dot_u8s8(u1[2], q1.z, dot_u8s8(u1[1], q1.y, dot_u8s8(u1[0], q1.x, 0))));
      acc0 = fmaf(d0 * s0.x, i2f(su0), fmaf(m0, s0.y, acc0));
      acc1 = fmaf(d1 * s1.x, i2f(su1), fmaf(m1, s1.y, acc1));
    };
    if (nbc == CB) {
#pragma unroll
      for (int ii = 0; ii < Gm::kPairs; ++ii) pair(ii);
    } else {  // the row's last, partial chunk: whole pairs (G even; G == 1: nb even, see launch)
#pragma unroll
      for (int ii = 0; ii < Gm::kPairs; ++ii)
        if (2 * (lane + 32 * ii) < nbc * G) pair(ii);
    }
    __syncwarp();
    if (++cc < nchunk) continue;
    float s = warp_sum(acc0 + acc1);  // the row is done
    acc0 = acc1 = 0.f;
    if (lane == 0) {
      const int64_t row = cr - p.rows0[cm];
      if constexpr (quant_ext<F>() == QuantExt::GLOBAL) s *= p.gscale[cm];
      if (p.bias[cm]) s += p.bias[cm][row];
      float* o = p.y[cm] + yoff + row;
      *o = p.accumulate[cm] ? *o + s : s;
    }
    cc = 0, ++cr;
    while (cm + 1 < p.count && cr >= p.rows0[cm + 1]) ++cm;
  }
  cp_async_wait<0>();
}

int sm_count() {
  int dev = 0, v = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev));
  return v;
}

// Dynamic shared memory above 24 KiB (with the <= 22 KiB static chunk buffers: above the
// default 48 KiB) needs an opt-in, once per kernel and device.
template <class F, int NT>
void launch_nt(const QParams& p, dim3 grid, size_t dyn) {
  static std::atomic<uint64_t> opted{0};
  if (dyn > 24 * 1024) {
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    const uint64_t bit = uint64_t{1} << (dev & 63);
    if (!(opted.load() & bit)) {
      CUDA_CHECK(cudaFuncSetAttribute(qgemv_q8_kernel<F, NT>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(k_max_dyn_smem)));
      opted.fetch_or(bit);
    }
  }
  launch_kernel(qgemv_q8_kernel<F, NT>, grid, dim3(k_threads), dyn, p);
}

std::atomic<int>& q8_state() {  // 1 on, 0 off
  static std::atomic<int> on{[] {
    const char* e = std::getenv("FT_CUDA_QGEMV");
    return e && std::strcmp(e, "f32") == 0 ? 0 : 1;
  }()};
  return on;
}

// Whether one token goes through the streaming kernel (FT_CUDA_QGEMV=chunked: the chunked
// kernel above, for comparison).
bool stream_on() {
  static const bool on = [] {
    const char* e = std::getenv("FT_CUDA_QGEMV");
    return !(e && std::strcmp(e, "chunked") == 0);
  }();
  return on;
}

// The streaming kernel for one token; false when its shared memory does not fit.
template <class F>
bool launch_stream(QParams& p, int64_t slots) {
  using Gm = SGeometry<F>;
  if constexpr (Gm::kG == 1) {
    if (p.cols / F::kElems % 2) return false;  // pairs of 16-element blocks
  }
  const size_t dyn = Gm::kStageSmem + sact_smem(p.cols);
  static const int sms = sm_count();
  static const int smem_sm = [] {
    int dev = 0, v = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
    return v;
  }();
  static const int smem_block = [] {
    int dev = 0, v = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    return v;
  }();
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
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  const uint64_t bit = uint64_t{1} << (dev & 63);
  if (!(opted.load() & bit)) {
    CUDA_CHECK(cudaFuncSetAttribute(qgemv_stream_kernel<F>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    smem_block));
    opted.fetch_or(bit);
  }
  launch_kernel(qgemv_stream_kernel<F>, grid, dim3(k_threads), dyn, p);
  return true;
}
}  // namespace

bool launch_q8(DType dt, QParams& p, int64_t nt, int64_t slots) {
  const size_t dyn = act_smem(nt, p.cols);
  if (!q8_state().load() || dyn > k_max_dyn_smem) return false;
  bool launched = false;
  dispatch_quant(dt, [&](auto f) {
    using F = decltype(f);
    if constexpr (has_code_words<F>()) {
      // Experts with external scales (NVFP4 records) stay on the f32 kernel's path.
      if (slots > 0 && quant_ext<F>() != QuantExt::NONE) return;
      if (nt == 1 && stream_on() && launch_stream<F>(p, slots)) {
        launched = true;
        return;
      }
      // Row groups per block: about 3 blocks per SM, so every block is resident at once and the
      // activation quantization is amortised over many rows; at most 16 groups each.
      static const int sms = sm_count();
      int64_t units = 0;
      const int64_t per = int64_t{k_warps} * k_rows_per_warp;
      for (int m = 0; m < p.count; ++m) units += (p.rows[m] + per - 1) / per;
      units *= std::max<int64_t>(slots, 1);
      p.row_iters = static_cast<int>(std::clamp<int64_t>(units / (3 * int64_t{sms}), 1, 16));
      const auto gx = static_cast<unsigned>(set_blocks(p));
      const dim3 grid(gx, static_cast<unsigned>(std::max<int64_t>(slots, 1)));
      switch (nt) {
        case 1: launch_nt<F, 1>(p, grid, dyn); break;
        case 2: launch_nt<F, 2>(p, grid, dyn); break;
        case 3: launch_nt<F, 3>(p, grid, dyn); break;
        default: launch_nt<F, 4>(p, grid, dyn); break;
      }
      launched = true;
    }
  });
  return launched;
}

}  // namespace ft::cuda::qgemv

namespace ft::cuda {
void set_quant_gemv_int8(bool on) { qgemv::q8_state().store(on ? 1 : 0); }
}  // namespace ft::cuda
