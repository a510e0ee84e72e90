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
// U: the copy unit (uint4 when every matrix and stride is a multiple of 16 bytes, else a byte).
// Per fetched expert the three matrices' units run back to back: gate [0, n0), up [n0, n0 + n1),
// down after (per-matrix sizes: mixed formats).
template <typename U>
__global__ void __launch_bounds__(k_threads) fetch_kernel(const __grid_constant__ FetchArgs a) {
  pdl_wait();
  pdl_trigger();
  int64_t n[3], st[3];
#pragma unroll
  for (int m = 0; m < 3; ++m) {
    const size_t b = a.bytes[m] ? a.bytes[m] : a.matrix_bytes;
    n[m] = static_cast<int64_t>(b / sizeof(U));
    st[m] = static_cast<int64_t>(a.dst_stride[m] ? a.dst_stride[m] : b);
  }
  const int64_t per = n[0] + n[1] + n[2];  // units per expert
  const int64_t total = int64_t{*a.n_fetch} * per;
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
      const int64_t f = u / per, r = u % per;
      const int m = r < n[0] ? 0 : r < n[0] + n[1] ? 1 : 2;
      const int64_t i = r - (m > 0 ? n[0] : 0) - (m > 1 ? n[1] : 0);
      const int64_t e = a.fetch[f], slot = a.fetch_slot[f];
      const char* src = m == 0 ? a.gate_src : m == 1 ? a.up_src : a.down_src;
      char* d = m == 0 ? a.gate_dst : m == 1 ? a.up_dst : a.down_dst;
      v[j] = reinterpret_cast<const U*>(src + e * n[m] * int64_t{sizeof(U)})[i];
      dst[j] = reinterpret_cast<U*>(d + slot * st[m]) + i;
    }
#pragma unroll
    for (int j = 0; j < k_unroll; ++j)
      if (dst[j]) *dst[j] = v[j];
  }
}

}  // namespace

// ---- launcher
void fetch_experts(const FetchArgs& a) {
  FT_CHECK(a.gate_src && a.up_src && a.down_src && a.gate_dst && a.up_dst && a.down_dst &&
               a.matrix_bytes > 0 && a.fetch && a.fetch_slot && a.n_fetch,
           "fetch_experts: bad arguments");
  static const int sms = sm_count();
  const auto grid = static_cast<unsigned>(a.blocks > 0 ? a.blocks : 2 * sms);
  bool vec = a.matrix_bytes % 16 == 0;
  for (int m = 0; m < 3; ++m) vec = vec && a.bytes[m] % 16 == 0 && a.dst_stride[m] % 16 == 0;
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
