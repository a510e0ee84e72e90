// Fork-join thread pool: one worker per core (pinned), the calling thread takes part.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace ft {

class ThreadPool {
 public:
  // n_threads <= 0: one per online core. Workers are pinned to cores 1..n-1, the caller to 0
  // when pin is true.
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

  int n_threads_;
  std::vector<std::thread> workers_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  // The job of the current generation.
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  const std::function<void(int)>* all_fn_ = nullptr;
  int64_t n_ = 0, grain_ = 1;
  std::atomic<int64_t> next_{0};
};

int cpu_count();

}  // namespace ft
