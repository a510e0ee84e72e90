// fetch_experts: a copy kernel that moves the step's missed experts from mapped pinned host
// memory into their VRAM slots over PCIe (zero-copy reads, 16-byte vectors, several loads in
// flight per thread). The miss list and its length are read on the device, so the copy is
// part of a captured decode step with no host round trip.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft::cuda {

namespace {
constexpr int k_threads = 512;
constexpr int k_unroll = 4;

// ---- kernels
// U: the copy unit (uint4 when every matrix is a multiple of 16 bytes, else a byte).
template <typename U>
__global__ void __launch_bounds__(k_threads) fetch_kernel(const __grid_constant__ FetchArgs a) {
  pdl_wait();
  pdl_trigger();
  const int64_t per = static_cast<int64_t>(a.matrix_bytes / sizeof(U));  // units per matrix
  const int64_t total = int64_t{*a.n_fetch} * 3 * per;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t u0 = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; u0 < total;
       u0 += stride * k_unroll) {
    U v[k_unroll];
    U* dst[k_unroll];
#pragma unroll
    for (int j = 0; j < k_unroll; ++j) {
      const int64_t u = u0 + j * stride;
      dst[j] = nullptr;
      if (u >= total) continue;
      const int64_t f = u / (3 * per), r = u % (3 * per), m = r / per, i = r % per;
      const int64_t e = a.fetch[f], slot = a.fetch_slot[f];
      const char* src = m == 0 ? a.gate_src : m == 1 ? a.up_src : a.down_src;
      char* d = m == 0 ? a.gate_dst : m == 1 ? a.up_dst : a.down_dst;
      v[j] = reinterpret_cast<const U*>(src + e * a.matrix_bytes)[i];
      dst[j] = reinterpret_cast<U*>(d + slot * a.matrix_bytes) + i;
    }
#pragma unroll
    for (int j = 0; j < k_unroll; ++j)
      if (dst[j]) *dst[j] = v[j];
  }
}

int sm_count() {
  static const int n = [] {
    int dev = 0, v = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev));
    return v;
  }();
  return n;
}
}  // namespace

// ---- launcher
void fetch_experts(const FetchArgs& a) {
  FT_CHECK(a.gate_src && a.up_src && a.down_src && a.gate_dst && a.up_dst && a.down_dst &&
               a.matrix_bytes > 0 && a.fetch && a.fetch_slot && a.n_fetch,
           "fetch_experts: bad arguments");
  const auto grid = static_cast<unsigned>(2 * sm_count());
  const bool vec = a.matrix_bytes % 16 == 0;
  for (const void* p : {static_cast<const void*>(a.gate_src), static_cast<const void*>(a.up_src),
                        static_cast<const void*>(a.down_src), static_cast<const void*>(a.gate_dst),
                        static_cast<const void*>(a.up_dst), static_cast<const void*>(a.down_dst)})
    FT_CHECK(!vec || reinterpret_cast<uintptr_t>(p) % 16 == 0, "fetch_experts: unaligned stack");
  if (vec)
    launch_kernel(fetch_kernel<uint4>, dim3(grid), dim3(k_threads), 0, a);
  else
    launch_kernel(fetch_kernel<unsigned char>, dim3(grid), dim3(k_threads), 0, a);
}

}  // namespace ft::cuda
