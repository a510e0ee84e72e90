// Device discovery for the CUDA backend.
#include <fmt/format.h>

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

}  // namespace ft::cuda
