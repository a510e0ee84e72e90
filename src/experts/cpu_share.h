// The host end of HYBRID decode's CPU share (backend/cuda/cpu_share.h): a coordinator thread
// polls the mailbox that the device's cache bookkeeping fills, computes the job's routes on the
// CPU workers from the pinned experts (HostExperts) and writes their weighted sum back, so the
// GPU never waits on a host call and the decode step stays one CUDA graph. Built into
// ft_cuda_model only.
#pragma once
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "backend/cpu/thread_pool.h"
#include "backend/cuda/cpu_share.h"
#include "base/tensor.h"

namespace ft {

class HostExperts;

// A layer's CPU routes: out [n, hidden] += w[i] * expert ids[i] (x row i / top_k) over the
// routes with ids[i] >= 0, in route order per token (the host-bookkeeping HYBRID path and the
// coordinator compute the same sums). Scratch grows on demand.
struct CpuRoutes {
  const float* x;       // [n, hidden]
  const int32_t* ids;   // [routes] expert ids, -1: not on the CPU
  const float* w;       // [routes]
  int64_t routes, top_k;
};
struct CpuRouteScratch {
  std::vector<float> g, u, d;
  std::vector<TensorView> views;
  std::vector<int64_t> items;
};
// Returns the number of routes computed.
int64_t compute_cpu_routes(ThreadPool& pool, const HostExperts& host, int64_t layer,
                           const CpuRoutes& r, float* out, CpuRouteScratch& s);

class CpuShare {
 public:
  // max_tokens: rows a decode step may carry (routes = max_tokens * top_k).
  CpuShare(const HostExperts& host, int64_t top_k, int64_t max_tokens, int threads);
  ~CpuShare();
  CpuShare(const CpuShare&) = delete;
  CpuShare& operator=(const CpuShare&) = delete;

  cuda::CpuShareArgs args() const { return args_; }
  // After a step: throws ft::Error if a job failed on the CPU or the device stopped waiting
  // (and clears the verdict for the next step).
  void check();
  double cpu_seconds() const { return static_cast<double>(ns_.load()) * 1e-9; }
  int64_t jobs() const { return jobs_.load(); }
  // Distinct experts left to the CPU so far (the device counter: a synchronising copy).
  int64_t cpu_experts() const;

 private:
  void loop();
  const HostExperts& host_;
  int64_t top_k_;
  cuda::PinnedBuffer box_;
  cuda::DeviceBuffer state_;  // seq, pending, cpu_experts
  cuda::CpuShareArgs args_;
  ThreadPool pool_;
  CpuRouteScratch scratch_;
  std::atomic<bool> quit_{false};
  std::atomic<int64_t> ns_{0}, jobs_{0};
  std::thread thread_;
};

}  // namespace ft
