// Device memory: the owning buffer and synchronous/asynchronous copies.
#include <cstdlib>
#include <utility>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft::cuda {

// An allocation that does not fit throws OutOfMemory (the engine shrinks its caches and goes
// on); any other CUDA error still aborts.
DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  const cudaError_t err = cudaMalloc(&data_, bytes);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clear the sticky-free error so later calls do not see it
    data_ = nullptr;
    bytes_ = 0;
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    throw OutOfMemory(fmt::format("cannot allocate {:.1f} MiB of GPU memory ({:.1f} MiB free)",
                                  bytes / 1048576.0, free_b / 1048576.0));
  }
  CUDA_CHECK(err);
  // FT_CUDA_POISON=0xNN (debugging): every new buffer filled with the byte NN instead of what
  // the allocator hands back (fresh pages are zero, reused ones hold an earlier owner's data),
  // so a read of memory no kernel wrote shows in a run of one check too.
  static const int poison = [] {
    const char* e = std::getenv("FT_CUDA_POISON");
    return e && *e ? static_cast<int>(std::strtol(e, nullptr, 0) & 0xff) : -1;
  }();
  if (poison >= 0) CUDA_CHECK(cudaMemset(data_, poison, bytes));
}

DeviceBuffer::~DeviceBuffer() {
  if (data_) cudaFree(data_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (data_) cudaFree(data_);
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::upload(const void* src, size_t bytes, size_t offset) {
  FT_CHECK(offset + bytes <= bytes_, "upload of {} bytes at {} overflows a {}-byte buffer", bytes,
           offset, bytes_);
  copy_to_device(static_cast<char*>(data_) + offset, src, bytes);
}

// Ordered after the ops issued so far on this thread's stream, and waited for.
void copy_to_device(void* dst, const void* src, size_t bytes) {
  if (!bytes) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream()));
  CUDA_CHECK(cudaStreamSynchronize(stream()));
}

void copy_to_host(void* dst, const void* src, size_t bytes) {
  if (!bytes) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream()));
  CUDA_CHECK(cudaStreamSynchronize(stream()));
}

void copy_to_device_async(void* dst, const void* src, size_t bytes) {
  if (bytes) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream()));
}

void copy_to_host_async(void* dst, const void* src, size_t bytes) {
  if (bytes) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream()));
}

void copy_on_device(void* dst, const void* src, size_t bytes) {
  if (bytes) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream()));
}

void copy_2d_on_device(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                       size_t height) {
  if (width && height)
    CUDA_CHECK(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height,
                                 cudaMemcpyDeviceToDevice, stream()));
}

void memset_async(void* dst, int value, size_t bytes) {
  if (bytes) CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, stream()));
}

void stream_synchronize() { CUDA_CHECK(cudaStreamSynchronize(stream())); }

void synchronize() { CUDA_CHECK(cudaDeviceSynchronize()); }

}  // namespace ft::cuda
