// quant_gemv_q8: the quantized GEMV for 1..4 tokens with int8 activations, one kernel template
// over the format traits' code_words (quant_device.cuh). Each block first quantizes the
// activations it needs into shared memory (int8 per 16 elements, scale max|x| / 127: the CPU
// quant matmul's rounding), then each warp streams k_rows_per_warp rows in ~1 KiB chunks
// (aligned 16-byte loads, the next chunk in flight while this one is computed) and every lane
// takes whole 16-element groups: four __dp4a of the code words with the int8 activations, then
// d * dx * sum(u q) + m * dx * sum(q). A block covers row_iters row groups so the activation
// quantization is amortised over many rows on large matrices. One token (decode, experts) goes
// through the streaming kernel of quant_gemv_stream.cu instead; this chunked one serves 2..4
// tokens, and one token too with FT_CUDA_QGEMV=chunked.
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

// The most dynamic shared memory a block may use: k_max_dyn_smem, or what this device allows
// a block less the static buffers (consumer GPUs: 99 KiB).
template <class F, int NT>
size_t most_dyn_smem() {
  return std::min(k_max_dyn_smem,
                  max_dynamic_smem(reinterpret_cast<const void*>(qgemv_q8_kernel<F, NT>)));
}

template <class F>
size_t most_dyn_smem(int64_t nt) {
  switch (nt) {
    case 1: return most_dyn_smem<F, 1>();
    case 2: return most_dyn_smem<F, 2>();
    case 3: return most_dyn_smem<F, 3>();
    default: return most_dyn_smem<F, 4>();
  }
}

// Dynamic shared memory above 24 KiB (with the <= 22 KiB static chunk buffers: above the
// default 48 KiB) needs an opt-in, once per kernel and device.
template <class F, int NT>
void launch_nt(const QParams& p, dim3 grid, size_t dyn) {
  static std::atomic<uint64_t> opted{0};
  if (dyn > 24 * 1024)
    opt_in_smem(qgemv_q8_kernel<F, NT>, static_cast<int>(most_dyn_smem<F, NT>()), opted);
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
// kernel here, for comparison).
bool stream_on() {
  static const bool on = [] {
    const char* e = std::getenv("FT_CUDA_QGEMV");
    return !(e && std::strcmp(e, "chunked") == 0);
  }();
  return on;
}

}  // namespace

bool fast_on() { return q8_state().load() != 0; }

bool launch_q8(DType dt, QParams& p, int64_t nt, int64_t slots) {
  const size_t dyn = act_smem(nt, p.cols);
  if (dt == DType::F8_E4M3_B128) return slots == 0 && launch_fp8(p, nt);  // f16 activations
  if (!q8_state().load() || dyn > k_max_dyn_smem) return false;
  bool launched = false;
  dispatch_quant(dt, [&](auto f) {
    using F = decltype(f);
    if constexpr (has_code_words<F>()) {
      // Experts with external scales (NVFP4 records) stay on the f32 kernel's path.
      if (slots > 0 && quant_ext<F>() != QuantExt::NONE) return;
      if (nt == 1 && stream_on() && launch_stream(dt, p, slots)) {
        launched = true;
        return;
      }
      if (dyn > 24 * 1024 && dyn > most_dyn_smem<F>(nt)) return;  // the f32 kernel's path
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
