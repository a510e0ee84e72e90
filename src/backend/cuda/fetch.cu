// fetch_experts: a copy kernel that moves the step's missed experts from mapped pinned host
// memory into their VRAM slots over PCIe (zero-copy reads, 16-byte vectors, several loads in
// flight per thread). The miss list and its length are read on the device, so the copy is
// part of a captured decode step with no host round trip.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/fetch.cuh"

namespace ft::cuda {

namespace {
constexpr int k_threads = 512;

// ---- kernels
template <typename U>
__global__ void __launch_bounds__(k_threads) fetch_kernel(const __grid_constant__ FetchArgs a) {
  pdl_wait();
  pdl_trigger();
  copy_fetched<U>(a, *a.n_fetch, blockIdx.x * int64_t{blockDim.x} + threadIdx.x,
                  int64_t{gridDim.x} * blockDim.x);
}

}  // namespace

// ---- launcher
void fetch_experts(const FetchArgs& a) {
  FT_CHECK(a.gate_src && a.up_src && a.down_src && a.gate_dst && a.up_dst && a.down_dst &&
               a.matrix_bytes > 0 && a.fetch && a.fetch_slot && a.n_fetch,
           "fetch_experts: bad arguments");
  static const int sms = sm_count();
  const auto grid = static_cast<unsigned>(a.blocks > 0 ? a.blocks : 2 * sms);
  if (fetch_vectorizable(a))
    launch_kernel(fetch_kernel<uint4>, dim3(grid), dim3(k_threads), 0, a);
  else
    launch_kernel(fetch_kernel<unsigned char>, dim3(grid), dim3(k_threads), 0, a);
}

}  // namespace ft::cuda
