// quant_gemv: y = x W^T for 1..4 tokens over block-quantized weights, dequant fused, f32
// activations and accumulation; one kernel template over the format traits (quant_device.cuh),
// instantiated per format. Each warp owns k_rows_per_warp output rows: per chunk of ~1 KiB of
// every row it loads the bytes with aligned 16-byte streaming loads into shared memory (one
// load shape for every block size), then each lane decodes 16-element groups into codes u and an
// affine map w = d u + m and adds d * sum(u x) + m * sum(x) (activations read once per group for
// all the warp's rows; codes become floats by a byte permute, not I2F). The experts form runs
// one launch over routed (token, expert) slots with the expert id read on the device.
#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/quant_device.cuh"

namespace ft::cuda {

namespace {
constexpr int k_warps = 8;           // warps per block
constexpr int k_rows_per_warp = 2;   // rows sharing each activation load
constexpr int k_chunk_bytes = 1024;  // bytes of a row staged per step (whole blocks)

struct QParams {
  const float* x;
  int64_t ldx, cols;
  size_t row_bytes;
  int count;
  const uint8_t* w[k_gemv_multi];
  float* y[k_gemv_multi];
  const float* bias[k_gemv_multi];
  int64_t rows[k_gemv_multi];
  int64_t block0[k_gemv_multi + 1];
  bool accumulate[k_gemv_multi];
  const float* scale_inv[k_gemv_multi];  // FP8 tiles [ceil(rows/128), ceil(cols/128)]
  float gscale[k_gemv_multi];            // NVFP4 global scale
  // Experts form (ids != nullptr, one token per slot = blockIdx.y): matrix w + ids[s] *
  // expert_bytes, input x + (s / x_div) * x_slot, output y + s * y_slot; ids[s] < 0 writes 0.
  const int32_t* ids;
  size_t expert_bytes;
  int x_div;
  int64_t x_slot, y_slot;
};

template <class F>
struct Geometry {
  using Block = typename F::Block;
  static constexpr int kBB = sizeof(Block), kG = F::kElems / 16;
  static constexpr int kCB = k_chunk_bytes / kBB > 0 ? k_chunk_bytes / kBB : 1;  // blocks/chunk
  // bytes: the chunk, its misalignment (< 16) and the words ld32 may read past the end
  static constexpr int kBuf = (kCB * kBB + 15) / 16 * 16 + 32;
  static constexpr int kVpl = (kBuf / 16 + 31) / 32;            // 16-byte vectors per lane
};

// 16 bytes at p, or the bytes before end (the matrix's last vector may overhang it).
__device__ __forceinline__ uint4 load16(const uint8_t* p, const uint8_t* end) {
  if (p + 16 <= end) return ldg_stream(p);
  uint8_t b[16] = {};
  for (int i = 0; i < 16 && p + i < end; ++i) b[i] = p[i];
  uint4 v;
  memcpy(&v, b, 16);
  return v;
}

// Occupancy bound: at least 4 blocks (32 warps) per SM for one token, so enough row loads are
// in flight between the warps' decode phases (unbounded, the compiler took ~2 blocks' worth).
template <class F, int NT>
__global__ void __launch_bounds__(32 * k_warps, NT == 1 ? 4 : 2)
    qgemv_kernel(const __grid_constant__ QParams p) {
  using Gm = Geometry<F>;
  using Block = typename Gm::Block;
  constexpr int R = k_rows_per_warp, G = Gm::kG, BB = Gm::kBB, CB = Gm::kCB;
  constexpr QuantExt ext = quant_ext<F>();
  __shared__ __align__(16) uint8_t smem[k_warps][R][Gm::kBuf];
  pdl_wait();
  pdl_trigger();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  int m = 0;
  while (m + 1 < p.count && blockIdx.x >= p.block0[m + 1]) ++m;
  const int64_t rows = p.rows[m];
  const int64_t row0 = ((blockIdx.x - p.block0[m]) * k_warps + warp) * int64_t{R};
  if (row0 >= rows) return;
  const uint8_t* w = p.w[m];
  const float* x = p.x;
  float* y = p.y[m];
  if (p.ids) {
    const int64_t s = blockIdx.y, e = p.ids[s];
    y += s * p.y_slot;
    if (e < 0) {  // computed elsewhere: contributes nothing
      for (int r = lane; r < R; r += 32)
        if (row0 + r < rows) y[row0 + r] = 0.f;
      return;
    }
    w += e * p.expert_bytes;
    x += (s / p.x_div) * p.x_slot;
  }
  const uint8_t* end = w + rows * p.row_bytes;
  const int64_t nb = p.cols / F::kElems;
  const int64_t sc_cols = (p.cols + 127) / 128;
  float acc[R][NT] = {};
  for (int64_t b0 = 0; b0 < nb; b0 += CB) {
    const int nbc = static_cast<int>(nb - b0 < CB ? nb - b0 : CB);
    int off[R];
    uint4 v[R][Gm::kVpl];
#pragma unroll
    for (int r = 0; r < R; ++r) {  // every load of the chunk in flight before any store
      const uint8_t* src = w + (row0 + r) * p.row_bytes + b0 * BB;
      const uint8_t* al = reinterpret_cast<const uint8_t*>(reinterpret_cast<uintptr_t>(src) & ~uintptr_t{15});
      off[r] = static_cast<int>(src - al);
      const int nv = (off[r] + nbc * BB + 15) / 16;
#pragma unroll
      for (int j = 0; j < Gm::kVpl; ++j) {
        const int i = lane + 32 * j;
        if (row0 + r < rows && i < nv) v[r][j] = load16(al + 16 * i, end);
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int nv = (off[r] + nbc * BB + 15) / 16;
#pragma unroll
      for (int j = 0; j < Gm::kVpl; ++j) {
        const int i = lane + 32 * j;
        if (row0 + r < rows && i < nv) *reinterpret_cast<uint4*>(&smem[warp][r][16 * i]) = v[r][j];
      }
    }
    __syncwarp();
    for (int gi = lane; gi < nbc * G; gi += 32) {
      const int blk = gi / G, g = gi % G;
      const int64_t col = (b0 + blk) * F::kElems + 16 * g;
      float xv[NT][16], sx[NT];
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        sx[t] = 0.f;
#pragma unroll
        for (int i = 0; i < 16; i += 4) {
          const float4 f = __ldg(reinterpret_cast<const float4*>(x + t * p.ldx + col + i));
          xv[t][i] = f.x, xv[t][i + 1] = f.y, xv[t][i + 2] = f.z, xv[t][i + 3] = f.w;
          sx[t] += (f.x + f.y) + (f.z + f.w);
        }
      }
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (row0 + r >= rows) continue;
        const Block& bk = *reinterpret_cast<const Block*>(&smem[warp][r][off[r] + blk * BB]);
        float u[16], d, mm;  // w = d * u + mm: dot = d * sum(u x) + mm * sum(x)
        code_group(bk, g, u, d, mm);
        if constexpr (ext == QuantExt::TILE128)
          d *= p.scale_inv[m][((row0 + r) / 128) * sc_cols + col / 128];
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          float su = 0.f;
#pragma unroll
          for (int i = 0; i < 16; ++i) su = fmaf(u[i], xv[t][i], su);
          acc[r][t] = fmaf(d, su, fmaf(mm, sx[t], acc[r][t]));
        }
      }
    }
    __syncwarp();
  }
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      float v = warp_sum(acc[r][t]);
      const int64_t row = row0 + r;
      if (lane != 0 || row >= rows) continue;
      if constexpr (ext == QuantExt::GLOBAL) v *= p.gscale[m];
      if (p.bias[m]) v += p.bias[m][row];
      float* o = y + t * rows + row;
      *o = p.accumulate[m] ? *o + v : v;
    }
}

template <class F>
void launch(const QParams& p, int64_t nt, dim3 grid) {
  const dim3 block(32 * k_warps);
  switch (nt) {
    case 1: launch_kernel(qgemv_kernel<F, 1>, grid, block, 0, p); break;
    case 2: launch_kernel(qgemv_kernel<F, 2>, grid, block, 0, p); break;
    case 3: launch_kernel(qgemv_kernel<F, 3>, grid, block, 0, p); break;
    default: launch_kernel(qgemv_kernel<F, 4>, grid, block, 0, p); break;
  }
}

int64_t blocks_for(int64_t rows) {
  const int64_t per = int64_t{k_warps} * k_rows_per_warp;
  return (rows + per - 1) / per;
}

void check_quant(DType t, int64_t cols, const float* x, const char* op) {
  FT_CHECK(dtype_is_quant(t), "{}: {} is not a quantized dtype", op, dtype_name(t));
  FT_CHECK(cols % dtype_block(t).elems == 0 && cols % 16 == 0,
           "{}: rows of {} are not whole {} blocks", op, cols, dtype_name(t));
  FT_CHECK(reinterpret_cast<uintptr_t>(x) % 16 == 0, "{}: activations not 16-byte aligned", op);
}

void launch_format(DType t, const QParams& p, int64_t nt, dim3 grid) {
  const bool ok = dispatch_quant(t, [&](auto f) {
    launch<decltype(f)>(p, nt, grid);
    CUDA_CHECK_LAUNCH();
  });
  FT_CHECK(ok, "quant GEMV: no kernel for {}", dtype_name(t));
}
}  // namespace

// ---- launchers
void quant_gemv_multi(const float* x, int64_t n, const GemvOut* outs, int count) {
  FT_CHECK(count >= 1 && count <= k_gemv_multi && n >= 0 && n <= k_gemv_max_tokens,
           "quant_gemv: {} matrices, {} tokens", count, n);
  if (n == 0) return;
  const DType dt = outs[0].w.dtype;
  const int64_t cols = outs[0].w.cols;
  check_quant(dt, cols, x, "quant_gemv");
  QParams p{.x = x, .ldx = cols, .cols = cols, .row_bytes = dtype_row_bytes(dt, cols),
            .count = count};
  p.block0[0] = 0;
  for (int m = 0; m < count; ++m) {
    const GemvOut& o = outs[m];
    FT_CHECK(o.w.data && o.w.rows > 0 && o.w.cols == cols && o.w.dtype == dt && o.y,
             "quant_gemv: matrix {} differs", m);
    FT_CHECK(dt != DType::F8_E4M3_B128 || o.w.scale_inv, "quant_gemv: FP8 without scale_inv");
    p.w[m] = static_cast<const uint8_t*>(o.w.data), p.y[m] = o.y, p.bias[m] = o.bias;
    p.rows[m] = o.w.rows, p.accumulate[m] = o.accumulate;
    p.scale_inv[m] = o.w.scale_inv, p.gscale[m] = o.w.global_scale;
    p.block0[m + 1] = p.block0[m] + blocks_for(o.w.rows);
  }
  launch_format(dt, p, n, dim3(static_cast<unsigned>(p.block0[count])));
}

void quant_experts_gemv(const QuantExpertGemv& a) {
  FT_CHECK(a.count >= 1 && a.count <= 2 && a.slots >= 0 && a.ids && a.x && a.x_div > 0,
           "quant_experts_gemv: bad arguments");
  if (a.slots == 0) return;
  check_quant(a.dtype, a.cols, a.x, "quant_experts_gemv");
  FT_CHECK(a.dtype != DType::F8_E4M3_B128 && a.dtype != DType::NVFP4,
           "quant_experts_gemv: {} experts need per-expert scales (not supported)",
           dtype_name(a.dtype));
  FT_CHECK(a.x_slot % 4 == 0, "quant_experts_gemv: activation rows not 16-byte aligned");
  const size_t rb = dtype_row_bytes(a.dtype, a.cols);
  QParams p{.x = a.x, .ldx = a.cols, .cols = a.cols, .row_bytes = rb, .count = a.count};
  p.block0[0] = 0;
  for (int m = 0; m < a.count; ++m) {
    FT_CHECK(a.w[m] && a.y[m], "quant_experts_gemv: matrix {} missing", m);
    p.w[m] = static_cast<const uint8_t*>(a.w[m]), p.y[m] = a.y[m], p.rows[m] = a.rows;
    p.gscale[m] = 1.f;
    p.block0[m + 1] = p.block0[m] + blocks_for(a.rows);
  }
  p.ids = a.ids, p.expert_bytes = a.expert_stride ? a.expert_stride : a.rows * rb, p.x_div = a.x_div, p.x_slot = a.x_slot;
  p.y_slot = a.y_slot;
  launch_format(a.dtype, p, 1,
                dim3(static_cast<unsigned>(p.block0[a.count]), static_cast<unsigned>(a.slots)));
}

}  // namespace ft::cuda
