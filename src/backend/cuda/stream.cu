// Streams, events, graph capture and page-locked host memory: the current-stream plumbing every
// op launches through, the expert offload copies, and the captured decode step.
#include <utility>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"
#include "base/env.h"

namespace ft::cuda {

namespace {
cudaEvent_t ev(const Event& e) { return static_cast<cudaEvent_t>(e.handle()); }
thread_local cudaStream_t t_stream = nullptr;  // nullptr: the legacy default stream
}  // namespace

cudaStream_t stream() { return t_stream; }

bool pdl_enabled() {
  static const bool supported = [] {
    if (!env_on("FT_CUDA_PDL")) return false;
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess)
      return false;
    return major >= 9;
  }();
  return supported && t_stream != nullptr;
}

Stream::Stream() {
  cudaStream_t s;
  // Blocking: ordered with the legacy default stream like the ops that run there.
  CUDA_CHECK(cudaStreamCreate(&s));
  handle_ = s;
}

Stream::~Stream() {
  if (handle_) {
    cudaStreamSynchronize(static_cast<cudaStream_t>(handle_));
    cudaStreamDestroy(static_cast<cudaStream_t>(handle_));
  }
}

void Stream::synchronize() {
  CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(handle_)));
}

StreamScope::StreamScope(const Stream& s) : prev_(t_stream) {
  t_stream = static_cast<cudaStream_t>(s.handle());
}
StreamScope::~StreamScope() { t_stream = static_cast<cudaStream_t>(prev_); }

Graph::~Graph() {
  if (exec_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
}

void Graph::capture_begin() {
  FT_CHECK(stream() != nullptr && !exec_, "graph capture needs a Stream in scope, once");
  CUDA_CHECK(cudaStreamBeginCapture(stream(), cudaStreamCaptureModeThreadLocal));
}

// A graph that cannot be instantiated for want of memory throws OutOfMemory and keeps nothing
// (the caller captures again on a later pass).
void Graph::capture_end() {
  cudaGraph_t g = nullptr;
  CUDA_CHECK(cudaStreamEndCapture(stream(), &g));
  cudaGraphExec_t e = nullptr;
  const cudaError_t err = cudaGraphInstantiate(&e, g, 0);
  CUDA_CHECK(cudaGraphDestroy(g));
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    throw OutOfMemory("cannot instantiate a CUDA graph: out of GPU memory");
  }
  CUDA_CHECK(err);
  exec_ = e;
}

void Graph::launch() {
  FT_CHECK(exec_, "graph launch before capture");
  CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), stream()));
}

Event::Event() {
  cudaEvent_t e;
  CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  handle_ = e;
}

Event::~Event() {
  if (handle_) cudaEventDestroy(static_cast<cudaEvent_t>(handle_));
}

CopyStream::CopyStream() {
  cudaStream_t s;
  // Non-blocking: no implicit synchronisation with the legacy default stream.
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  handle_ = s;
}

CopyStream::~CopyStream() {
  if (handle_) {
    cudaStreamSynchronize(static_cast<cudaStream_t>(handle_));
    cudaStreamDestroy(static_cast<cudaStream_t>(handle_));
  }
}

void CopyStream::copy_to_device(void* dst, const void* src, size_t bytes) {
  if (bytes)  // the direction from the pointers (unified addressing): host or device source
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault,
                               static_cast<cudaStream_t>(handle_)));
}

void CopyStream::record(Event& e) {
  CUDA_CHECK(cudaEventRecord(ev(e), static_cast<cudaStream_t>(handle_)));
}

void CopyStream::wait(const Event& e) {
  CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(handle_), ev(e), 0));
}

void CopyStream::synchronize() {
  CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(handle_)));
}

void record_on_default(Event& e) { CUDA_CHECK(cudaEventRecord(ev(e), stream())); }
void wait_on_default(const Event& e) { CUDA_CHECK(cudaStreamWaitEvent(stream(), ev(e), 0)); }

PinnedBuffer::PinnedBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  const cudaError_t err =
      cudaHostAlloc(&data_, bytes, cudaHostAllocPortable | cudaHostAllocMapped);
  if (err == cudaErrorMemoryAllocation) {  // recoverable, like a device allocation
    cudaGetLastError();
    data_ = nullptr;
    bytes_ = 0;
    throw OutOfMemory(fmt::format("cannot pin {:.1f} MiB of host memory", bytes / 1048576.0));
  }
  CUDA_CHECK(err);
}

void* PinnedBuffer::device_data() const {
  if (!data_) return nullptr;
  void* d = nullptr;
  CUDA_CHECK(cudaHostGetDevicePointer(&d, data_, 0));
  return d;
}

PinnedBuffer::~PinnedBuffer() {
  if (data_) cudaFreeHost(data_);
}

PinnedBuffer::PinnedBuffer(PinnedBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& o) noexcept {
  if (this != &o) {
    if (data_) cudaFreeHost(data_);
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

void memory_info(size_t* free_bytes, size_t* total_bytes) {
  CUDA_CHECK(cudaMemGetInfo(free_bytes, total_bytes));
}

}  // namespace ft::cuda
