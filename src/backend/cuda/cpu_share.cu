// cpu_share_collect: the device end of HYBRID decode's CPU share (cpu_share.h). One block waits
// for the host coordinator's done word to reach the seq this layer's ensure submitted (a
// system-scope acquire on mapped memory, polled with a short sleep; none submitted: it exits at
// once), then adds the CPU's weighted sum into the residual rows. A wait past timeout_ns sets
// error = 2 and adds nothing, so a dead coordinator fails the step instead of hanging the GPU.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cpu_share.h"

namespace ft::cuda {

namespace {
constexpr int k_threads = 1024;

__device__ __forceinline__ uint64_t load_acquire_sys(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// ---- kernels
__global__ void __launch_bounds__(k_threads) collect_kernel(const __grid_constant__ CpuShareArgs s,
                                                            float* __restrict__ x) {
  __shared__ bool ok;
  __shared__ int n_tokens;
  pdl_wait();
  pdl_trigger();
  const uint64_t want = *s.pending;
  if (want == 0) return;  // uniform: this layer left nothing to the CPU
  const CpuShareBox box = cpu_share_box(s.box, s.max_routes, s.max_tokens, s.hidden);
  CpuShareHeader* head = box.head;
  if (threadIdx.x == 0) {
    const uint64_t t0 = global_ns();
    bool good = true;
    while (load_acquire_sys(&head->done) < want) {
      if (global_ns() - t0 > static_cast<uint64_t>(s.timeout_ns)) {
        *reinterpret_cast<volatile uint64_t*>(&head->waited) = want;
        __threadfence_system();
        *reinterpret_cast<volatile uint64_t*>(&head->error) = 2;
        good = false;
        break;
      }
      __nanosleep(200);
    }
    ok = good && load_acquire_sys(&head->error) == 0;
    n_tokens = *reinterpret_cast<volatile int32_t*>(&head->n_tokens);
  }
  __syncthreads();
  if (!ok) return;
  const int64_t width = int64_t{n_tokens} * s.hidden;
  for (int64_t i = threadIdx.x; i < width; i += k_threads) x[i] += __ldcv(box.y + i);
}
}  // namespace

// ---- launcher
void cpu_share_collect(const CpuShareArgs& s, float* x) {
  FT_CHECK(s.box && s.pending && x && s.hidden > 0, "cpu_share_collect: bad arguments");
  launch_kernel(collect_kernel, dim3(1), dim3(k_threads), 0, s, x);
}

}  // namespace ft::cuda
