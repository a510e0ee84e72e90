// ThreadPool: generation counter + atomic wait/notify; workers spin briefly before sleeping so
// back-to-back ops in a decode step do not pay a wake-up each.
#include "backend/cpu/thread_pool.h"

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include "base/error.h"

namespace ft {

namespace {
void pin_to_core(int core) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(core % cpu_count(), &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);  // best effort
}

inline void cpu_relax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}
}  // namespace

int cpu_count() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

ThreadPool::ThreadPool(int n_threads, bool pin)
    : n_threads_(n_threads > 0 ? n_threads : cpu_count()) {
  if (pin && n_threads_ <= cpu_count()) pin_to_core(0);
  for (int i = 1; i < n_threads_; ++i)
    workers_.emplace_back([this, i, pin] {
      if (pin && n_threads_ <= cpu_count()) pin_to_core(i);
      worker_loop(i);
    });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::work(int thread_index) {
  if (all_fn_) {
    (*all_fn_)(thread_index);
    return;
  }
  for (;;) {
    int64_t b = next_.fetch_add(grain_, std::memory_order_relaxed);
    if (b >= n_) break;
    (*fn_)(b, std::min(n_, b + grain_));
  }
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t g = generation_.load(std::memory_order_acquire);
    for (int spin = 0; g == seen && spin < 20000; ++spin) {
      cpu_relax();
      g = generation_.load(std::memory_order_acquire);
    }
    if (g == seen) {
      generation_.wait(seen, std::memory_order_acquire);
      continue;
    }
    seen = g;
    if (stop_.load()) return;
    work(index);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

void ThreadPool::run(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  if (n_threads_ == 1 || n <= grain) {
    fn(0, n);
    return;
  }
  fn_ = &fn;
  all_fn_ = nullptr;
  n_ = n;
  grain_ = grain;
  next_.store(0, std::memory_order_relaxed);
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  work(0);
  for (int p; (p = pending_.load(std::memory_order_acquire)) != 0;) {
    for (int spin = 0; spin < 1000 && pending_.load(std::memory_order_acquire) != 0; ++spin)
      cpu_relax();
    if ((p = pending_.load(std::memory_order_acquire)) != 0) pending_.wait(p);
  }
}

void ThreadPool::run_on_all(const std::function<void(int)>& fn) {
  if (n_threads_ == 1) {
    fn(0);
    return;
  }
  all_fn_ = &fn;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  work(0);
  for (int p; (p = pending_.load(std::memory_order_acquire)) != 0;) pending_.wait(p);
  all_fn_ = nullptr;
}

}  // namespace ft
