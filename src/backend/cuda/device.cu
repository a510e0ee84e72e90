// Device discovery for the CUDA backend.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft::cuda {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

std::string device_summary() {
  if (device_count() == 0) return "no CUDA device";
  cudaDeviceProp p{};
  CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
  return fmt::format("{}, {:.1f} GiB, sm_{}{}", p.name, p.totalGlobalMem / double(1 << 30), p.major,
                     p.minor);
}

int64_t resident_blocks(const void* kernel, int threads, size_t smem) {
  static std::mutex m;
  static std::map<std::tuple<int, const void*, int, size_t>, int64_t> known;
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  const auto key = std::make_tuple(dev, kernel, threads, smem);
  std::lock_guard<std::mutex> lock(m);
  if (auto it = known.find(key); it != known.end()) return it->second;
  int sms = 0, per_sm = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
  return known[key] = int64_t{sms} * std::max(per_sm, 1);
}

}  // namespace ft::cuda
