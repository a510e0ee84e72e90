// h2d_probe: host -> GPU copy rates from mapped pinned memory by the three ways a device can
// pull bytes over PCIe: a copy engine (cudaMemcpyAsync), SM loads of the mapped pointer (the
// decode miss copy's way, fetch.cuh) and TMA bulk copies (cp.async.bulk global -> shared ->
// global). Best of 5 copies of 256 MiB each, then a spot check of the bytes. sm_90.
//   nvcc -O2 -arch=sm_90 -std=c++17 tools/gpu/h2d_probe.cu -o h2d_probe && ./h2d_probe
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#define CK(x)                                                                     \
  do {                                                                            \
    const cudaError_t e = (x);                                                    \
    if (e != cudaSuccess) {                                                       \
      std::printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e));       \
      std::exit(1);                                                               \
    }                                                                             \
  } while (0)

// Each thread: four 16-byte loads in flight, then their stores (copy_fetched's pattern).
__global__ void sm_copy(const uint4* __restrict__ src, uint4* __restrict__ dst, int64_t n) {
  const int64_t T = int64_t{gridDim.x} * blockDim.x;
  for (int64_t u = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; u < n; u += 4 * T) {
    uint4 v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j)
      if (u + j * T < n) v[j] = src[u + j * T];
#pragma unroll
    for (int j = 0; j < 4; ++j)
      if (u + j * T < n) dst[u + j * T] = v[j];
  }
}

__device__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// One thread per block moves pieces of C bytes (block b: b, b + grid, ...) through S shared
// memory stages: bulk load on an mbarrier, bulk store, wait for the store's read of the stage.
template <int C, int S>
__global__ void tma_copy(const char* __restrict__ src, char* __restrict__ dst, int64_t bytes) {
  extern __shared__ __align__(128) char stage[];
  __shared__ __align__(8) uint64_t bar[S];
  if (threadIdx.x != 0) return;
  const int64_t pieces = bytes / C;
  for (int s = 0; s < S; ++s) asm volatile("mbarrier.init.shared.b64 [%0], 1;" ::"r"(smem_addr(&bar[s])));
  asm volatile("fence.mbarrier_init.release.cluster;");
  auto load = [&](int s, int64_t p) {
    asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" ::"r"(smem_addr(&bar[s])), "r"(C));
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
            smem_addr(stage + s * C)),
        "l"(src + p * C), "r"(C), "r"(smem_addr(&bar[s]))
        : "memory");
  };
  uint32_t phase[S] = {};
  for (int s = 0; s < S && blockIdx.x + int64_t{s} * gridDim.x < pieces; ++s)
    load(s, blockIdx.x + int64_t{s} * gridDim.x);
  for (int64_t k = 0;; ++k) {
    const int s = static_cast<int>(k % S);
    const int64_t p = blockIdx.x + k * gridDim.x;
    if (p >= pieces) break;
    for (uint32_t done = 0; !done;)
      asm volatile(
          "{ .reg .pred q; mbarrier.try_wait.parity.shared.b64 q, [%1], %2; selp.u32 %0, 1, 0, q; }"
          : "=r"(done)
          : "r"(smem_addr(&bar[s])), "r"(phase[s])
          : "memory");
    phase[s] ^= 1;
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst + p * C),
                 "r"(smem_addr(stage + s * C)), "r"(C)
                 : "memory");
    asm volatile("cp.async.bulk.commit_group;");
    asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
    if (p + int64_t{S} * gridDim.x < pieces) load(s, p + int64_t{S} * gridDim.x);
  }
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

int main() {
  const int64_t bytes = int64_t{256} << 20;
  char *host, *mapped, *dev;
  CK(cudaHostAlloc(&host, bytes, cudaHostAllocMapped));
  for (int64_t i = 0; i < bytes; i += 4096) host[i] = static_cast<char>(i / 4096);
  CK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&mapped), host, 0));
  CK(cudaMalloc(&dev, bytes));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  auto time = [&](const char* what, int blocks, auto copy) {
    copy();
    CK(cudaDeviceSynchronize());
    float best = 1e30f;
    for (int r = 0; r < 5; ++r) {
      CK(cudaEventRecord(a));
      copy();
      CK(cudaEventRecord(b));
      CK(cudaEventSynchronize(b));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, a, b));
      best = ms < best ? ms : best;
    }
    CK(cudaGetLastError());
    std::printf("%-24s %4d blocks  %6.2f GB/s\n", what, blocks, bytes / (best * 1e6));
  };
  time("DMA (cudaMemcpyAsync)", 0,
       [&] { CK(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice)); });
  for (int g : {16, 32, 64, 2 * sms, 4 * sms})
    time("SM loads, 512 threads", g, [&] {
      sm_copy<<<g, 512>>>(reinterpret_cast<const uint4*>(mapped), reinterpret_cast<uint4*>(dev),
                          bytes / 16);
    });
  CK(cudaFuncSetAttribute(tma_copy<16384, 4>, cudaFuncAttributeMaxDynamicSharedMemorySize, 65536));
  for (int g : {16, 32, sms, 2 * sms})
    time("TMA 16 KiB x 4 stages", g, [&] { tma_copy<16384, 4><<<g, 32, 65536>>>(mapped, dev, bytes); });
  CK(cudaFuncSetAttribute(tma_copy<4096, 8>, cudaFuncAttributeMaxDynamicSharedMemorySize, 32768));
  for (int g : {sms, 2 * sms})
    time("TMA 4 KiB x 8 stages", g, [&] { tma_copy<4096, 8><<<g, 32, 32768>>>(mapped, dev, bytes); });
  char* back = static_cast<char*>(std::malloc(bytes));
  CK(cudaMemcpy(back, dev, bytes, cudaMemcpyDeviceToHost));
  int64_t bad = 0;
  for (int64_t i = 0; i < bytes; i += 4096) bad += back[i] != host[i];
  std::printf("spot check: %lld of %lld pages differ\n", static_cast<long long>(bad),
              static_cast<long long>(bytes / 4096));
  std::free(back);
  return bad != 0;
}
