// quant_gemv: y = x W^T for 1..4 tokens over block-quantized weights, dequant fused: the
// launchers (plain matrices and the experts form), which take the int8-activation kernel
// (quant_gemv_q8.cu) where the format has integer codes, and the f32-activation kernel here
// (FP8, the reference path, activations too wide for shared memory). One template over the
// format traits (quant_device.cuh), instantiated per format. Each warp owns k_rows_per_warp
// output rows: per chunk of ~1 KiB of every row it loads the bytes with aligned 16-byte
// streaming loads into shared memory, then each lane decodes 16-element groups into codes u and
// an affine map w = d u + m and adds d * sum(u x) + m * sum(x) (activations read once per group
// for all the warp's rows). The experts form runs one launch over routed (token, expert) slots
// with the expert id read on the device; its input may be silu(x) * x_up (fused SwiGLU).
#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/quant_device.cuh"
#include "backend/cuda/quant_gemv.cuh"

namespace ft::cuda {

namespace {
using namespace qgemv;

template <class F>
struct Geometry {
  using Block = typename F::Block;
  static constexpr int kBB = sizeof(Block), kG = F::kElems / 16;
  static constexpr int kCB = k_chunk_bytes / kBB > 0 ? k_chunk_bytes / kBB : 1;  // blocks/chunk
  // bytes: the chunk, its misalignment (< 16) and the words ld32 may read past the end
  static constexpr int kBuf = (kCB * kBB + 15) / 16 * 16 + 32;
  static constexpr int kVpl = (kBuf / 16 + 31) / 32;            // 16-byte vectors per lane
};

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
  const float* xu = p.x_up;
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
    if (xu) xu += (s / p.x_div) * p.x_slot;
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
    auto group = [&](int gi) {
      const int blk = gi / G, g = gi % G;
      const int64_t col = (b0 + blk) * F::kElems + 16 * g;
      float xv[NT][16], sx[NT];
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        sx[t] = 0.f;
#pragma unroll
        for (int i = 0; i < 16; i += 4) {
          float4 f = __ldg(reinterpret_cast<const float4*>(x + t * p.ldx + col + i));
          if (xu) f = silu_mul4(f, __ldg(reinterpret_cast<const float4*>(xu + t * p.ldx + col + i)));
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
    };
    if constexpr (CB * G % 32 == 0) {  // whole chunks (FP8): the lane's groups unrolled
      if (nbc == CB) {
#pragma unroll
        for (int ii = 0; ii < CB * G / 32; ++ii) group(lane + 32 * ii);
        __syncwarp();
        continue;
      }
    }
    for (int gi = lane; gi < nbc * G; gi += 32) group(gi);
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

void check_quant(DType t, int64_t cols, const float* x, const char* op) {
  FT_CHECK(dtype_is_quant(t), "{}: {} is not a quantized dtype", op, dtype_name(t));
  FT_CHECK(cols % dtype_block(t).elems == 0 && cols % 16 == 0,
           "{}: rows of {} are not whole {} blocks", op, cols, dtype_name(t));
  FT_CHECK(reinterpret_cast<uintptr_t>(x) % 16 == 0, "{}: activations not 16-byte aligned", op);
}

// The int8-activation kernel where the format and shape allow it, else the f32 one. slots:
// the experts form's slot count (0: plain matrices).
void launch_format(DType t, QParams& p, int64_t nt, int64_t slots) {
  if (launch_q8(t, p, nt, slots)) return;
  p.row_iters = 1;
  const dim3 grid(static_cast<unsigned>(set_blocks(p)),
                  static_cast<unsigned>(slots > 0 ? slots : 1));
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
  for (int m = 1; m < count; ++m)
    if (outs[m].w.dtype != dt) {  // matrices of different types (a Q4_K_M q/k/v): one launch each
      for (int j = 0; j < count; ++j) {
        if (dtype_is_quant(outs[j].w.dtype))
          quant_gemv_multi(x, n, &outs[j], 1);
        else
          gemv_multi(x, n, &outs[j], 1);
      }
      return;
    }
  check_quant(dt, cols, x, "quant_gemv");
  QParams p{.x = x, .ldx = cols, .cols = cols, .row_bytes = dtype_row_bytes(dt, cols),
            .count = count};
  for (int m = 0; m < count; ++m) {
    const GemvOut& o = outs[m];
    FT_CHECK(o.w.data && o.w.rows > 0 && o.w.cols == cols && o.w.dtype == dt && o.y,
             "quant_gemv: matrix {} differs", m);
    FT_CHECK(dt != DType::F8_E4M3_B128 || o.w.scale_inv, "quant_gemv: FP8 without scale_inv");
    p.w[m] = static_cast<const uint8_t*>(o.w.data), p.y[m] = o.y, p.bias[m] = o.bias;
    p.rows[m] = o.w.rows, p.accumulate[m] = o.accumulate;
    p.scale_inv[m] = o.w.scale_inv, p.gscale[m] = o.w.global_scale;
  }
  launch_format(dt, p, n, 0);
}

// The experts form's launch parameters (no checks: each caller checks what its kernel needs).
static qgemv::QParams experts_params(const QuantExpertGemv& a) {
  const size_t rb = dtype_row_bytes(a.dtype, a.cols);
  qgemv::QParams p{.x = a.x, .ldx = a.cols, .cols = a.cols, .row_bytes = rb, .count = a.count};
  for (int m = 0; m < a.count; ++m) {
    p.w[m] = static_cast<const uint8_t*>(a.w[m]), p.y[m] = a.y[m], p.rows[m] = a.rows;
    p.gscale[m] = 1.f;
  }
  p.ids = a.ids, p.expert_bytes = a.expert_stride ? a.expert_stride : a.rows * rb;
  p.x_div = a.x_div, p.x_slot = a.x_slot, p.y_slot = a.y_slot, p.x_up = a.x_up;
  p.ids_early = a.ids_early;
  return p;
}

void quant_experts_gemv(const QuantExpertGemv& a) {
  FT_CHECK(a.count >= 1 && a.count <= 2 && a.slots >= 0 && a.rows > 0 && a.ids && a.x &&
               a.x_div > 0,
           "quant_experts_gemv: bad arguments");
  if (a.slots == 0) return;
  check_quant(a.dtype, a.cols, a.x, "quant_experts_gemv");
  FT_CHECK(a.dtype != DType::F8_E4M3_B128 && a.dtype != DType::NVFP4,
           "quant_experts_gemv: {} experts need per-expert scales (not supported)",
           dtype_name(a.dtype));
  FT_CHECK(a.x_slot % 4 == 0, "quant_experts_gemv: activation rows not 16-byte aligned");
  for (int m = 0; m < a.count; ++m)
    FT_CHECK(a.w[m] && a.y[m], "quant_experts_gemv: matrix {} missing", m);
  FT_CHECK(!a.x_up || reinterpret_cast<uintptr_t>(a.x_up) % 16 == 0,
           "quant_experts_gemv: x_up not 16-byte aligned");
  qgemv::QParams p = experts_params(a);
  launch_format(a.dtype, p, 1, a.slots);
}

bool fp8_experts_gemv(const QuantExpertGemv& a) {
  if (a.dtype != DType::F8_E4M3_B128 || a.count < 1 || a.count > 2) return false;
  if (a.slots == 0) return true;
  return qgemv::launch_fp8(experts_params(a), 1, a.slots, a.scale_offset, a.ids_early);
}

}  // namespace ft::cuda
