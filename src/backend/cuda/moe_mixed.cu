// moe_mixed: decode of experts whose matrices differ in dtype or stride (GGUF K-quant mixtures,
// a slot pool sized for the largest layer) or carry per-expert scales (FP8 128x128, NVFP4). Per
// matrix: block formats without external scales go through quant_experts_gemv (with the
// stride), FP8 through the tensor-core fp8_experts_gemv (quant_gemv_fp8.cu); NVFP4 / float
// matrices (and FP8 with the f32 reference kernels selected) through experts_gemv_kernel
// below, a warp per (slot, row) reading the expert's scales from its record (cuda_ops.h
// ExpertRecord). Then silu * up and the weighted combine in top-k order, all on the device
// (graph-capturable).
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/moe_combine.cuh"
#include "backend/cuda/quant_device.cuh"

namespace ft::cuda {

namespace {
constexpr int k_rows = 8;  // output rows (warps) per block

struct ExpertGemvArgs {
  const float* x;
  int64_t x_slot;
  int x_div;
  const int32_t* ids;
  const uint8_t* w;  // expert e's record at w + e * stride
  size_t stride, row_bytes, scale_offset;
  int64_t rows, cols;
  float* y;  // slot s: y + s * y_slot
  int64_t y_slot;
};

// ---- kernels
// y[s][r] = x_s . W_{ids[s]}[r] (0 when ids[s] < 0), block-quantized W: lanes take 16-element
// groups; FP8's tile scale applies per group, NVFP4's global scale to the sum.
template <class F>
__global__ void experts_gemv_quant(const __grid_constant__ ExpertGemvArgs a) {
  using Block = typename F::Block;
  constexpr int G = F::kElems / 16;
  constexpr QuantExt ext = quant_ext<F>();
  const int64_t r = blockIdx.x * int64_t{k_rows} + threadIdx.y, s = blockIdx.y;
  if (r >= a.rows) return;
  const int64_t e = a.ids[s];
  float* y = a.y + s * a.y_slot + r;
  if (e < 0) {
    if (threadIdx.x == 0) *y = 0.f;
    return;
  }
  const uint8_t* rec = a.w + e * a.stride;
  const uint8_t* row = rec + r * a.row_bytes;
  const float* x = a.x + (s / a.x_div) * a.x_slot;
  const float* scales = reinterpret_cast<const float*>(rec + a.scale_offset);
  const int64_t groups = a.cols / 16, sc_cols = (a.cols + 127) / 128;
  float acc = 0.f;
  for (int64_t gi = threadIdx.x; gi < groups; gi += 32) {
    const Block& b = *reinterpret_cast<const Block*>(row + (gi / G) * sizeof(Block));
    float u[16], d, m;
    code_group(b, static_cast<int>(gi % G), u, d, m);
    if constexpr (ext == QuantExt::TILE128) d *= scales[(r / 128) * sc_cols + (gi * 16) / 128];
    float su = 0.f, sx = 0.f;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const float xv = x[gi * 16 + i];
      su = fmaf(u[i], xv, su);
      sx += xv;
    }
    acc = fmaf(d, su, fmaf(m, sx, acc));
  }
  acc = warp_sum(acc);
  if constexpr (ext == QuantExt::GLOBAL) acc *= scales[0];
  if (threadIdx.x == 0) *y = acc;
}

// The same for float weights (F32 / F16 / BF16 rows).
template <typename W>
__global__ void experts_gemv_float(const __grid_constant__ ExpertGemvArgs a) {
  const int64_t r = blockIdx.x * int64_t{k_rows} + threadIdx.y, s = blockIdx.y;
  if (r >= a.rows) return;
  const int64_t e = a.ids[s];
  float* y = a.y + s * a.y_slot + r;
  if (e < 0) {
    if (threadIdx.x == 0) *y = 0.f;
    return;
  }
  const W* row = reinterpret_cast<const W*>(a.w + e * a.stride + r * a.row_bytes);
  const float* x = a.x + (s / a.x_div) * a.x_slot;
  float acc = 0.f;
  for (int64_t j = threadIdx.x; j < a.cols; j += 32) acc = fmaf(to_f32(row[j]), x[j], acc);
  acc = warp_sum(acc);
  if (threadIdx.x == 0) *y = acc;
}

bool external_scales(DType t) { return t == DType::F8_E4M3_B128 || t == DType::NVFP4; }

// y = x W_m^T per slot for matrix m of e.
void matrix_gemv(const DeviceExperts& e, int m, const float* x, int64_t x_slot, int x_div,
                 const int32_t* ids, int64_t slots, float* y) {
  const DType t = e.type(m);
  const int64_t rows = e.rows(m), cols = e.cols(m);
  const ExpertRecord rec = expert_record(t, rows, cols);
  if (dtype_is_quant(t) && !external_scales(t)) {
    quant_experts_gemv({.x = x, .x_slot = x_slot, .x_div = x_div, .ids = ids, .slots = slots,
                        .w = {e.matrix(m), nullptr}, .y = {y, nullptr}, .count = 1, .dtype = t,
                        .rows = rows, .cols = cols, .y_slot = rows,
                        .expert_stride = e.expert_stride(m)});
    return;
  }
  if (t == DType::F8_E4M3_B128 &&
      fp8_experts_gemv({.x = x, .x_slot = x_slot, .x_div = x_div, .ids = ids, .slots = slots,
                        .w = {e.matrix(m), nullptr}, .y = {y, nullptr}, .count = 1,
                        .dtype = DType::F8_E4M3_B128, .rows = rows, .cols = cols, .y_slot = rows,
                        .expert_stride = e.expert_stride(m), .scale_offset = rec.scale_offset}))
    return;
  const ExpertGemvArgs a{.x = x, .x_slot = x_slot, .x_div = x_div, .ids = ids,
                         .w = static_cast<const uint8_t*>(e.matrix(m)),
                         .stride = e.expert_stride(m), .row_bytes = dtype_row_bytes(t, cols),
                         .scale_offset = rec.scale_offset, .rows = rows, .cols = cols, .y = y,
                         .y_slot = rows};
  const dim3 grid(static_cast<unsigned>((rows + k_rows - 1) / k_rows), static_cast<unsigned>(slots));
  const dim3 block(32, k_rows);
  if (dtype_is_quant(t)) {
    FT_CHECK(cols % 16 == 0 && cols % dtype_block(t).elems == 0,
             "moe_decode_mixed: rows of {} are not whole {} blocks", cols, dtype_name(t));
    const bool ok = dispatch_quant(t, [&](auto f) {
      experts_gemv_quant<decltype(f)><<<grid, block, 0, stream()>>>(a);
    });
    FT_CHECK(ok, "moe_decode_mixed: no kernel for {}", dtype_name(t));
  } else {
    dispatch_weight_type(t, [&](auto tag) {
      using W = typename decltype(tag)::type;
      experts_gemv_float<W><<<grid, block, 0, stream()>>>(a);
    });
  }
  CUDA_CHECK_LAUNCH();
}
}  // namespace

// ---- launcher
void moe_decode_mixed(const DeviceExperts& e, const MoeArgs& a, MoeWorkspace& ws) {
  FT_CHECK(e.gate && e.up && e.down && a.n <= k_gemv_max_tokens && a.n <= ws.max_tokens,
           "moe_decode_mixed: bad arguments");
  if (a.n == 0) return;
  const int64_t slots = a.n * a.top_k, H = e.hidden, I = e.inter;
  const int k = static_cast<int>(a.top_k);
  float *act = ws.act.as<float>(), *up = ws.up.as<float>(), *d = ws.down.as<float>();
  const DType tg = e.type(0);
  constexpr DType f8 = DType::F8_E4M3_B128;
  if (tg == e.type(1) && dtype_is_quant(tg) && !external_scales(tg) &&
      e.expert_stride(0) == e.expert_stride(1)) {  // gate and up in one launch
    quant_experts_gemv({.x = a.x, .x_slot = H, .x_div = k, .ids = a.ids, .slots = slots,
                        .w = {e.gate, e.up}, .y = {act, up}, .count = 2, .dtype = tg, .rows = I,
                        .cols = H, .y_slot = I, .expert_stride = e.expert_stride(0)});
  } else if (!(tg == f8 && e.type(1) == f8 && e.expert_stride(0) == e.expert_stride(1) &&
               fp8_experts_gemv({.x = a.x, .x_slot = H, .x_div = k, .ids = a.ids, .slots = slots,
                                 .w = {e.gate, e.up}, .y = {act, up}, .count = 2, .dtype = f8,
                                 .rows = I, .cols = H, .y_slot = I,
                                 .expert_stride = e.expert_stride(0),
                                 .scale_offset = expert_record(f8, I, H).scale_offset}))) {
    matrix_gemv(e, 0, a.x, H, k, a.ids, slots, act);
    matrix_gemv(e, 1, a.x, H, k, a.ids, slots, up);
  }
  // Down on silu(gate) * up fused into its input (FP8: its staging; block formats: the int8
  // rounding), weights in flight before its PDL wait (the ids were final before gate+up began).
  const DType td = e.type(2);
  if (dtype_is_quant(td) && !external_scales(td)) {
    quant_experts_gemv({.x = act, .x_slot = I, .x_div = 1, .ids = a.ids, .slots = slots,
                        .w = {e.down, nullptr}, .y = {d, nullptr}, .count = 1, .dtype = td,
                        .rows = H, .cols = I, .y_slot = H, .expert_stride = e.expert_stride(2),
                        .x_up = up, .ids_early = true});
  } else if (!(td == f8 &&
               fp8_experts_gemv({.x = act, .x_slot = I, .x_div = 1, .ids = a.ids,
                                 .slots = slots, .w = {e.down, nullptr}, .y = {d, nullptr},
                                 .count = 1, .dtype = f8, .rows = H, .cols = I, .y_slot = H,
                                 .expert_stride = e.expert_stride(2), .x_up = up,
                                 .scale_offset = expert_record(f8, H, I).scale_offset,
                                 .ids_early = true}))) {
    silu_mul(act, up, slots * I, act);
    matrix_gemv(e, 2, act, I, 1, a.ids, slots, d);
  }
  combine_slots(d, nullptr, a.weights, k, H, a.n, a.accumulate, a.out);
}

}  // namespace ft::cuda
