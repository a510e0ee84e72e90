// Fork-join thread pool: one worker per usable core, the calling thread takes part.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace ft {

class ThreadPool {
 public:
  // n_threads <= 0: cpu_count(). With pin and FT_PIN_THREADS=1 in the environment, workers
  // are pinned to the 2nd..nth CPU this process may run on and the caller to the 1st (when
  // the pool does not oversubscribe them); by default threads are left to the scheduler.
  explicit ThreadPool(int n_threads = 0, bool pin = true);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(begin, end) over [0, n) in chunks of `grain` items; returns when all are done.
  // Chunks are handed out dynamically. fn must not call run() again (no nesting).
  void run(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

  // Calls fn(thread_index) once on every thread.
  void run_on_all(const std::function<void(int)>& fn);

 private:
  void worker_loop(int index);
  void work(int thread_index);
  void start_and_join();

  int n_threads_;
  int64_t spin_ns_;  // how long an idle thread polls before sleeping (0 when oversubscribed)
  std::vector<std::thread> workers_;
  // Each word the threads write on its own cache line: idle workers poll generation_ while
  // the busy ones take chunks from next_ and count down pending_.
  alignas(64) std::atomic<uint32_t> generation_{0};
  alignas(64) std::atomic<int> pending_{0};
  alignas(64) std::atomic<int64_t> next_{0};
  // The job of the current generation (written before generation_ is bumped, then read-only).
  alignas(64) const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  const std::function<void(int)>* all_fn_ = nullptr;
  int64_t n_ = 0, grain_ = 1;
  std::atomic<bool> stop_{false};
};

// CPUs this process can use: the affinity mask, capped by a cgroup CPU quota (cpu.max or
// cpu.cfs_quota_us) rounded up -- containers often see every host CPU but may run on few.
int cpu_count();
// The quota part: ceil(quota / period) from cgroup v2 `cpu.max` text ("max 100000" or
// "400000 100000") or v1 quota/period values; 0 when unlimited or unreadable.
int cgroup_cpu_limit(const std::string& cpu_max);
int cgroup_cpu_limit(int64_t quota_us, int64_t period_us);

}  // namespace ft
