// Streams, events and page-locked host memory: the plumbing of the expert offload copies.
#include <utility>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft::cuda {

namespace {
cudaEvent_t ev(const Event& e) { return static_cast<cudaEvent_t>(e.handle()); }
}  // namespace

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
  if (bytes)
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice,
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

void record_on_default(Event& e) { CUDA_CHECK(cudaEventRecord(ev(e), cudaStreamLegacy)); }
void wait_on_default(const Event& e) {
  CUDA_CHECK(cudaStreamWaitEvent(cudaStreamLegacy, ev(e), 0));
}

PinnedBuffer::PinnedBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes > 0) CUDA_CHECK(cudaHostAlloc(&data_, bytes, cudaHostAllocPortable));
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
