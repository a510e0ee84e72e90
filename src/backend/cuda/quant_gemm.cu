// quant_gemm: prefill y = x W^T over block-quantized weights on tensor cores. A panel of rows
// is dequantized (the same dequant_group traits as the GEMV) into two bf16 parts, W = W_hi +
// W_lo; x is split the same way (x = x_hi + x_lo); cuBLAS bf16 GEMMs with fp32 accumulation
// add W_hi x_hi + W_hi x_lo + W_lo x_hi (relative error ~2^-16, fp32-like; the lo*lo term is
// below it). Also the plain dequant of rows to f32 (tests).
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cublas_check.cuh"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/quant_device.cuh"

namespace ft::cuda {

namespace {
struct DequantArgs {
  const uint8_t* w;
  const uint8_t* end;  // the matrix's last byte + 1
  size_t row_bytes;
  int64_t r0, m, cols;  // rows [r0, r0 + m)
  const float* scale_inv;
  float gscale;
  float* f32;              // [m, cols] or nullptr
  __nv_bfloat16 *hi, *lo;  // [m, cols] each, or nullptr
};

// ---- kernels
// One thread per 16-element group of the panel. The traits' ld32 / ld128 read the aligned words
// around a field, up to 4 bytes past the block: the matrix's last blocks decode from a copy
// (an allocation may end right after them; the GEMVs stage rows in padded shared memory).
template <class F>
__global__ void dequant_kernel(const __grid_constant__ DequantArgs a) {
  using Block = typename F::Block;
  constexpr int G = F::kElems / 16;
  constexpr QuantExt ext = quant_ext<F>();
  const int64_t groups_per_row = a.cols / 16, total = a.m * groups_per_row;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / groups_per_row, gc = i % groups_per_row, row = a.r0 + r;
    const uint8_t* at = a.w + row * a.row_bytes + (gc / G) * sizeof(Block);
    struct alignas(16) {
      uint8_t bytes[(sizeof(Block) + 4 + 15) / 16 * 16];
    } copy;
    if (a.end - at < static_cast<int64_t>(sizeof(Block)) + 4) {
      for (int j = 0; j < static_cast<int>(sizeof(copy.bytes)); ++j)
        copy.bytes[j] = j < static_cast<int>(sizeof(Block)) ? at[j] : 0;
      at = copy.bytes;
    }
    const Block& b = *reinterpret_cast<const Block*>(at);
    float v[16];
    dequant_group(b, static_cast<int>(gc % G), v);
    float s = 1.f;
    if constexpr (ext == QuantExt::GLOBAL) s = a.gscale;
    if constexpr (ext == QuantExt::TILE128)
      s = a.scale_inv[(row / 128) * ((a.cols + 127) / 128) + (gc * 16) / 128];
    const int64_t o = r * a.cols + gc * 16;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const float x = v[j] * s;
      if (a.f32) a.f32[o + j] = x;
      if (a.hi) {
        const __nv_bfloat16 h = __float2bfloat16_rn(x);
        a.hi[o + j] = h;
        a.lo[o + j] = __float2bfloat16_rn(x - __bfloat162float(h));
      }
    }
  }
}

// ---- launchers
void dequant(const DeviceMatrix& w, DequantArgs a) {
  FT_CHECK(dtype_is_quant(w.dtype) && w.cols % 16 == 0 && w.cols % dtype_block(w.dtype).elems == 0,
           "quant dequant: {} rows of {}", dtype_name(w.dtype), w.cols);
  FT_CHECK(w.dtype != DType::F8_E4M3_B128 || w.scale_inv, "quant dequant: FP8 without scale_inv");
  a.w = static_cast<const uint8_t*>(w.data), a.row_bytes = dtype_row_bytes(w.dtype, w.cols);
  a.end = a.w + w.rows * a.row_bytes;
  a.cols = w.cols, a.scale_inv = w.scale_inv, a.gscale = w.global_scale;
  const int64_t total = a.m * (w.cols / 16);
  const auto grid = static_cast<unsigned>(std::min<int64_t>((total + 255) / 256, 65535));
  const bool ok = dispatch_quant(w.dtype, [&](auto f) {
    dequant_kernel<decltype(f)><<<grid, 256, 0, stream()>>>(a);
    CUDA_CHECK_LAUNCH();
  });
  FT_CHECK(ok, "quant dequant: no kernel for {}", dtype_name(w.dtype));
}
}  // namespace

void quant_dequant_rows(const DeviceMatrix& w, int64_t r0, int64_t m, float* out) {
  FT_CHECK(r0 >= 0 && m >= 0 && r0 + m <= w.rows, "quant_dequant_rows: rows out of range");
  if (m > 0) dequant(w, {.r0 = r0, .m = m, .f32 = out});
}

void quant_gemm(Blas& blas, const float* x, int64_t n, const DeviceMatrix& w, float* y) {
  FT_CHECK(w.cols <= blas.max_cols() && n <= blas.max_tokens(),
           "quant_gemm: [{}, {}] exceeds the Blas capacity", n, w.cols);
  auto h = static_cast<cublasHandle_t>(blas.handle());
  CUBLAS_CHECK(cublasSetStream(h, stream()));
  auto* xhi = reinterpret_cast<__nv_bfloat16*>(blas.split());
  auto* xlo = xhi + n * w.cols;
  split_bf16(x, n * w.cols, xhi, xlo);
  // The panel's two bf16 parts take the f32 dequant scratch (4 bytes per element).
  const int64_t chunk = std::max<int64_t>(1, Blas::k_dequant_elems / w.cols);
  FT_CHECK(chunk * w.cols <= Blas::k_dequant_elems, "quant_gemm: a row of {} exceeds the tile",
           w.cols);
  auto* whi = reinterpret_cast<__nv_bfloat16*>(blas.dequant());
  const float one = 1.f, zero = 0.f;
  const int nn = static_cast<int>(n), k = static_cast<int>(w.cols);
  for (int64_t r0 = 0; r0 < w.rows; r0 += chunk) {
    const int64_t m = std::min(chunk, w.rows - r0);
    __nv_bfloat16* wlo = whi + m * w.cols;
    dequant(w, {.r0 = r0, .m = m, .hi = whi, .lo = wlo});
    const __nv_bfloat16* A[3] = {whi, whi, wlo};
    const __nv_bfloat16* B[3] = {xhi, xlo, xhi};
    for (int part = 0; part < 3; ++part)
      CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(m), nn, k, &one,
                                   A[part], CUDA_R_16BF, k, B[part], CUDA_R_16BF, k,
                                   part == 0 ? &zero : &one, y + r0, CUDA_R_32F,
                                   static_cast<int>(w.rows), CUBLAS_COMPUTE_32F,
                                   CUBLAS_GEMM_DEFAULT));
  }
}

}  // namespace ft::cuda
