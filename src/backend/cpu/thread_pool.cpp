// ThreadPool: generation counter + futex wait/notify; idle threads poll for a fixed time (not a
// pause count: PAUSE costs 10 to 140 cycles across x86 generations) before sleeping, so
// back-to-back ops in a decode step do not pay a wake-up each. The words that change during a
// run sit on separate cache lines, and the pool never has more threads than the CPUs the
// process may use (affinity mask and cgroup quota) unless asked to.
#include "backend/cpu/thread_pool.h"

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <chrono>
#include <fstream>
#include <sstream>

#include "base/error.h"

namespace ft {

namespace {
// The i-th CPU (mod their count) of this process's affinity mask; -1 when it cannot be read.
int nth_allowed_cpu(int i) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return -1;
  const int n = CPU_COUNT(&set);
  if (n <= 0) return -1;
  i %= n;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set) && i-- == 0) return c;
  return -1;
}

void pin_to(int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);  // best effort
}

inline void cpu_relax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Polls until done() or spin_ns have passed; true when done() held. The first few
// microseconds poll with PAUSE; after that each poll yields the CPU first, so a thread this
// one waits for (or another process's) that shares the core gets to run: pure PAUSE polling
// on a busy machine makes every fork-join wait out scheduler time slices.
template <class Done>
bool spin_until(Done done, int64_t spin_ns) {
  if (done()) return true;
  if (spin_ns <= 0) return false;
  const int64_t start = now_ns(), end = start + spin_ns, tight = start + 20'000;
  for (;;) {
    for (int i = 0; i < 32; ++i) {
      cpu_relax();
      if (done()) return true;
    }
    const int64_t t = now_ns();
    if (t > end) return done();
    if (t > tight) sched_yield();
  }
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  if (f) s << f.rdbuf();
  return s.str();
}

int affinity_count() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

// Smallest CPU quota over the cgroup (v2 or v1) files this process can see; 0 when none.
int cgroup_quota_cpus() {
  int best = 0;
  auto take = [&](int c) {
    if (c > 0 && (best == 0 || c < best)) best = c;
  };
  take(cgroup_cpu_limit(read_file("/sys/fs/cgroup/cpu.max")));
  // cgroup v2 without a namespace: the process's own group under the mount.
  std::istringstream groups(read_file("/proc/self/cgroup"));
  for (std::string line; std::getline(groups, line);)
    if (line.rfind("0::", 0) == 0 && line.size() > 4)
      take(cgroup_cpu_limit(read_file("/sys/fs/cgroup" + line.substr(3) + "/cpu.max")));
  for (const char* dir : {"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"}) {
    const std::string q = read_file(std::string(dir) + "/cpu.cfs_quota_us");
    const std::string p = read_file(std::string(dir) + "/cpu.cfs_period_us");
    if (!q.empty() && !p.empty()) take(cgroup_cpu_limit(std::atoll(q.c_str()), std::atoll(p.c_str())));
  }
  return best;
}
}  // namespace

int cgroup_cpu_limit(int64_t quota_us, int64_t period_us) {
  if (quota_us <= 0 || period_us <= 0) return 0;
  return static_cast<int>((quota_us + period_us - 1) / period_us);
}

int cgroup_cpu_limit(const std::string& cpu_max) {
  std::istringstream s(cpu_max);
  std::string quota;
  int64_t period = 100000;
  if (!(s >> quota) || quota == "max") return 0;
  s >> period;
  return cgroup_cpu_limit(std::atoll(quota.c_str()), period);
}

int cpu_count() {
  static const int n = [] {
    const int a = affinity_count(), q = cgroup_quota_cpus();
    return std::max(1, q > 0 ? std::min(a, q) : a);
  }();
  return n;
}

ThreadPool::ThreadPool(int n_threads, bool pin)
    : n_threads_(n_threads > 0 ? n_threads : cpu_count()),
      spin_ns_(n_threads_ <= cpu_count() ? 300'000 : 0) {
  // Pinning is opt-in (FT_PIN_THREADS=1): two processes whose pools pin to the same CPUs
  // (a CPU reference server next to a GPU one, say) stall each other's fork-joins for whole
  // time slices, while unpinned threads migrate to idle CPUs. Pin only when each thread gets
  // a CPU of its own and the mask is not a quota's fiction.
  const char* env = std::getenv("FT_PIN_THREADS");
  const bool do_pin = pin && env && std::atoi(env) == 1 && n_threads_ <= cpu_count() &&
                      cpu_count() == affinity_count();
  if (do_pin) pin_to(nth_allowed_cpu(0));
  for (int i = 1; i < n_threads_; ++i)
    workers_.emplace_back([this, i, do_pin] {
      if (do_pin) pin_to(nth_allowed_cpu(i));
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
    const int64_t b = next_.fetch_add(grain_, std::memory_order_relaxed);
    if (b >= n_) break;
    (*fn_)(b, std::min(n_, b + grain_));
  }
}

void ThreadPool::worker_loop(int index) {
  uint32_t seen = 0;
  for (;;) {
    if (!spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; }, spin_ns_)) {
      generation_.wait(seen, std::memory_order_acquire);
      continue;
    }
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load()) return;
    work(index);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

// Publishes the job (fields set by the caller), runs the caller's share, waits for the rest.
void ThreadPool::start_and_join() {
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();  // a syscall only when some worker sleeps
  work(0);
  while (!spin_until([&] { return pending_.load(std::memory_order_acquire) == 0; }, spin_ns_))
    if (const int p = pending_.load(std::memory_order_acquire); p != 0)
      pending_.wait(p, std::memory_order_acquire);
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
  start_and_join();
}

void ThreadPool::run_on_all(const std::function<void(int)>& fn) {
  if (n_threads_ == 1) {
    fn(0);
    return;
  }
  all_fn_ = &fn;
  start_and_join();
  all_fn_ = nullptr;
}

}  // namespace ft
