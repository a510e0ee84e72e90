// Shared CUDA helpers: CUDA_CHECK with file:line, launch checking, warp/block reductions,
// weight-element loads (f32 / f16 / bf16 -> f32) and the warp dot product GEMVs are built on.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "base/error.h"
#include "base/tensor.h"

#define CUDA_CHECK(expr)                                                            \
  do {                                                                              \
    cudaError_t err_ = (expr);                                                      \
    if (err_ != cudaSuccess) {                                                      \
      std::fprintf(stderr, "%s:%d: CUDA error %s: %s\n", __FILE__, __LINE__, #expr, \
                   cudaGetErrorString(err_));                                       \
      std::abort();                                                                 \
    }                                                                               \
  } while (0)

// After a launch: reports a bad configuration at the launch site.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

namespace ft::cuda {

// The stream this thread's ops launch on (stream.cu): the legacy default stream unless a
// StreamScope (cuda_ops.h) names another.
cudaStream_t stream();

// Programmatic dependent launch (PDL). A kernel launched through launch_kernel() may start while
// the previous kernel on the stream still runs: before pdl_wait() it may only read immutable data
// (weights); pdl_wait() returns once the previous grid has completed and flushed its memory.
// Every such kernel calls pdl_wait() in every thread before touching activations, caches or
// outputs (so completion stays transitive along the stream), then pdl_trigger() to let the
// next kernel's blocks launch. Both are no-ops for a plain launch.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Last-block election without __threadfence (fence.sc.gpu, which waits out every outstanding
// access): after a bar.sync (or bar.warp.sync) orders the block's (warp's) stores before this
// thread, a release-acquire add at GPU scope publishes them with the count and, for the block
// that draws the last ticket, acquires every earlier block's (a bar.sync after it passes that
// on to the block's other threads). The counting pattern of CUTLASS's generic barrier.
__device__ __forceinline__ uint32_t atomic_add_acq_rel(uint32_t* p, uint32_t v) {
  uint32_t old;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;"
               : "=r"(old)
               : "l"(p), "r"(v)
               : "memory");
  return old;
}

// True when launches on the current stream may use PDL: a non-default stream, a device of
// compute capability >= 9, and FT_CUDA_PDL not "0" (stream.cu).
bool pdl_enabled();

// Blocks of `kernel` (`threads` per block, `smem` dynamic shared bytes) resident on the current
// device at once: its occupancy per SM (at least 1) x the SMs, remembered per (device, kernel,
// threads, smem) (device.cu). One-wave grids size themselves by it.
int64_t resident_blocks(const void* kernel, int threads, size_t smem);

// The dynamic shared memory one block of `kernel` may opt into on the current device: the
// device's per-block opt-in limit (227 KiB on sm_90, 163 on sm_80, 99 on sm_86 / 89 / 120)
// less the kernel's static shared memory. FT_CUDA_SMEM_LIMIT=bytes or set_smem_limit
// (cuda_ops.h) lowers the device limit, so a large GPU runs the paths a consumer GPU takes.
// Launchers whose tiles may not fit pick smaller ones or another kernel by it instead of
// failing the opt-in (smem_fits).
size_t max_dynamic_smem(const void* kernel);
template <class Kernel>
bool smem_fits(Kernel kernel, size_t bytes) {
  return bytes <= max_dynamic_smem(reinterpret_cast<const void*>(kernel));
}

// kernel<<<grid, block, smem, stream()>>>(args...) with PDL when pdl_enabled(); checks the launch.
template <typename... KArgs, typename... Args>
void launch_kernel(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream();
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl_enabled() ? 1 : 0;
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

// An attribute of the current device (multiprocessors, shared memory limits, ...).
inline int device_attribute(cudaDeviceAttr a) {
  int dev = 0, v = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&v, a, dev));
  return v;
}
inline int sm_count() { return device_attribute(cudaDevAttrMultiProcessorCount); }

// Raises kernel's dynamic shared memory limit to bytes once per device (opted: one bit per
// device, a static of the caller's kernel instantiation).
template <class Kernel>
void opt_in_smem(Kernel kernel, int bytes, std::atomic<uint64_t>& opted) {
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  const uint64_t bit = uint64_t{1} << (dev & 63);
  if (opted.load() & bit) return;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  opted.fetch_or(bit);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread gets the result.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float partial[32];
  v = warp_sum(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < (blockDim.x >> 5) ? partial[lane] : 0.f;
  v = warp_sum(v);
  __syncthreads();
  return v;
}

// Weight element types as the kernels see them: bf16 and f16 share storage, not meaning.
struct bf16w {
  uint16_t bits;
};
struct f16w {
  uint16_t bits;
};

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(bf16w v) { return __uint_as_float(uint32_t{v.bits} << 16); }
__device__ __forceinline__ float to_f32(f16w v) { return __half2float(__ushort_as_half(v.bits)); }

// Largest activation block a GEMV stages in shared memory (default dynamic limit).
constexpr size_t k_stage_smem = 48 * 1024;

// Copies count floats (16-byte aligned at both ends, count % 4 == 0) into shared memory with the
// whole block; the caller synchronises.
__device__ __forceinline__ void stage_floats(float* dst, const float* src, int64_t count) {
  const int tid = threadIdx.y * blockDim.x + threadIdx.x, nt = blockDim.x * blockDim.y;
  for (int64_t i = int64_t{tid} * 4; i < count; i += int64_t{nt} * 4)
    *reinterpret_cast<float4*>(dst + i) = *reinterpret_cast<const float4*>(src + i);
}

// Elements per 16-byte vector of W.
template <typename W>
constexpr int k_vec = 16 / sizeof(W);

// Loads k_vec<W> consecutive weights (16-byte aligned) as f32.
__device__ __forceinline__ void load_vec(const float* p, float* out) {
  const float4 v = *reinterpret_cast<const float4*>(p);
  out[0] = v.x, out[1] = v.y, out[2] = v.z, out[3] = v.w;
}
__device__ __forceinline__ void load_vec(const bf16w* p, float* out) {
  const uint4 v = *reinterpret_cast<const uint4*>(p);
  const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    out[2 * i] = __uint_as_float(u[i] << 16);
    out[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
  }
}
__device__ __forceinline__ void load_vec(const f16w* p, float* out) {
  const uint4 v = *reinterpret_cast<const uint4*>(p);
  const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&u[i]));
    out[2 * i] = f.x, out[2 * i + 1] = f.y;
  }
}

// A 16-byte vector of W as f32 (the register form of load_vec).
__device__ __forceinline__ void unpack_vec(const uint4& v, float* out, const float*) {
  out[0] = __uint_as_float(v.x), out[1] = __uint_as_float(v.y);
  out[2] = __uint_as_float(v.z), out[3] = __uint_as_float(v.w);
}
__device__ __forceinline__ void unpack_vec(const uint4& v, float* out, const bf16w*) {
  const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    out[2 * i] = __uint_as_float(u[i] << 16);
    out[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
  }
}
__device__ __forceinline__ void unpack_vec(const uint4& v, float* out, const f16w*) {
  const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&u[i]));
    out[2 * i] = f.x, out[2 * i + 1] = f.y;
  }
}

// cp.async (sm_80+): 16 bytes global -> shared (dst a shared-window address), bypassing L1.
// With n: only the first n bytes are read, the rest zero-filled (n = 0: no global read).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int n) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n)
               : "memory");
}
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}
// cp_async16 with an L2 cache policy (l2_evict_first_policy).
__device__ __forceinline__ void cp_async16_hint(uint32_t dst, const void* src, int n,
                                                uint64_t policy) {
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(dst),
               "l"(src), "r"(n), "l"(policy)
               : "memory");
}
// A policy that marks the lines a load brings into L2 first to be evicted.
__device__ __forceinline__ uint64_t l2_evict_first_policy() {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's commit groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// A 16-byte weight load that bypasses L1 (weights stream through once; L1 keeps activations).
__device__ __forceinline__ uint4 ldg_stream(const void* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

// Weight vectors a lane loads before using any of them (memory-level parallelism: GEMV rows
// are short, so one warp must keep several 16-byte loads in flight to reach HBM bandwidth).
constexpr int k_dot_batch = 8;

// One lane's batch of weight vectors of a row: raw[b] = w[i0 + b*32*V ..] for those < cols.
template <typename W>
__device__ __forceinline__ void dot_load(const W* __restrict__ w, int64_t cols, int64_t i0,
                                         uint4 (&raw)[k_dot_batch]) {
  constexpr int V = k_vec<W>;
#pragma unroll
  for (int b = 0; b < k_dot_batch; ++b) {
    const int64_t i = i0 + int64_t{b} * 32 * V;
    if (i < cols) raw[b] = ldg_stream(w + i);
  }
}

// acc[t] += the batch loaded by dot_load at i0, dotted with x + t*ldx.
template <typename W, int NT>
__device__ __forceinline__ void dot_use(const float* __restrict__ x, int64_t ldx, int64_t cols,
                                        int64_t i0, const uint4 (&raw)[k_dot_batch],
                                        float (&acc)[NT]) {
  constexpr int V = k_vec<W>;
#pragma unroll
  for (int b = 0; b < k_dot_batch; ++b) {
    const int64_t i = i0 + int64_t{b} * 32 * V;
    if (i >= cols) break;
    float wv[V];
    unpack_vec(raw[b], wv, static_cast<const W*>(nullptr));
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const float* xt = x + t * ldx + i;
#pragma unroll
      for (int j = 0; j < V; j += 4) {
        const float4 xv = *reinterpret_cast<const float4*>(xt + j);
        acc[t] += xv.x * wv[j] + xv.y * wv[j + 1] + xv.z * wv[j + 2] + xv.w * wv[j + 3];
      }
    }
  }
}

// acc[t] += dot(x + t*ldx, w) over cols for NT activation rows, partial per lane (the caller
// reduces with warp_sum). VEC: cols is a multiple of k_vec<W> and rows are 16-byte aligned.
template <typename W, bool VEC, int NT>
__device__ __forceinline__ void warp_dot_partial(const float* __restrict__ x, int64_t ldx,
                                                 const W* __restrict__ w, int64_t cols,
                                                 float (&acc)[NT]) {
  const int lane = threadIdx.x & 31;
  if constexpr (VEC) {
    constexpr int V = k_vec<W>, B = k_dot_batch;
    for (int64_t i0 = int64_t{lane} * V; i0 < cols; i0 += 32 * V * B) {
      uint4 raw[B];
      dot_load(w, cols, i0, raw);
      dot_use<W, NT>(x, ldx, cols, i0, raw, acc);
    }
  } else {
    for (int64_t i = lane; i < cols; i += 32) {
      const float wi = to_f32(w[i]);
#pragma unroll
      for (int t = 0; t < NT; ++t) acc[t] += x[t * ldx + i] * wi;
    }
  }
}

// warp_dot_partial (VEC layout) whose first batch, pre, was loaded by
// dot_load(w, cols, lane * V, pre) beforehand (e.g. before pdl_wait()).
template <typename W, int NT>
__device__ __forceinline__ void warp_dot_partial_pre(const float* __restrict__ x, int64_t ldx,
                                                     const W* __restrict__ w, int64_t cols,
                                                     const uint4 (&pre)[k_dot_batch],
                                                     float (&acc)[NT]) {
  constexpr int V = k_vec<W>, B = k_dot_batch;
  const int64_t first = int64_t{threadIdx.x & 31} * V;
  if (first < cols) dot_use<W, NT>(x, ldx, cols, first, pre, acc);
  for (int64_t i0 = first + 32 * V * B; i0 < cols; i0 += 32 * V * B) {
    uint4 raw[B];
    dot_load(w, cols, i0, raw);
    dot_use<W, NT>(x, ldx, cols, i0, raw, acc);
  }
}

// One lane's batch of R rows' weight vectors (B per row, 16 / R by default) at i0, i0 + 32V,
// ...; a null w[r] is skipped.
template <typename W, int R, int B = 16 / R>
__device__ __forceinline__ void rows_load(const W* const (&w)[R], int64_t cols, int64_t i0,
                                          uint4 (&raw)[R][B]) {
  constexpr int V = k_vec<W>;
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int b = 0; b < B; ++b) {
      const int64_t i = i0 + int64_t{b} * 32 * V;
      if (w[r] && i < cols) raw[r][b] = ldg_stream(w[r] + i);
    }
}

// acc[r] += the batch loaded by rows_load at i0, dotted with x[r].
template <typename W, int R, int B = 16 / R>
__device__ __forceinline__ void rows_use(const float* const (&x)[R], const W* const (&w)[R],
                                         int64_t cols, int64_t i0, const uint4 (&raw)[R][B],
                                         float (&acc)[R]) {
  constexpr int V = k_vec<W>;
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int b = 0; b < B; ++b) {
      const int64_t i = i0 + int64_t{b} * 32 * V;
      if (!w[r] || i >= cols) continue;
      float wv[V];
      unpack_vec(raw[r][b], wv, w[r]);
#pragma unroll
      for (int j = 0; j < V; j += 4) {
        const float4 xv = *reinterpret_cast<const float4*>(x[r] + i + j);
        acc[r] += xv.x * wv[j] + xv.y * wv[j + 1] + xv.z * wv[j + 2] + xv.w * wv[j + 3];
      }
    }
}

// acc[r] += dot(x[r], w[r]) over cols for R (x, w) row pairs at once (partial per lane), with
// 16 / R vectors of every row loaded before use; a null w[r] is skipped. VEC layout only.
// pre: the first batch, loaded by rows_load(w, cols, lane * V, pre) beforehand.
template <typename W, int R>
__device__ __forceinline__ void warp_dot_rows_pre(const float* const (&x)[R],
                                                  const W* const (&w)[R], int64_t cols,
                                                  const uint4 (&pre)[R][16 / R], float (&acc)[R]) {
  constexpr int V = k_vec<W>, B = 16 / R;
  const int64_t first = int64_t{threadIdx.x & 31} * V;
  if (first < cols) rows_use<W, R>(x, w, cols, first, pre, acc);
  for (int64_t i0 = first + 32 * V * B; i0 < cols; i0 += 32 * V * B) {
    uint4 raw[R][B];
    rows_load<W, R>(w, cols, i0, raw);
    rows_use<W, R>(x, w, cols, i0, raw, acc);
  }
}

template <typename W, int R>
__device__ __forceinline__ void warp_dot_rows(const float* const (&x)[R], const W* const (&w)[R],
                                              int64_t cols, float (&acc)[R]) {
  constexpr int V = k_vec<W>, B = 16 / R;
  for (int64_t i0 = int64_t{threadIdx.x & 31} * V; i0 < cols; i0 += 32 * V * B) {
    uint4 raw[R][B];
    rows_load<W, R>(w, cols, i0, raw);
    rows_use<W, R>(x, w, cols, i0, raw, acc);
  }
}

template <typename W>
struct TypeTag {
  using type = W;
};

// Calls fn(TypeTag<W>{}) with the kernel element type W of a weight dtype.
template <typename Fn>
void dispatch_weight_type(DType dt, Fn&& fn) {
  switch (dt) {
    case DType::F32:
      fn(TypeTag<float>{});
      break;
    case DType::BF16:
      fn(TypeTag<bf16w>{});
      break;
    case DType::F16:
      fn(TypeTag<f16w>{});
      break;
    default:
      FT_CHECK(false, "unsupported weight dtype {} (F32, F16 or BF16)", dtype_name(dt));
  }
}

// True when a 16-byte vector path can read rows of `cols` elements of W from `p`.
template <typename W>
bool vec_ok(const void* p, int64_t cols) {
  return cols % k_vec<W> == 0 && reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

}  // namespace ft::cuda
