// matmul: y = x W^T (+ bias) with f32 / f16 / bf16 weights and fp32 compute on every path.
// Small n (decode): a warp per output row reading 16-byte weight vectors, NT tokens per warp
// so each weight is read once; up to k_gemv_multi matrices per launch, optional accumulate; the
// grid is at most one resident wave, each block streaming its row groups. Larger n: cuBLAS (see
// Blas in cuda_ops.h for the bf16 split). Block-quantized weights go to quant_gemv.cu /
// quant_gemm.cu.
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cublas_check.cuh"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/route.cuh"
#include "backend/cuda/slot_cache.cuh"
#include "base/env.h"

namespace ft::cuda {

namespace {
// ---- kernels
constexpr int k_gemv_rows = 8;  // warps (output rows) per block

// Up to k_gemv_multi matrices of one input; blocks [block0[m], block0[m+1]) belong to matrix m.
struct GemvParams {
  const float* x;
  int64_t cols;
  int count;
  const void* w[k_gemv_multi];
  float* y[k_gemv_multi];
  const float* bias[k_gemv_multi];
  int64_t rows[k_gemv_multi];
  int64_t block0[k_gemv_multi + 1];
  bool accumulate[k_gemv_multi];
  const float* norm;  // rmsnorm weights [cols] or nullptr
  float eps;
  float* x_out;  // normalised x (written by block 0) or nullptr
  bool stage;    // copy x into shared memory first (norm implies it)
  // Fused routing (count == 1): the last block routes y's rows (see GemvRoute).
  uint32_t* route_counter;
  int32_t* route_ids;
  float* route_w;
  int route_k;
  bool route_renorm;
  RouteLocal route_local;
  bool route_ensure;  // the same block then runs the slot cache's bookkeeping
  SlotEnsureArgs ensure;
};

// Largest shared-memory staging of normalised x (NT rows of cols floats).
constexpr int64_t k_gemv_norm_smem = 48 * 1024;
// Norm weights per thread held in registers from before the dependency wait (columns past
// k_gemv_norm_regs * 256 are loaded after it): 8 cover a hidden size of 2048.
constexpr int k_gemv_norm_regs = 8;

// Row groups (k_gemv_rows rows of one matrix) in a block: group g of matrix m (block0[m] <=
// g < block0[m + 1]) and this warp's row in it.
struct GemvRow {
  int m;
  int64_t row;
};
__device__ __forceinline__ GemvRow gemv_row(const GemvParams& p, int64_t g) {
  int m = 0;
  while (m + 1 < p.count && g >= p.block0[m + 1]) ++m;
  return {m, (g - p.block0[m]) * int64_t{k_gemv_rows} + threadIdx.y};
}

// The router's last block with GemvRoute::ensure: the layer's slot map, recency and the step
// counter are loaded while route_token reads the logits, the ids are routed into shared memory
// (then stored), and ensure_block works from those copies, so its lookups wait on no round
// trip after the routing's (the block is alone on the slot state: the previous layer's
// bookkeeping finished with its kernel). Measured level with global lookups (session 22): the
// cost was ensure_block's serial part, which its warp path for all-hit routes removed.
constexpr int k_pre_per_thread = 2;  // experts per thread preloaded (512 with 256 threads)
template <int NT>
__device__ void route_and_ensure(const GemvParams& p) {
  constexpr int T = 32 * k_gemv_rows;
  __shared__ int32_t ids[NT * 32], slot_for_id[k_pre_per_thread * T];
  __shared__ long long recency[k_pre_per_thread * T];
  const int tid = static_cast<int>(threadIdx.y * 32 + threadIdx.x);
  const SlotCacheState& s = p.ensure.s;
  const bool preload = s.n_experts <= k_pre_per_thread * T;
  const int64_t base = p.ensure.layer * s.n_experts;
  int32_t sl[k_pre_per_thread];
  long long rc[k_pre_per_thread];
  if (preload)
#pragma unroll
    for (int j = 0; j < k_pre_per_thread; ++j) {
      const int64_t e = tid + int64_t{j} * T;
      if (e < s.n_experts) sl[j] = s.slot_for_id[base + e], rc[j] = s.recency[base + e];
    }
  const long long step = s.counters[SC_STEP];
  for (int t = threadIdx.y; t < NT; t += k_gemv_rows)
    route_token(p.y[0] + t * p.rows[0], static_cast<int>(p.rows[0]), p.route_k, p.route_renorm,
                ids + t * p.route_k, p.route_w + t * p.route_k, p.route_local.begin,
                p.route_local.count);
  if (preload)
#pragma unroll
    for (int j = 0; j < k_pre_per_thread; ++j) {
      const int64_t e = tid + int64_t{j} * T;
      if (e < s.n_experts) slot_for_id[e] = sl[j], recency[e] = rc[j];
    }
  __syncthreads();
  for (int i = tid; i < NT * p.route_k; i += T) p.route_ids[i] = ids[i];
  ensure_block<T, false>(p.ensure, HybridSplitArgs{}, tid,
                         {.ids = ids,
                          .slot_for_id = preload ? slot_for_id : nullptr,
                          .recency = preload ? recency : nullptr,
                          .step = step});
}

// ROUTE 1: p.route_counter is set; 2: p.route_ensure too (separate instantiations: the tails
// cost registers, and the other GEMVs keep their code).
// The grid is at most one resident wave (launch_gemv): block b takes row groups b, b + grid,
// ... and, in the VEC layout, loads the next group's first weight batch before it uses the
// current one, so a matrix with more groups than fit on the GPU streams without a second wave
// (which would wait behind the first and behind the next kernel's early-launched blocks).
template <typename W, bool VEC, int NT, int ROUTE>
__global__ void __launch_bounds__(32 * k_gemv_rows)
    gemv_kernel(const __grid_constant__ GemvParams p) {
  extern __shared__ float4 xs_raw[];
  const int64_t groups = p.block0[p.count];
  int64_t g = blockIdx.x;
  GemvRow at = gemv_row(p, g);
  // The first group's weight vectors (immutable) are in flight before the previous kernel ends.
  uint4 pre[k_dot_batch];
  if constexpr (VEC)
    if (at.row < p.rows[at.m])
      dot_load(static_cast<const W*>(p.w[at.m]) + at.row * p.cols, p.cols,
               int64_t{threadIdx.x} * k_vec<W>, pre);
  // The norm weights (immutable) of this thread's first columns, also before the wait.
  const int tid = threadIdx.y * 32 + threadIdx.x;
  float nw[k_gemv_norm_regs];
#pragma unroll
  for (int r = 0; r < k_gemv_norm_regs; ++r) {
    const int64_t i = tid + int64_t{r} * 32 * k_gemv_rows;
    nw[r] = p.norm && i < p.cols ? p.norm[i] : 0.f;
  }
  pdl_wait();
  pdl_trigger();
  const float* x = p.x;
  if (p.norm) {  // the rmsnorm of x, as rmsnorm.cu computes it, staged for the block
    float* xs = reinterpret_cast<float*>(xs_raw);
    __shared__ float part[k_gemv_rows][NT];
    float ss[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      ss[t] = 0.f;
      for (int64_t i = tid; i < p.cols; i += 32 * k_gemv_rows) {
        const float v = p.x[t * p.cols + i];
        xs[t * p.cols + i] = v;
        ss[t] += v * v;
      }
      ss[t] = warp_sum(ss[t]);
      if (threadIdx.x == 0) part[threadIdx.y][t] = ss[t];
    }
    __syncthreads();
    float inv[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      float tot = 0.f;
#pragma unroll
      for (int w = 0; w < k_gemv_rows; ++w) tot += part[w][t];
      inv[t] = rsqrtf(tot / static_cast<float>(p.cols) + p.eps);
    }
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      auto put = [&](int64_t i, float w) {
        const float v = xs[t * p.cols + i] * inv[t] * w;
        xs[t * p.cols + i] = v;
        if (blockIdx.x == 0 && p.x_out) p.x_out[t * p.cols + i] = v;
      };
#pragma unroll
      for (int r = 0; r < k_gemv_norm_regs; ++r) {
        const int64_t i = tid + int64_t{r} * 32 * k_gemv_rows;
        if (i < p.cols) put(i, nw[r]);
      }
      for (int64_t i = tid + int64_t{k_gemv_norm_regs} * 32 * k_gemv_rows; i < p.cols;
           i += 32 * k_gemv_rows)
        put(i, p.norm[i]);
    }
    __syncthreads();
    x = xs;
  } else if (p.stage) {  // activations from shared memory, not re-read through L1/L2 per row
    float* xs = reinterpret_cast<float*>(xs_raw);
    stage_floats(xs, p.x, NT * p.cols);
    __syncthreads();
    x = xs;
  }
  for (; g < groups; g += gridDim.x) {
    const int64_t rows = p.rows[at.m];
    const GemvRow next = gemv_row(p, g + gridDim.x);
    uint4 nxt[k_dot_batch];
    if constexpr (VEC)
      if (g + gridDim.x < groups && next.row < p.rows[next.m])
        dot_load(static_cast<const W*>(p.w[next.m]) + next.row * p.cols, p.cols,
                 int64_t{threadIdx.x} * k_vec<W>, nxt);
    if (at.row < rows) {
      const W* wrow = static_cast<const W*>(p.w[at.m]) + at.row * p.cols;
      float acc[NT] = {};
      if constexpr (VEC)
        warp_dot_partial_pre<W, NT>(x, p.cols, wrow, p.cols, pre, acc);
      else
        warp_dot_partial<W, VEC, NT>(x, p.cols, wrow, p.cols, acc);
      const float* bias = p.bias[at.m];
      const float b = bias ? bias[at.row] : 0.f;
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        const float s = warp_sum(acc[t]);
        if (threadIdx.x == 0) {
          float* y = p.y[at.m] + t * rows + at.row;
          const float v = bias ? s + b : s;
          *y = p.accumulate[at.m] ? *y + v : v;
        }
      }
    }
    if constexpr (VEC)
#pragma unroll
      for (int b = 0; b < k_dot_batch; ++b) pre[b] = nxt[b];
    at = next;
  }
  if constexpr (ROUTE > 0) {  // the last block to finish routes every token
    __shared__ bool last;
    __syncthreads();  // every warp's logits stored before thread 0 counts the block
    if (threadIdx.x == 0 && threadIdx.y == 0)
      last = atomic_add_acq_rel(p.route_counter, 1u) == gridDim.x - 1;
    __syncthreads();  // thread 0's acquire ordered before the route's reads (past L1)
    if (!last) return;
    if constexpr (ROUTE == 2) {
      route_and_ensure<NT>(p);
    } else {
      for (int t = threadIdx.y; t < NT; t += k_gemv_rows)
        route_token(p.y[0] + t * p.rows[0], static_cast<int>(p.rows[0]), p.route_k,
                    p.route_renorm, p.route_ids + t * p.route_k, p.route_w + t * p.route_k,
                    p.route_local.begin, p.route_local.count);
    }
    if (threadIdx.x == 0 && threadIdx.y == 0) *p.route_counter = 0;  // ready for the next call
  }
}

// x = hi + lo with both parts bf16: hi = bf16(x), lo = bf16(x - hi).
__global__ void split_bf16_kernel(const float* __restrict__ x, int64_t count,
                                  __nv_bfloat16* __restrict__ hi, __nv_bfloat16* __restrict__ lo) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    const __nv_bfloat16 h = __float2bfloat16_rn(x[i]);
    hi[i] = h;
    lo[i] = __float2bfloat16_rn(x[i] - __bfloat162float(h));
  }
}

template <typename W>
__global__ void dequant_kernel(const W* __restrict__ w, int64_t count, float* __restrict__ out) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x)
    out[i] = to_f32(w[i]);
}

unsigned grid_for(int64_t count) {
  const int64_t blocks = (count + 255) / 256;
  return static_cast<unsigned>(blocks < 65535 ? blocks : 65535);
}

// ---- launchers
// FT_GEMV_WAVE=0: a block per row group, in as many waves as that takes (A/B runs).
bool one_wave() {
  static const bool on = env_on("FT_GEMV_WAVE");
  return on;
}

template <typename W, bool VEC, int NT, int ROUTE>
void launch_gemv_nt(const GemvParams& p, size_t smem) {
  auto* kernel = gemv_kernel<W, VEC, NT, ROUTE>;
  int64_t grid = p.block0[p.count];
  if (one_wave())
    grid = std::min(grid, resident_blocks(reinterpret_cast<const void*>(kernel),
                                          32 * k_gemv_rows, smem));
  launch_kernel(kernel, dim3(static_cast<unsigned>(grid)), dim3(32, k_gemv_rows), smem, p);
}

template <typename W, bool VEC, int ROUTE>
void launch_gemv(const GemvParams& p, int64_t nt) {
  const size_t smem = p.norm || p.stage ? nt * p.cols * sizeof(float) : 0;
  switch (nt) {
    case 1:
      launch_gemv_nt<W, VEC, 1, ROUTE>(p, smem);
      break;
    case 2:
      launch_gemv_nt<W, VEC, 2, ROUTE>(p, smem);
      break;
    case 3:
      launch_gemv_nt<W, VEC, 3, ROUTE>(p, smem);
      break;
    default:
      launch_gemv_nt<W, VEC, 4, ROUTE>(p, smem);
      break;
  }
  CUDA_CHECK_LAUNCH();
}

void check_matrix(const DeviceMatrix& w, const char* op) {
  FT_CHECK(w.data && w.rows > 0 && w.cols > 0, "{}: empty weight [{}, {}]", op, w.rows, w.cols);
}

// y[n, rows] (ld rows) = x[n, cols] W[r0.., cols]^T for m rows: column-major Y^T = W^T' X'.
void sgemm(cublasHandle_t h, const float* x, int64_t n, const float* w, int64_t m, int64_t cols,
           float* y, int64_t ldy) {
  const float one = 1.f, zero = 0.f;
  CUBLAS_CHECK(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(m), static_cast<int>(n),
                           static_cast<int>(cols), &one, w, static_cast<int>(cols), x,
                           static_cast<int>(cols), &zero, y, static_cast<int>(ldy)));
}

void gemm_bf16_split(Blas& blas, const float* x, int64_t n, const DeviceMatrix& w, float* y) {
  FT_CHECK(w.cols <= blas.max_cols(), "matmul: {} inputs exceed the Blas width {}", w.cols,
           blas.max_cols());
  const int64_t count = n * w.cols;
  auto* hi = reinterpret_cast<__nv_bfloat16*>(blas.split());
  auto* lo = hi + count;
  split_bf16_kernel<<<grid_for(count), 256, 0, stream()>>>(x, count, hi, lo);
  CUDA_CHECK_LAUNCH();
  auto h = static_cast<cublasHandle_t>(blas.handle());
  const float one = 1.f, zero = 0.f;
  const int m = static_cast<int>(w.rows), nn = static_cast<int>(n), k = static_cast<int>(w.cols);
  for (int part = 0; part < 2; ++part)
    CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, nn, k, &one, w.data, CUDA_R_16BF, k,
                              part == 0 ? hi : lo, CUDA_R_16BF, k, part == 0 ? &zero : &one, y,
                              CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void gemm_f16_dequant(Blas& blas, const float* x, int64_t n, const DeviceMatrix& w, float* y) {
  auto h = static_cast<cublasHandle_t>(blas.handle());
  const int64_t chunk = std::max<int64_t>(1, Blas::k_dequant_elems / w.cols);
  FT_CHECK(chunk * w.cols <= Blas::k_dequant_elems, "matmul: a row of {} exceeds the tile", w.cols);
  const auto* wh = static_cast<const f16w*>(w.data);
  for (int64_t r0 = 0; r0 < w.rows; r0 += chunk) {
    const int64_t m = std::min(chunk, w.rows - r0);
    dequant_kernel<f16w>
        <<<grid_for(m * w.cols), 256, 0, stream()>>>(wh + r0 * w.cols, m * w.cols, blas.dequant());
    CUDA_CHECK_LAUNCH();
    sgemm(h, x, n, blas.dequant(), m, w.cols, y + r0, w.rows);
  }
}
}  // namespace

void split_bf16(const float* x, int64_t count, void* hi, void* lo) {
  split_bf16_kernel<<<grid_for(count), 256, 0, stream()>>>(
      x, count, static_cast<__nv_bfloat16*>(hi), static_cast<__nv_bfloat16*>(lo));
  CUDA_CHECK_LAUNCH();
}

Blas::Blas(int64_t max_tokens, int64_t max_cols)
    : max_tokens_(max_tokens),
      max_cols_(max_cols),
      split_(2 * static_cast<size_t>(max_tokens * max_cols) * sizeof(uint16_t)),
      dequant_(k_dequant_elems * sizeof(float)) {
  FT_CHECK(max_tokens > 0 && max_cols > 0, "Blas: bad sizes");
  cublasHandle_t h = nullptr;
  CUBLAS_CHECK(cublasCreate(&h));
  // Default math: no TF32 down-conversion of f32 operands (fp32 compute is the contract).
  CUBLAS_CHECK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
  handle_ = h;
}

Blas::~Blas() {
  if (handle_) cublasDestroy(static_cast<cublasHandle_t>(handle_));
}

void gemv_multi(const float* x, int64_t n, const GemvOut* outs, int count, const GemvNorm* norm,
                const GemvRoute* route) {
  FT_CHECK(count >= 1 && count <= k_gemv_multi && n >= 0 && n <= k_gemv_max_tokens,
           "gemv_multi: {} matrices, {} tokens", count, n);
  FT_CHECK(!route || (count == 1 && route->counter && route->ids && route->weights &&
                      outs[0].w.rows <= 32 * k_route_max_per_lane && route->top_k > 0 &&
                      route->top_k <= 32 && route->top_k <= outs[0].w.rows && !outs[0].accumulate),
           "gemv_multi: routing {} rows, top-{}", outs[0].w.rows, route ? route->top_k : 0);
  if (n == 0) return;
  const DType dt = outs[0].w.dtype;
  const int64_t cols = outs[0].w.cols;
  if (dtype_is_quant(dt)) {  // quantized: the norm and the routing as their own launches
    if (norm) {
      FT_CHECK(norm->x_out, "gemv_multi: a quantized GEMV needs x_out for the norm");
      rmsnorm(x, n, cols, norm->w, norm->eps, norm->x_out);
      x = norm->x_out;
    }
    quant_gemv_multi(x, n, outs, count);
    if (route) {
      route_topk_softmax(outs[0].y, n, outs[0].w.rows, route->top_k, route->renormalize, route->ids,
                         route->weights, route->local);
      if (route->ensure) slot_cache_ensure(*route->ensure);
    }
    return;
  }
  if (norm && n * cols * static_cast<int64_t>(sizeof(float)) > k_gemv_norm_smem) {
    // Too wide to stage: a separate rmsnorm into x_out, then the plain GEMVs.
    FT_CHECK(norm->x_out, "gemv_multi: rows of {} need x_out for the norm", cols);
    rmsnorm(x, n, cols, norm->w, norm->eps, norm->x_out);
    return gemv_multi(norm->x_out, n, outs, count, nullptr, route);
  }
  GemvParams p{.x = x, .cols = cols, .count = count};
  if (norm) p.norm = norm->w, p.eps = norm->eps, p.x_out = norm->x_out;
  if (route) {
    p.route_counter = route->counter, p.route_ids = route->ids, p.route_w = route->weights;
    p.route_k = static_cast<int>(route->top_k), p.route_renorm = route->renormalize;
    p.route_local = route->local;
    if (route->ensure) {
      const SlotEnsureArgs& e = *route->ensure;
      FT_CHECK(e.ids == route->ids && e.count == n * route->top_k &&
                   e.count <= 32 * k_gemv_rows && e.slot_ids && e.fetch && e.fetch_slot &&
                   e.n_fetch && e.s.slots >= e.s.n_experts && e.s.slots < (1 << 24),
               "gemv_multi: slot bookkeeping of {} routes ({} routed)", e.count,
               n * route->top_k);
      p.route_ensure = true, p.ensure = e;
    }
    FT_CHECK(route->local.begin >= 0 && route->local.count >= 0 &&
                 route->local.begin + route->local.count <= outs[0].w.rows,
             "gemv_multi: local experts {}+{} of {}", route->local.begin, route->local.count,
             outs[0].w.rows);
  }
  p.block0[0] = 0;
  for (int m = 0; m < count; ++m) {
    const GemvOut& o = outs[m];
    check_matrix(o.w, "gemv");
    FT_CHECK(o.w.cols == p.cols && o.w.dtype == dt && o.y, "gemv_multi: matrix {} differs", m);
    p.w[m] = o.w.data, p.y[m] = o.y, p.bias[m] = o.bias, p.rows[m] = o.w.rows;
    p.accumulate[m] = o.accumulate;
    p.block0[m + 1] = p.block0[m] + (o.w.rows + k_gemv_rows - 1) / k_gemv_rows;
  }
  dispatch_weight_type(dt, [&](auto tag) {
    using W = typename decltype(tag)::type;
    bool vec = norm || reinterpret_cast<uintptr_t>(x) % 16 == 0;
    for (int m = 0; m < count; ++m) vec = vec && vec_ok<W>(outs[m].w.data, p.cols);
    p.stage = vec && !norm && n * p.cols * static_cast<int64_t>(sizeof(float)) <= k_gemv_norm_smem;
    if (vec && p.route_ensure)
      launch_gemv<W, true, 2>(p, n);
    else if (vec && route)
      launch_gemv<W, true, 1>(p, n);
    else if (vec)
      launch_gemv<W, true, 0>(p, n);
    else if (p.route_ensure)
      launch_gemv<W, false, 2>(p, n);
    else if (route)
      launch_gemv<W, false, 1>(p, n);
    else
      launch_gemv<W, false, 0>(p, n);
  });
}

void gemv(const float* x, int64_t n, const DeviceMatrix& w, float* y, const float* bias) {
  check_matrix(w, "gemv");
  for (int64_t t0 = 0; t0 < n; t0 += k_gemv_max_tokens) {
    const GemvOut o{.w = w, .y = y + t0 * w.rows, .bias = bias};
    gemv_multi(x + t0 * w.cols, std::min(k_gemv_max_tokens, n - t0), &o, 1);
  }
}

void matmul(Blas& blas, const float* x, int64_t n, const DeviceMatrix& w, float* y,
            const float* bias) {
  check_matrix(w, "matmul");
  FT_CHECK(n >= 0 && n <= blas.max_tokens(), "matmul: {} rows exceed the Blas capacity {}", n,
           blas.max_tokens());
  if (n == 0) return;
  if (n <= k_gemv_max_tokens) return gemv(x, n, w, y, bias);
  CUBLAS_CHECK(cublasSetStream(static_cast<cublasHandle_t>(blas.handle()), stream()));
  switch (w.dtype) {
    case DType::F32:
      sgemm(static_cast<cublasHandle_t>(blas.handle()), x, n, static_cast<const float*>(w.data),
            w.rows, w.cols, y, w.rows);
      break;
    case DType::BF16:
      gemm_bf16_split(blas, x, n, w, y);
      break;
    case DType::F16:
      gemm_f16_dequant(blas, x, n, w, y);
      break;
    default:
      if (dtype_is_quant(w.dtype)) {
        quant_gemm(blas, x, n, w, y);
        break;
      }
      FT_CHECK(false, "matmul: unsupported weight dtype {}", dtype_name(w.dtype));
  }
  if (bias) add_bias(y, n, w.rows, bias);
}

}  // namespace ft::cuda
