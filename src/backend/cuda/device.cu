// Device discovery for the CUDA backend.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <tuple>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"
#include "base/env.h"

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

size_t l2_cache_bytes() { return static_cast<size_t>(device_attribute(cudaDevAttrL2CacheSize)); }

namespace {
std::atomic<size_t>& smem_limit() {  // 0: the device's own
  static std::atomic<size_t> limit{
      static_cast<size_t>(std::max(0LL, env_int("FT_CUDA_SMEM_LIMIT", 0)))};
  return limit;
}
}  // namespace

void set_smem_limit(size_t bytes) { smem_limit().store(bytes); }

size_t max_dynamic_smem(const void* kernel) {
  // The device's opt-in limit and the kernel's static bytes, remembered per (device, kernel).
  static std::mutex m;
  static std::map<std::pair<int, const void*>, std::pair<size_t, size_t>> known;
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  const auto key = std::make_pair(dev, kernel);
  std::pair<size_t, size_t> lim;
  {
    std::lock_guard<std::mutex> lock(m);
    auto it = known.find(key);
    if (it == known.end()) {
      int optin = 0;
      CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
      cudaFuncAttributes attr{};
      CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
      it = known.emplace(key, std::make_pair(size_t(optin), attr.sharedSizeBytes)).first;
    }
    lim = it->second;
  }
  const size_t cap = smem_limit().load();
  const size_t limit = cap > 0 ? std::min(lim.first, cap) : lim.first;
  return limit > lim.second ? limit - lim.second : 0;
}

}  // namespace ft::cuda
