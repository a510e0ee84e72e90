// TimingEvent: a CUDA event with timing, recorded on the current stream (the per-step split).
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft::cuda {

TimingEvent::TimingEvent() {
  cudaEvent_t e;
  CUDA_CHECK(cudaEventCreate(&e));
  handle_ = e;
}

TimingEvent::~TimingEvent() {
  if (handle_) cudaEventDestroy(static_cast<cudaEvent_t>(handle_));
}

void TimingEvent::record() {
  CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(handle_), stream()));
}

double TimingEvent::seconds_since(const TimingEvent& start) const {
  auto e = static_cast<cudaEvent_t>(handle_);
  CUDA_CHECK(cudaEventSynchronize(e));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start.handle_), e));
  return ms * 1e-3;
}

}  // namespace ft::cuda
