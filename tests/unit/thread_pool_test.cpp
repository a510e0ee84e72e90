// ThreadPool sizing (cgroup CPU quota parsing, cpu_count) and fork-join correctness when the
// pool pins (FT_PIN_THREADS=1), when it does not, when it oversubscribes the CPUs (no
// polling), and across idle gaps (futex sleeps).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <chrono>
#include <thread>
#include <vector>

#include "backend/cpu/thread_pool.h"

namespace ft {
namespace {

TEST(ThreadPoolSizing, CgroupQuotaParsing) {
  EXPECT_EQ(cgroup_cpu_limit("max 100000\n"), 0);
  EXPECT_EQ(cgroup_cpu_limit("400000 100000\n"), 4);
  EXPECT_EQ(cgroup_cpu_limit("150000 100000"), 2);  // rounded up
  EXPECT_EQ(cgroup_cpu_limit("1600000 100000"), 16);
  EXPECT_EQ(cgroup_cpu_limit("50000"), 1);  // period defaults to 100 ms
  EXPECT_EQ(cgroup_cpu_limit(""), 0);
  EXPECT_EQ(cgroup_cpu_limit(-1, 100000), 0);  // v1: no quota
  EXPECT_EQ(cgroup_cpu_limit(250000, 100000), 3);
  EXPECT_EQ(cgroup_cpu_limit(100000, 0), 0);
}

TEST(ThreadPoolSizing, CpuCountIsPositiveAndTheDefault) {
  EXPECT_GE(cpu_count(), 1);
  ThreadPool pool;
  EXPECT_EQ(pool.size(), cpu_count());
}

void check_runs(ThreadPool& pool) {
  for (int64_t n : {1, 5, 64, 1000}) {
    std::vector<std::atomic<int>> hits(n);
    for (int rep = 0; rep < 50; ++rep)
      pool.run(n, 3, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[i]++;
      });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 50) << n;
  }
  std::vector<std::atomic<int>> seen(pool.size());
  pool.run_on_all([&](int i) { seen[i]++; });
  for (auto& s : seen) EXPECT_EQ(s.load(), 1);
}

TEST(ThreadPool, PinnedPoolRunsEveryItem) {
  setenv("FT_PIN_THREADS", "1", 1);  // pinning is opt-in
  ThreadPool pool(cpu_count(), true);
  unsetenv("FT_PIN_THREADS");
  check_runs(pool);
}

TEST(ThreadPool, UnpinnedPoolRunsEveryItem) {
  ThreadPool pool(cpu_count() + 1, true);  // one more thread than CPUs, none pinned
  check_runs(pool);
}

TEST(ThreadPool, OversubscribedPoolSleepsInsteadOfPolling) {
  ThreadPool pool(2 * cpu_count() + 1, true);  // more threads than CPUs: futex waits only
  check_runs(pool);
}

TEST(ThreadPool, IdleGapsBetweenRuns) {
  ThreadPool pool(3, false);
  std::atomic<int64_t> sum{0};
  for (int r = 0; r < 20; ++r) {
    pool.run(6, 1, [&](int64_t b, int64_t e) { sum += e - b; });
    if (r % 5 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));  // workers sleep
  }
  EXPECT_EQ(sum.load(), 120);
}

}  // namespace
}  // namespace ft
