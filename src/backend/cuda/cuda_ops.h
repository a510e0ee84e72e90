// CUDA backend entry points: the same ops as ops/ops.h, on device pointers (f32 activations,
// row-major [n, dim]). Declared here without CUDA headers so host code can call them. Every op
// runs on this thread's current stream (the legacy default stream unless a StreamScope names
// one); launchers validate arguments (FT_CHECK), kernels trust.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/tensor.h"

namespace ft::cuda {

// Number of usable CUDA devices (0 when there is no driver or GPU).
int device_count();
// "NVIDIA H200, 139.8 GiB, sm_90" for device 0, or a reason when unavailable.
std::string device_summary();
// The current device's L2 cache in bytes (50 MiB on an H100 / H200, 72 on an RTX 4090, 6 on an
// RTX 3090): the decode L2 prefetches size themselves by it.
size_t l2_cache_bytes();

// ---- memory (memory.cu)

// Owning cudaMalloc'd bytes; movable, freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t bytes() const { return bytes_; }
  // Copies host bytes in at a byte offset (synchronous).
  void upload(const void* src, size_t bytes, size_t offset = 0);

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Copies on the current stream. The synchronous ones wait for it (and so for every op issued
// before them); the _async ones need page-locked host memory to overlap.
void copy_to_device(void* dst, const void* src, size_t bytes);
void copy_to_host(void* dst, const void* src, size_t bytes);
void copy_to_device_async(void* dst, const void* src, size_t bytes);
void copy_to_host_async(void* dst, const void* src, size_t bytes);
void copy_on_device(void* dst, const void* src, size_t bytes);
// height rows of width bytes from src (rows spitch bytes apart) to dst (dpitch apart), on the
// default stream (graph-capturable).
void copy_2d_on_device(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                       size_t height);
void memset_async(void* dst, int value, size_t bytes);
void stream_synchronize();  // waits for the current stream
void synchronize();  // waits for the device; reports any asynchronous error with file:line

// ---- streams and graphs (stream.cu)

// A created stream, ordered with the legacy default stream (blocking flavour), so work there
// and here does not race. Ops issue to it inside a StreamScope.
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  void* handle() const { return handle_; }  // cudaStream_t
  void synchronize();

 private:
  void* handle_ = nullptr;
};

// Makes `s` this thread's current stream until the scope ends (then the previous one).
class StreamScope {
 public:
  explicit StreamScope(const Stream& s);
  ~StreamScope();
  StreamScope(const StreamScope&) = delete;
  StreamScope& operator=(const StreamScope&) = delete;

 private:
  void* prev_;
};

// A CUDA graph captured from the ops issued on the current stream (a Stream in scope) between
// capture_begin and capture_end, then replayed by launch on the current stream. Captured ops
// read their inputs from device memory at replay (pointers are baked in, values are not).
class Graph {
 public:
  Graph() = default;
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  bool ready() const { return exec_ != nullptr; }
  void capture_begin();
  void capture_end();
  void launch();

 private:
  void* exec_ = nullptr;  // cudaGraphExec_t
};

// ---- streams, events, page-locked host memory (stream.cu)

// A completion marker (timing disabled). Recorded on one stream, waited on by another.
class Event {
 public:
  Event();
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void* handle() const { return handle_; }  // cudaEvent_t

 private:
  void* handle_ = nullptr;
};

// A non-blocking stream for host -> device expert copies, running beside the legacy default
// stream the ops use; ordering between the two is only through events.
class CopyStream {
 public:
  CopyStream();
  ~CopyStream();
  CopyStream(const CopyStream&) = delete;
  CopyStream& operator=(const CopyStream&) = delete;
  // Asynchronous; a host src must be page-locked (PinnedBuffer) for the copy to overlap
  // compute; src may also be device memory (a copy within the GPU).
  void copy_to_device(void* dst, const void* src, size_t bytes);
  void record(Event& e);      // e completes when the copies issued so far have
  void wait(const Event& e);  // later copies start after e
  void synchronize();

 private:
  void* handle_ = nullptr;  // cudaStream_t
};

// The default (compute) stream's side of the event handshake.
void record_on_default(Event& e);
void wait_on_default(const Event& e);

// Owning page-locked host memory (cudaHostAlloc, portable and mapped: kernels may read it over
// PCIe through device_data()); movable.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(size_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& o) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  void* data() const { return data_; }
  void* device_data() const;  // the same bytes as a device pointer (zero-copy reads)
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Free and total bytes of device 0 (cudaMemGetInfo).
void memory_info(size_t* free_bytes, size_t* total_bytes);

// ---- step timing (timing.cu): the sampled per-step time split (model/step_split.h)

// A timing event: record() marks the current stream; seconds_since(start) waits for this
// event and returns the GPU time between the two marks.
class TimingEvent {
 public:
  TimingEvent();
  ~TimingEvent();
  TimingEvent(const TimingEvent&) = delete;
  TimingEvent& operator=(const TimingEvent&) = delete;
  void record();
  double seconds_since(const TimingEvent& start) const;

 private:
  void* handle_ = nullptr;  // cudaEvent_t
};

// ---- weights

// A weight matrix in VRAM: [rows, cols] row-major, F32, F16, BF16 or block-quantized (rows of
// whole blocks, dtype_row_bytes; see the quantized weights section).
struct DeviceMatrix {
  const void* data = nullptr;
  DType dtype = DType::F32;
  int64_t rows = 0, cols = 0;
  const float* scale_inv = nullptr;  // F8_E4M3_B128: device [ceil(rows/128), ceil(cols/128)]
  float global_scale = 1.f;          // NVFP4: the per-tensor scale
};

// Weights a decode kernel moves into L2 for later launches while it leaves HBM idle (its blocks
// share the ranges; sm_90 bulk prefetch, nothing on older GPUs): the attention kernel
// prefetches the O projection and the router. Only a hint: the readers load the weights either
// way (l2_prefetch.cuh).
struct L2Prefetch {
  static constexpr int k_ranges = 3;
  const void* p[k_ranges] = {};
  int64_t bytes[k_ranges] = {};
  // Appends w's bytes (nothing when w is null or every range is taken).
  void add(const DeviceMatrix& w) {
    for (int i = 0; w.data && i < k_ranges; ++i)
      if (!p[i]) {
        p[i] = w.data;
        bytes[i] = w.rows * static_cast<int64_t>(dtype_row_bytes(w.dtype, w.cols));
        return;
      }
  }
};

// One MoE layer's experts stacked in VRAM: gate/up [n_experts, inter, hidden], down
// [n_experts, hidden, inter], all one dtype (block-quantized: each matrix is rows of whole
// blocks, an expert's matrix inter * row bytes; formats without external scales).
struct DeviceExperts {
  const void* gate = nullptr;
  const void* up = nullptr;
  const void* down = nullptr;
  DType dtype = DType::BF16;
  int64_t n_experts = 0, hidden = 0, inter = 0;
  // Mixed formats (h6f, issue #6). types: gate/up/down's own dtypes where they differ from
  // dtype (a Q4_K_M file's Q6_K down; a layer's three matrices may all differ). Each expert's
  // matrix is an ExpertRecord (FP8 / NVFP4 records carry their scales). stride: bytes from one
  // expert's record to the next (0: the record size); a slot pool sized for the largest layer
  // is read with its slot stride. host_gscale: NVFP4 matrices' per-expert global scales on the
  // host, [n_experts] (the prefill GEMMs take them by value; decode reads the records).
  std::optional<DType> types[3];
  size_t stride[3] = {0, 0, 0};
  const float* host_gscale[3] = {nullptr, nullptr, nullptr};

  DType type(int m) const { return types[m].value_or(dtype); }
  const void* matrix(int m) const { return m == 0 ? gate : m == 1 ? up : down; }
  int64_t rows(int m) const { return m == 2 ? hidden : inter; }
  int64_t cols(int m) const { return m == 2 ? inter : hidden; }
  size_t expert_stride(int m) const;
  // One dtype without external scales and natural strides: moe_experts' fused decode paths.
  bool uniform() const;
};

// One expert's matrix as expert stacks store it (h6f): rows * dtype_row_bytes(cols) bytes, then
// for F8_E4M3_B128 its f32 scale_inv tiles [ceil(rows/128), ceil(cols/128)], for NVFP4 its f32
// global scale, at scale_offset (16-byte aligned); bytes: from this record to the next. Formats
// without external scales: bytes = data (the plain stacked layout).
struct ExpertRecord {
  size_t data, scale_offset, bytes;
};
inline ExpertRecord expert_record(DType t, int64_t rows, int64_t cols) {
  const size_t data = static_cast<size_t>(rows) * dtype_row_bytes(t, cols);
  const size_t at = (data + 15) / 16 * 16;
  if (t == DType::F8_E4M3_B128) {
    const size_t tiles = static_cast<size_t>((rows + 127) / 128) * static_cast<size_t>((cols + 127) / 128);
    return {data, at, (at + tiles * sizeof(float) + 15) / 16 * 16};
  }
  if (t == DType::NVFP4) return {data, at, at + 16};
  return {data, data, data};
}
inline size_t DeviceExperts::expert_stride(int m) const {
  return stride[m] ? stride[m] : expert_record(type(m), rows(m), cols(m)).bytes;
}
inline bool DeviceExperts::uniform() const {
  if (dtype == DType::F8_E4M3_B128 || dtype == DType::NVFP4) return false;
  for (int m = 0; m < 3; ++m)
    if (type(m) != dtype || expert_stride(m) != expert_record(dtype, rows(m), cols(m)).bytes)
      return false;
  return true;
}

// ---- elementwise and norms

// out[i, :] = table row ids[i] as f32. ids: device [n], each in [0, table.rows) (not checked).
void embed(const DeviceMatrix& table, const int32_t* ids, int64_t n, float* out);
// y[i] = rmsnorm(x[i]) * w for n rows of width dim (y may alias x). Per-head norms are rows
// of head_dim: n_tokens * n_heads rows.
void rmsnorm(const float* x, int64_t n, int64_t dim, const float* w, float eps, float* y);
// out[r] = the index of row r's largest value (x: device [rows, cols]; out: device [rows]), as
// the host's argmax: lowest index on ties, NaN never chosen unless first (then 0).
void argmax_rows(const float* x, int64_t rows, int64_t cols, int32_t* out);
// y = silu(g) * u over count elements (y may alias g).
void silu_mul(const float* g, const float* u, int64_t count, float* y);
// x += y over count elements (residual add).
void add_inplace(float* x, const float* y, int64_t count);
// y[t, r] += bias[r] for n rows of width rows.
void add_bias(float* y, int64_t n, int64_t rows, const float* bias);
// x = clamp(x, -limit, limit) over count elements.
void clamp(float* x, int64_t count, float limit);

// Rotary embedding in place on x [n, n_heads, head_dim] for positions pos0..pos0+n-1, on the
// first rot_dim dims of each head; NeoX halves or interleaved pairs. cos/sin: device tables
// [>= pos0+n, rot_dim/2] (attention factor already applied).
struct RopeArgs {
  float* x;
  int64_t n, n_heads, head_dim, rot_dim, pos0;
  bool interleaved;
  const float* cos;
  const float* sin;
};
void rope(const RopeArgs& a);

// After the q/k/v projections of n tokens (qk_rope.cu): per-head rmsnorm of q and k (when
// q_norm/k_norm are set), rotary embedding at each token's position, then k and v stored
// into the caches at [seq[t] * seq_stride + pos[t] * kv_dim]. pos/seq: device [n]. One launch
// for what is otherwise 6 ops.
struct QkRopeArgs {
  float* q;        // [n, n_heads * head_dim]
  float* k;        // [n, n_kv_heads * head_dim]
  const float* v;  // [n, n_kv_heads * head_dim]
  int64_t n, n_heads, n_kv_heads, head_dim, rot_dim;
  bool interleaved;
  const float* cos;
  const float* sin;
  const float* q_norm;  // [head_dim] or nullptr
  const float* k_norm;
  float eps;
  const int32_t* pos;
  const int32_t* seq;
  int64_t seq_stride;  // elements per sequence in the caches
  void* k_cache;       // kv_dtype elements (F32 or BF16, rounded to nearest even)
  void* v_cache;
  DType kv_dtype = DType::F32;
};
void qk_rope_store(const QkRopeArgs& a);

// ---- matmul (matmul.cu: GEMV for n <= k_gemv_max_tokens, cuBLAS GEMM above)

constexpr int64_t k_gemv_max_tokens = 4;

// cuBLAS handle plus the scratch the GEMM path needs, allocated once for up to max_tokens rows
// of up to max_cols inputs. Fp32 compute on every path: f32 weights use SGEMM; bf16 weights
// use two bf16 GEMMs with fp32 accumulation over x = hi + lo (x split into two bf16 parts,
// relative error ~2^-17, below fp32 reordering noise); f16 weights are dequantised to f32 in
// tiles for SGEMM. Not thread-safe: one per stream of work.
class Blas {
 public:
  Blas(int64_t max_tokens, int64_t max_cols);
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;

  int64_t max_tokens() const { return max_tokens_; }
  int64_t max_cols() const { return max_cols_; }
  void* handle() const { return handle_; }
  uint16_t* split() const { return split_.as<uint16_t>(); }  // [2, max_tokens, max_cols] bf16
  float* dequant() const { return dequant_.as<float>(); }    // [k_dequant_elems] f32
  static constexpr int64_t k_dequant_elems = int64_t{1} << 22;

 private:
  int64_t max_tokens_, max_cols_;
  void* handle_ = nullptr;  // cublasHandle_t
  DeviceBuffer split_, dequant_;
};

// y[n, w.rows] = x[n, w.cols] W^T (+ bias[w.rows]).
void matmul(Blas& blas, const float* x, int64_t n, const DeviceMatrix& w, float* y,
            const float* bias = nullptr);
// The GEMV kernel alone (any n; used by matmul for small n and by tests).
void gemv(const float* x, int64_t n, const DeviceMatrix& w, float* y, const float* bias = nullptr);

// Up to k_gemv_multi GEMVs of the same input in one launch (e.g. q, k, v): out[i].y[n,
// w.rows] = x W_i^T (+ bias), or += that when accumulate (a fused residual add; y must not
// alias x). n <= k_gemv_max_tokens; every matrix has x's width and one dtype.
struct GemvOut {
  DeviceMatrix w;
  float* y = nullptr;
  const float* bias = nullptr;
  bool accumulate = false;
};
constexpr int k_gemv_multi = 4;
// With norm: x is first rmsnorm'ed (y = x / rms(x) * w) inside the launch (each block stages
// the normalised rows in shared memory); x_out [n, cols] also receives them (optional).
struct GemvNorm {
  const float* w;
  float eps;
  float* x_out = nullptr;
};
// Tensor-parallel whole-expert shards: routed ids in [begin, begin + count) are written as
// id - begin (the shard's own experts), the others as -1 (the experts layer and the slot cache
// skip them); the weights stay the full top-k's. count 0: ids unchanged.
struct RouteLocal {
  int32_t begin = 0, count = 0;
};
struct SlotEnsureArgs;
// With route (one matrix: the MoE router): the last block to finish also runs
// route_topk_softmax on y, saving a launch. counter: a device uint32 that is zero before the
// call and is left zero. ensure (optional): the slot cache's bookkeeping for the routed ids
// (slot_cache_ensure of ensure->ids == ids, n * top_k of them), run by that same block.
struct GemvRoute {
  int64_t top_k;
  bool renormalize;
  int32_t* ids;
  float* weights;
  uint32_t* counter;
  RouteLocal local = {};
  const SlotEnsureArgs* ensure = nullptr;
};
void gemv_multi(const float* x, int64_t n, const GemvOut* outs, int count,
                const GemvNorm* norm = nullptr, const GemvRoute* route = nullptr);

// ---- quantized weights (quant_gemv.cu, quant_gemm.cu; issue #6)
// matmul / gemv / gemv_multi / moe_experts dispatch here for block-quantized dtypes (Q4_0 ...
// IQ4_XS, MXFP4, NVFP4, F8_E4M3_B128): rows of cols % 16 == 0 whole blocks, f32 activations
// (16-byte aligned) and accumulation. gemv_multi applies a GemvNorm / GemvRoute around the
// quantized GEMV (separate rmsnorm / route launches) instead of fusing them.

// y = x W^T for n <= k_gemv_max_tokens tokens, dequant fused (one template over the format
// traits). Same contract as gemv_multi without norm/route. Formats with integer codes (all but
// FP8) quantize the activations to int8 per 16 elements (scale max|x| / 127, as the CPU quant
// matmul) and take __dp4a dot products (quant_gemv_q8.cu); FP8 rounds them to f16 per
// 128-column block (a power-of-two scale: relative error <= 2^-11) for tensor-core dots
// (quant_gemv_fp8.cu).
void quant_gemv_multi(const float* x, int64_t n, const GemvOut* outs, int count);
// false: every quantized GEMV takes the f32-activation kernel (the reference path, FP8 included;
// tests and A/B benches). Default on unless FT_CUDA_QGEMV=f32.
void set_quant_gemv_int8(bool on);
// Decode experts: for every slot s < slots, y[m] + s * y_slot = (x + (s / x_div) * x_slot)
// W_m[ids[s]]^T for count (1 or 2) stacked matrices w[m] [E, rows, cols]; ids (device) < 0
// writes zeros. Formats without per-expert scales (not NVFP4 / FP8).
struct QuantExpertGemv {
  const float* x;
  int64_t x_slot;
  int x_div;
  const int32_t* ids;
  int64_t slots;
  const void* w[2];
  float* y[2];
  int count;
  DType dtype;
  int64_t rows, cols, y_slot;
  size_t expert_stride = 0;  // bytes from one expert to the next (0: rows * row bytes; h6f)
  const float* x_up = nullptr;  // non-null: the input is silu(x) * x_up (x_up laid out as x)
  // fp8_experts_gemv only: the scale tiles' offset in each expert's record (ExpertRecord).
  // ids_early: the ids were final before the previous kernel on the stream started (e.g. down
  // after gate+up: every PDL kernel waits for its predecessor before it lets the next one
  // start), so the kernel reads them and starts its weight loads before its PDL wait (the FP8
  // kernel and the one-token streaming kernel; the others read them after it).
  size_t scale_offset = 0;
  bool ids_early = false;
};
void quant_experts_gemv(const QuantExpertGemv& a);
// The same for FP8 128x128 records (rows, then scale_inv at scale_offset; dtype
// F8_E4M3_B128, count 1 or 2 of one shape and stride) on the tensor-core FP8 GEMV
// (quant_gemv_fp8.cu); false (nothing launched) when the shape or alignment does not suit it or
// the f32 reference kernels are selected (set_quant_gemv_int8): the caller runs its own.
bool fp8_experts_gemv(const QuantExpertGemv& a);
// Prefill GEMM on tensor cores: panels of W dequantized to bf16 hi + lo parts in the Blas
// scratch, x split likewise, three cuBLAS bf16 GEMMs (fp32 accumulation, ~2^-16 relative).
void quant_gemm(Blas& blas, const float* x, int64_t n, const DeviceMatrix& w, float* y);
// Rows [r0, r0 + m) of a quantized w as f32 [m, w.cols] (external scales applied).
void quant_dequant_rows(const DeviceMatrix& w, int64_t r0, int64_t m, float* out);
// x = hi + lo as two bf16 arrays of count elements (matmul.cu; the split of the bf16 GEMMs).
void split_bf16(const float* x, int64_t count, void* hi, void* lo);

// ---- MoE (route.cu, moe.cu)

// Per token (one warp each): softmax over logits [n, n_experts], the top_k largest (ties:
// lower index) with their probabilities, renormalised to sum 1 when renormalize. ids/weights:
// [n, top_k]. n_experts <= 512, top_k <= min(32, n_experts). local: see RouteLocal.
void route_topk_softmax(const float* logits, int64_t n, int64_t n_experts, int64_t top_k,
                        bool renormalize, int32_t* ids, float* weights, RouteLocal local = {});

// Scratch of the experts layer for up to max_tokens tokens of top_k slots each.
class MoeWorkspace {
 public:
  MoeWorkspace(int64_t max_tokens, int64_t top_k, int64_t n_experts, int64_t hidden, int64_t inter);
  int64_t max_tokens, top_k, n_experts, hidden, inter;
  DeviceBuffer xs, act, up, down;     // [slots, hidden], [slots, inter] x2, [slots, hidden]
  DeviceBuffer offsets;               // [n_experts + 1] i32: rows of expert e in the grouped order
  DeviceBuffer row_slot, slot_row;    // [slots] i32: grouped row -> slot (t*top_k+k), and back
  std::vector<int32_t> host_offsets;  // [n_experts + 1], read back for the per-expert GEMMs
};

// out[t] = sum_k weights[t,k] * SwiGLU_{ids[t,k]}(x[t]) for n tokens (out += that when
// accumulate: the residual add fused). Decode (n <= k_gemv_max_tokens): a gate/up GEMV per
// (token, k), then one down GEMV over all k fused with the weighted combine, no host sync; an
// id < 0 is skipped (an expert computed elsewhere, e.g. on the CPU). Prefill: count -> offsets
// -> gather -> per-expert matmul (host reads the offsets) -> weighted combine in top-k order.
// gpt-oss experts (h6g; moe_oss.cu): expert biases and the clamped SwiGLU on every
// moe_experts path but the mixed-format decode. expert_ids [n, top_k]: the routed expert ids
// (MoeArgs::ids may be pool slots); the biases stay resident per layer. clamped: act =
// min(g, limit) * sigmoid(alpha * min(g, limit)) * (clamp(u, -limit, limit) + 1), else silu(g)*u.
struct MoeOss {
  const int32_t* expert_ids = nullptr;
  const float* gate_bias = nullptr;  // [n_experts, inter] or null
  const float* up_bias = nullptr;    // [n_experts, inter] or null
  const float* down_bias = nullptr;  // [n_experts, hidden] or null
  bool clamped = false;
  float alpha = 1.702f, limit = 7.f;
};
// gate[r] = act(gate[r] + gate_bias[e], up[r] + up_bias[e]) over rows of width inter, with
// e = expert_ids[row_slot ? row_slot[r] : r] (rows whose e < 0 are left alone).
void moe_oss_act(const MoeOss& o, float* gate, const float* up, int64_t rows, int64_t inter,
                 const int32_t* row_slot);
// out[t] += sum_k weights[t, k] * down_bias[expert_ids[t, k]] (k ascending; e < 0 skipped).
void moe_oss_down_bias(const MoeOss& o, const float* weights, int64_t n, int64_t top_k,
                       int64_t hidden, float* out);

struct MoeFetch;
struct MoeArgs {
  const float* x;  // [n, hidden]
  int64_t n;
  const int32_t* ids;    // [n, top_k]
  const float* weights;  // [n, top_k]
  int64_t top_k;
  float* out;  // [n, hidden]
  bool accumulate = false;
  const MoeOss* oss = nullptr;  // gpt-oss biases / activation (h6g) or null
  // The slot cache's misses of this layer (ids are slots), copied before any slot is read:
  // by the experts' gate/up kernel itself in decode when it can, else by fetch_experts first.
  const MoeFetch* fetch = nullptr;
};
void moe_experts(Blas& blas, const DeviceExperts& e, const MoeArgs& a, MoeWorkspace& ws);
// Decode (n <= k_gemv_max_tokens) of experts that are not uniform() (moe_mixed.cu, h6f): each
// matrix in its own dtype and stride (block formats through quant_experts_gemv; FP8 / NVFP4 /
// float matrices through a GEMV reading the per-expert scales from the records), silu * up,
// then the weighted combine. moe_experts dispatches here.
void moe_decode_mixed(const DeviceExperts& e, const MoeArgs& a, MoeWorkspace& ws);

// ---- expert slot cache on the device (slot_cache.cu, fetch.cu)

// ExpertCache's state in VRAM (same policy, same decisions; see experts/expert_cache.h): flat
// expert id = layer * n_experts + expert.
struct SlotCacheState {
  int32_t* slot_for_id;  // [n_layers * n_experts] -> slot or -1
  int32_t* id_of_slot;   // [slots] -> flat id or -1
  int64_t* usage;        // [slots] step last used (0 = never; base/slot_rank.h)
  int64_t* recency;      // [n_layers * n_experts] step last active
  int64_t* counters;     // [k_slot_counters]
  int64_t n_experts, slots;
  int64_t window;  // steps of one pass (its MoE layers): ExpertCache's thrash window
};
// The step, the lookup / hit / miss / eviction / fetch counts, the victims found recent (the
// promotion turn), the fetches inserted on probation and the last step of more than
// k_probation_max_active experts.
enum SlotCounter {
  SC_STEP,
  SC_LOOKUPS,
  SC_HITS,
  SC_MISSES,
  SC_EVICTIONS,
  SC_FETCHED,
  SC_THRASH,
  SC_PROBATION,
  SC_LAST_LARGE
};
constexpr int k_slot_counters = 9;

// Ids one slot_cache_ensure takes at most (its fetch and admission lists hold as many).
constexpr int64_t k_slot_max_ids = 256;
// One ExpertCache::ensure of `layer` for the ids [count] on the device (count <=
// k_slot_max_ids): hits are touched, every miss gets the lowest-ranked slot not used by this
// step (empty, probationary, least recently used; priority: most recently active, then lower
// id), on probation when that victim is recent. slot_ids[i] = the slot of ids[i];
// fetch/fetch_slot [*n_fetch] = the experts to copy and where. One block; nothing returns to
// the host.
struct SlotEnsureArgs {
  SlotCacheState s;
  int64_t layer;
  const int32_t* ids;
  int64_t count;
  int32_t* slot_ids;
  int32_t* fetch;
  int32_t* fetch_slot;
  int32_t* n_fetch;
};
void slot_cache_ensure(const SlotEnsureArgs& a);
// Drops every mapping (slot_for_id, id_of_slot = -1, usage = 0); recency and counters stay.
void slot_cache_reset(const SlotCacheState& s, int64_t n_ids);
// Drops the mappings of slots [0, slot_end) only (ExpertCache::drop_slots).
void slot_cache_drop(const SlotCacheState& s, int64_t n_ids, int64_t slot_end);

// Copies the experts fetch[0..*n_fetch) of one layer from mapped host memory (src pointers from
// PinnedBuffer::device_data, stacks as HostExperts lays them out) into their slots of the
// pools: a kernel reading over PCIe, so the copy needs no host round trip (graph-capturable).
struct FetchArgs {
  const char *gate_src, *up_src, *down_src;  // layer stacks [E, matrix]
  char *gate_dst, *up_dst, *down_dst;        // pools [slots, matrix]
  size_t matrix_bytes;                       // one expert's matrix
  const int32_t* fetch;
  const int32_t* fetch_slot;
  const int32_t* n_fetch;
  // Mixed formats (h6f): per matrix, one expert's bytes in the source stack and the pool's slot
  // stride (0: matrix_bytes).
  size_t bytes[3] = {0, 0, 0};
  size_t dst_stride[3] = {0, 0, 0};
  // Blocks of the copy kernel (0: two per SM). A background copy beside other kernels takes a
  // few (HYBRID's admissions: 16 blocks still keep PCIe busy).
  int blocks = 0;
};
void fetch_experts(const FetchArgs& a);
// MoeArgs::fetch: the copy, and two device words (zero before first use, left reusable) for
// the grid barrier between the copy and the first read of a slot.
struct MoeFetch {
  FetchArgs copy;
  uint32_t* barrier;
};

// ---- attention (attention.cu)

// Causal GQA attention of n new tokens at positions pos0.. over a KV cache that already holds
// their keys/values. q/out: [n, n_heads * head_dim]; caches: [>= pos0+n, n_kv_heads *
// head_dim]. head_dim <= 256. PER_TOKEN: one block per (token, head), online softmax over the
// keys (decode). TILED: flash-style, a block per (16 queries, head) sharing 32-key K/V tiles
// in shared memory (prefill). TENSOR: flash-style on TF32 tensor cores with a 3-pass hi/lo
// split (fp32-like accuracy; head_dim 64 or 128; attention_tc.cu). AUTO: PER_TOKEN up to
// k_gemv_max_tokens tokens, TENSOR from k_attention_tensor_min tokens where supported, else
// TILED.
// BF16 caches (kv_dtype): PER_TOKEN and AUTO's decode run attention_decode.cu (flash-decoding
// when `split` is set), TILED/TENSOR/AUTO's prefill run FLASH (attention_flash.cu: bf16
// mma.sync, f32 softmax and accumulation; head_dim 32, 64, 128 or 256, else TILED on bf16).
enum class AttentionKernel { AUTO, PER_TOKEN, TILED, TENSOR, FLASH };
constexpr int64_t k_attention_tensor_min = 128;
// Flash-decoding workspace (caller-owned, graph-stable): keys split into chunks of
// k_attention_split_keys (longer when max_splits chunks would not cover a token's keys), one
// block per (token, head, chunk) that holds keys; the last block of a (token, head) to finish
// merges the partials. partial: attention_split_floats(...) floats; counters:
// [max tokens * n_heads] u32, zero before the first launch (each launch leaves them zero).
// 128 keys: one iteration of the block's 16 warps (8 keys each), so a block is one round trip
// to memory; 512-key chunks took four in series (10.6 us per layer at 520 keys on an H200).
constexpr int64_t k_attention_split_keys = 128;
// At most this many chunks per (token, head): blocks past a short context exit at once, but
// each still costs a launch slot (32 heads x 32 chunks = 1024 blocks; chunks grow past 4096
// keys, so long agent contexts still spread over every SM).
constexpr int64_t k_attention_max_splits = 32;
inline int64_t attention_max_splits(int64_t capacity) {
  const int64_t chunks = (capacity + k_attention_split_keys - 1) / k_attention_split_keys;
  return chunks < k_attention_max_splits ? chunks : k_attention_max_splits;
}
struct AttentionSplit {
  float* partial = nullptr;
  uint32_t* counters = nullptr;
  int64_t max_splits = 0;
  int64_t resident = 0;  // the decode kernel's blocks resident at once (its launcher sets it)
  // GQA decode kernel (its launcher sets them): the K/V bytes a launch's blocks prefetch into
  // L2 before their dependency wait, all blocks together (< 0: each its first 512 keys), and
  // the K/V tiles loaded L2 evict-first (read once a step: they need not displace weights the
  // later GEMVs were prefetched for).
  int64_t prefetch_bytes = -1;
  bool kv_evict_first = false;
};
int64_t attention_split_floats(int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                               int64_t max_splits);
// qk_rope_store's work fused into the decode kernel (attention_decode.cu): with k set, q is the
// raw projection and the kernel applies the per-head q/k rmsnorm and the rotation itself (the
// same arithmetic, qk_rope.cuh), stores each token's new K/V row at pos[t] into the caches
// (k_cache / v_cache are written: one block per (token, kv head)) and scores the keys of the
// pass's own tokens from shared memory instead of the rows being written. Needs pos and seq,
// at most k_gemv_max_tokens tokens, and a sequence's tokens consecutive in the pass at
// consecutive positions (as CudaTransformer lays a pass out). q and k are not written back.
struct AttentionRope {
  const float* k = nullptr;  // [n_tokens, n_kv_heads * head_dim] raw keys; null: not fused
  const float* v = nullptr;  // [n_tokens, n_kv_heads * head_dim]
  int64_t rot_dim = 0;
  bool interleaved = false;
  const float* cos = nullptr;  // [positions, rot_dim / 2]
  const float* sin = nullptr;
  const float* q_norm = nullptr;  // [head_dim] per-head rmsnorm weights or nullptr
  const float* k_norm = nullptr;
  float eps = 0.f;
};
// The fused form of a qk_rope_store call (its k, v, rotation and norms).
inline AttentionRope attention_rope(const QkRopeArgs& r) {
  return {.k = r.k,
          .v = r.v,
          .rot_dim = r.rot_dim,
          .interleaved = r.interleaved,
          .cos = r.cos,
          .sin = r.sin,
          .q_norm = r.q_norm,
          .k_norm = r.k_norm,
          .eps = r.eps};
}
// Per-token positions (PER_TOKEN only): pos [n] device (token t at pos[t], else pos0 + t) and
// seq [n] device (token t's caches start seq[t] * seq_stride elements in; else 0): tokens of
// several sequences in one launch.
struct AttentionArgs {
  const float* q;
  int64_t n_tokens, pos0;
  const void* k_cache;  // kv_dtype elements
  const void* v_cache;
  int64_t n_heads, n_kv_heads, head_dim;
  float scale;
  float* out;
  AttentionKernel kernel = AttentionKernel::AUTO;
  const int32_t* pos = nullptr;
  const int32_t* seq = nullptr;
  int64_t seq_stride = 0;
  DType kv_dtype = DType::F32;
  AttentionSplit split = {};      // BF16 decode: flash-decoding when max_splits > 0
  const float* sinks = nullptr;   // BF16 kernels: [n_heads] sink logits (softmax only) or null
  int64_t window = 0;             // BF16 kernels: keys pos - window < key <= pos (0: all)
  AttentionRope rope = {};        // decode with qk_rope_store fused (attention_decode.cu)
  L2Prefetch next = {};           // decode: weights later launches read (O, the router)
};
void attention(const AttentionArgs& a);
// The BF16-cache kernels attention() dispatches to (checked there).
void attention_flash(const AttentionArgs& a);
bool attention_flash_supported(int64_t head_dim);
void attention_decode(const AttentionArgs& a);
// The tensor-core decode kernel (attention_decode_gqa.cu) attention_decode() takes for bf16
// caches with grouped queries (2-16 q heads per kv head, head_dim 32/64/128/256, 16-byte
// aligned q and caches); set_attention_gqa(false) (or FT_ATTN_GQA=0) keeps the block per q head
// of attention_decode.cu (graphs keep the kernel they were captured with).
bool attention_decode_gqa_supported(const AttentionArgs& a);
void attention_decode_gqa(const AttentionArgs& a);
void set_attention_gqa(bool on);
// Groups of at most 8 q heads run one MMA for Q's (and P's) bf16 hi and lo parts, packed as
// rows 0-7 and 8-15 of the tile; set_attention_gqa_pack(false) (or FT_ATTN_GQA_PACK=0) runs
// the two MMAs apart as larger groups do.
void set_attention_gqa_pack(bool on);
// The per-block shared memory the launchers plan with, lowered to `bytes` (0: the device's own;
// FT_CUDA_SMEM_LIMIT sets it at start-up): a large GPU then takes the tiles and kernels a
// consumer GPU (99 KiB a block) would. Graphs keep the kernels they were captured with.
void set_smem_limit(size_t bytes);
bool attention_tensor_supported(int64_t head_dim);
void attention_tensor(const AttentionArgs& a);  // the TENSOR kernel (attention() dispatches)

// ---- hybrid families (Qwen3-Next, Qwen3.5/3.6): Gated DeltaNet mixer, gated attention, shared
// expert gate. Same math as ops/delta_net.cpp and model/delta_net_block.cpp.
// Tokens of several sequences may share a pass: seq [n] (device) names each token's sequence;
// a sequence's tokens are consecutive, so a step is a run of equal seq values (every kernel
// finds the runs on the device, so graph-captured passes replay with any step layout). A
// sequence's recurrent state lives at state + seq[t] * seq_stride.

// Depthwise causal conv1d (no bias) + SiLU per step, continuing from the step's conv state
// [channels, kernel - 1] (oldest first), which is advanced past the step (causal_conv1d.cu).
// x, out: [n, channels]; w: [channels, kernel] f32; kernel <= 8.
struct ConvArgs {
  const float* x;
  float* out;
  int64_t n, channels;
  const float* w;
  int64_t kernel;
  float* state;
  int64_t seq_stride;
  const int32_t* seq;
};
void causal_conv1d_silu(const ConvArgs& a);

// In place on the conv output and the b/a projections (delta_prep.cu): per token, q and k heads
// (qkv + h * k_dim and qkv + key_dim + h * k_dim, rows of stride) are L2-normalised (eps 1e-6
// inside the root) and q scaled by q_scale; b <- sigmoid(b) (beta), a <- -exp(a_log[h]) *
// softplus(a + dt_bias[h]) (the log decay g); b, a: [n, n_v_heads].
struct DeltaPrepArgs {
  float* qkv;
  int64_t n, stride, n_k_heads, k_dim, key_dim;
  float q_scale;
  float* b;
  float* a;
  const float* a_log;
  const float* dt_bias;
  int64_t n_v_heads;
};
void delta_prep(const DeltaPrepArgs& a);

// The gated delta rule per step and value head h (key head h / (n_v_heads / n_k_heads)), state
// S [k_dim, v_dim] per head at state + seq * seq_stride + h * k_dim * v_dim (delta_rule.cu).
// Per token: S *= exp(g); delta = beta (v - S^T k); S += k delta^T; out = S^T q. Every run
// (decode and prefill) takes the recurrent form: the columns of S are independent, so a block
// of 128 threads owns 32 columns with the state in registers (read and written once per step)
// and walks the step's tokens in order. k_dim <= 128.
struct DeltaRuleArgs {
  const float* q;  // token t at q + t * qkv_stride: [n_k_heads * k_dim]
  const float* k;
  const float* v;  // [n_v_heads * v_dim]
  int64_t qkv_stride;
  const float* g;     // [n, n_v_heads]
  const float* beta;  // [n, n_v_heads]
  int64_t n, n_k_heads, n_v_heads, k_dim, v_dim;
  float* state;
  int64_t seq_stride;
  const int32_t* seq;
  float* out;  // [n, n_v_heads * v_dim]
};
void gated_delta_rule(const DeltaRuleArgs& a);
// The chunked form for prefill (delta_rule_chunked.cu, h7c): chunks of 64 tokens, the same math
// as ops::gated_delta_rule_chunked (within a chunk the k.k / q.k products and a lower-triangular
// solve; the state is read and written once per chunk). starts: the first token of each step
// in the pass, then a.n (a.seq is constant within a step). marks (in-pass state captures): a
// chunk also ends after the first at[i] tokens of the pass (ascending, inside a step), and the
// step's state there is copied to dst + slot[i] * dst_stride ([n_v_heads, k_dim, v_dim]).
constexpr int k_max_state_marks = 16;
struct StateMarks {
  std::vector<int32_t> at, slot;  // pass token index (the state after the tokens before it)
  float* dst = nullptr;
  int64_t dst_stride = 0;  // floats between captures
};
void gated_delta_rule_chunked(const DeltaRuleArgs& a, const std::vector<int64_t>& starts,
                              const StateMarks& marks = {});
// Whether the chunked form's tiles at k_dim fit the device's shared memory (130 KiB at 128:
// not on consumer GPUs' 99 KiB a block; their prefill takes the recurrent form).
bool gated_delta_rule_chunked_supported(int64_t k_dim);
// The conv state at each mark (state_capture.cu): the last kernel - 1 inputs before it, from
// x [n, channels] (the pass's conv inputs) or, for positions before the pass, from the step's
// conv state (state + seq * seq_stride, [channels, kernel - 1], before the conv ran); to
// marks.dst + slot[i] * dst_stride in the conv state layout. starts as above, seq[t] per token
// on the host side as the first token of each step's sequence: seqs[step].
void conv_state_capture(const float* x, int64_t channels, int64_t kernel, const float* state,
                        int64_t seq_stride, const std::vector<int64_t>& starts,
                        const std::vector<int32_t>& seqs, const StateMarks& marks);

// o[r] = rmsnorm(o[r]) * w * silu(z[r]) for rows of dim (the DeltaNet output norm per value
// head; w is the plain scale). gated_rmsnorm.cu.
void gated_rmsnorm(float* o, const float* z, int64_t rows, int64_t dim, const float* w, float eps);

// Gated attention (attn_gate.cu): q_proj rows per head are [query | gate]; qg [n, n_heads, 2,
// head_dim]. split_q_gate copies the queries into q [n, n_heads * head_dim];
// attn_output_gate scales att [n, n_heads * head_dim] by sigmoid(gate).
void split_q_gate(const float* qg, int64_t n, int64_t n_heads, int64_t head_dim, float* q);
void attn_output_gate(float* att, const float* qg, int64_t n, int64_t n_heads, int64_t head_dim);

// The shared expert's gate (shared_gate.cu): x[t, :] += sigmoid(logit[t]) * y[t, :].
void add_sigmoid_scaled(float* x, const float* y, const float* logit, int64_t n, int64_t dim);

// ---- tensor parallelism (h10): comm.cu with NCCL, comm_stub.cpp without; rmsnorm_split.cu

// Makes `device` this thread's device: later allocations, streams and launches of the thread
// go there (one thread per GPU drives a rank).
void set_device(int device);
// Whether this build has NCCL (tensor parallelism over several GPUs).
bool nccl_built();
// A new NCCL unique id (opaque bytes) for the ranks of one communicator to share. With
// NCCL_COMM_ID=ADDR:PORT set, every process gets the same id (NCCL's bootstrap: rank 0
// listens there), which is how ranks on several hosts meet.
std::string nccl_unique_id();

// One rank of an NCCL communicator. All ranks construct theirs concurrently (one thread per
// device, set_device first); collectives run on the current stream (graph-capturable), in the
// same order on every rank.
class Comm {
 public:
  Comm(const std::string& unique_id, int rank, int world);
  ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;
  int rank() const { return rank_; }
  int world() const { return world_; }
  // x[0..count) = the sum of every rank's x, in place.
  void all_reduce_sum(float* x, int64_t count);
  // root's bytes at buf (device) to every rank's buf.
  void broadcast(void* buf, size_t bytes, int root);
  // recv[r * count, (r + 1) * count) = rank r's send[0, count), on every rank.
  void all_gather(const float* send, float* recv, int64_t count);

 private:
  void* handle_ = nullptr;  // ncclComm_t
  int rank_ = 0, world_ = 1;
};

// out[r] = sum_j x[r, j]^2 over n rows of dim.
void row_sumsq(const float* x, int64_t n, int64_t dim, float* out);
// y[r, j] = x[r, j] / sqrt(sumsq[r] / total_dim + eps) * w[j]: rmsnorm of rows whose other
// columns live on other ranks (sumsq: all-reduced row_sumsq). y may alias x.
void rmsnorm_from_sumsq(const float* x, int64_t n, int64_t dim, const float* sumsq,
                        int64_t total_dim, const float* w, float eps, float* y);

}  // namespace ft::cuda
