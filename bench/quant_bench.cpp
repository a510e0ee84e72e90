// Quantized GEMV bandwidth: ops::matmul (1 token) over ~1 GiB of weights per format (past
// the last-level cache) vs the machine's streaming read bandwidth with the same threads, plus a
// 64-token GEMM rate; prints a Markdown table. Each rate is given per wall second and per CPU
// second (process CPU time / threads), so a machine shared with other jobs still yields a
// meaningful ratio. --experts E instead streams E [rows, cols] matrices (an MoE layer's experts,
// 8 per matmul_grouped call, 1 token each); --rows fixes the row count of the one big matrix.
// Also prints the pool's fork-join latency and the CPU count it sized itself by.
// Usage: quant_bench [--mib 1024] [--cols 4096] [--rows 0] [--experts 0] [--threads 0]
//                    [--gemm 1] [--reps 5] [--formats Q4_K,Q8_0,...]   (FT_ISA=avx2|scalar to compare)
// "/ DRAM (paired)" is the median over --reps of GEMV / a streaming read timed just before it.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <stdlib.h>
#include <cstring>
#include <ctime>
#include <sched.h>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/quant_kernels.h"
#include "backend/cpu/thread_pool.h"
#include "base/timer.h"
#include "ops/ops.h"
#include "quant/quant.h"

namespace ft {
namespace {

double cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Wall and CPU-normalised seconds of one call.
struct Times {
  double wall, cpu;
};
template <class Fn>
Times timed(int threads, Fn fn) {
  const double c0 = cpu_seconds();
  Timer t;
  fn();
  return {t.seconds(), (cpu_seconds() - c0) / threads};
}

struct Rate {
  double wall = 0, cpu = 0;  // best of the repetitions
  void add(double amount, Times t) {
    wall = std::max(wall, amount / t.wall);
    cpu = std::max(cpu, amount / t.cpu);
  }
};

// Best-of-5 parallel streaming read (the same measure as ft bench cpu): one stream per task.
// Also with 4 interleaved streams per task, which keeps more cache misses in flight per core
// (a single stream is latency-bound on many-core Xeons); the larger of the two is the DRAM
// reference, so the GEMV percentages do not flatter the kernels.
Times read_once(ThreadPool& pool, const std::vector<float>& buf, bool four_streams) {
  const auto& k = cpu::kernels();
  const int64_t n = static_cast<int64_t>(buf.size()), chunk = 1 << 20;
  std::vector<uint64_t> sink(pool.size() * 8, 0);
  return timed(pool.size(), [&] {
      pool.run((n + chunk - 1) / chunk, 4, [&](int64_t b0, int64_t b1) {
        if (four_streams) {  // the task's range in 4 quarters read side by side, as integers
          const auto* w = reinterpret_cast<const uint64_t*>(buf.data() + b0 * chunk);
          const int64_t words = (std::min(n, b1 * chunk) - b0 * chunk) / 2, q = words / 4;
          uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
          for (int64_t i = 0; i < q; ++i) {
            a0 ^= w[i];
            a1 ^= w[q + i];
            a2 ^= w[2 * q + i];
            a3 ^= w[3 * q + i];
          }
          sink[8 * (b0 % pool.size())] += a0 ^ a1 ^ a2 ^ a3;
          return;
        }
        float s = 0;
        for (int64_t b = b0; b < b1; ++b) {
          const int64_t s0 = b * chunk, len = std::min(chunk, n - s0);
          s += k.dot(buf.data() + s0, buf.data() + s0, len);
        }
        sink[0] += static_cast<uint64_t>(s * 0.f);
      });
  });
}

Rate read_bandwidth(ThreadPool& pool, const std::vector<float>& buf, bool four_streams) {
  Rate best;
  for (int rep = 0; rep < 5; ++rep)
    best.add(static_cast<double>(buf.size() * sizeof(float)), read_once(pool, buf, four_streams));
  return best;
}

// Each GEMV repetition is paired with a streaming read just before it (4 streams per task, the
// larger measure here): on a shared host the DRAM rate drifts within seconds, so the median of
// the per-pair ratios is steadier than best GEMV over best read measured apart.
struct Paired {
  ThreadPool* pool;
  const std::vector<float>* buf;
  std::vector<double> ratios;
  template <class Fn>
  Times run(double amount, Fn fn) {
    const Times b = read_once(*pool, *buf, true);
    const Times t = timed(pool->size(), fn);
    ratios.push_back((amount / t.wall) / (static_cast<double>(buf->size() * sizeof(float)) / b.wall));
    return t;
  }
  double median() {
    if (ratios.empty()) return 0;
    std::sort(ratios.begin(), ratios.end());
    const size_t m = ratios.size() / 2;
    return ratios.size() % 2 ? ratios[m] : 0.5 * (ratios[m - 1] + ratios[m]);
  }
};

struct Result {
  Rate gemv, gemm;  // bytes/s; flop/s
  double paired = 0;  // median GEMV / DRAM over the paired repetitions
};

// Mean wall microseconds of one empty fork-join over every thread.
double fork_join_us(ThreadPool& pool) {
  std::vector<int64_t> hits(pool.size() * 16);
  const int reps = 20000;
  Timer t;
  for (int r = 0; r < reps; ++r)
    pool.run(pool.size(), 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[i * 16]++;
    });
  return 1e6 * t.seconds() / reps;
}

struct Options {
  size_t mib = 1024;
  int64_t cols = 4096, rows = 0, experts = 0;
  int threads = 0;
  bool gemm = true;
  int reps = 5;  // GEMV repetitions, each paired with a DRAM read (Paired)
  std::string formats;
  const std::vector<float>* read_buf = nullptr;
};

// A [rows, cols] matrix of type t: 128 quantized random rows tiled over ~mib MiB.
Result bench_type(ThreadPool& pool, quant::QuantType t, const Options& o) {
  const int64_t cols = o.cols;
  const bool fp8 = t == quant::QuantType::FP8_E4M3_B128;
  const size_t rb = fp8 ? static_cast<size_t>(cols) : quant::row_bytes(t, cols);
  if (o.experts < 0) {  // auto: as many experts as fill --mib
    Options a = o;
    a.experts = std::max<int64_t>(8, static_cast<int64_t>((o.mib << 20) / (rb * o.rows)));
    return bench_type(pool, t, a);
  }
  // experts: E matrices of o.rows rows, stored back to back
  const int64_t total_rows =
      o.experts > 0 ? o.experts * o.rows
                    : (o.rows > 0 ? o.rows : static_cast<int64_t>((o.mib << 20) / rb) / 128 * 128);
  const int64_t rows = std::max<int64_t>(128, (total_rows + 127) / 128 * 128);
  std::vector<uint8_t> w(rb * rows);
  std::vector<float> scales;
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.f, 0.05f);
  {
    const int64_t seed_rows = 128;
    std::vector<float> f(seed_rows * cols);
    for (auto& v : f) v = nd(rng);
    std::vector<uint8_t> tile(rb * seed_rows);
    std::vector<float> tile_s(quant::fp8_b128_scale_count(seed_rows, cols));
    if (fp8)
      quant::quantize_fp8_b128(f.data(), seed_rows, cols, tile.data(), tile_s.data());
    else
      for (int64_t r = 0; r < seed_rows; ++r)
        quant::quantize_row(t, f.data() + r * cols, tile.data() + r * rb, cols);
    for (int64_t r = 0; r < rows; r += seed_rows)
      std::memcpy(w.data() + r * rb, tile.data(), rb * std::min(seed_rows, rows - r));
    if (fp8)
      for (int64_t r = 0; r < rows; r += 128)
        scales.insert(scales.end(), tile_s.begin(), tile_s.begin() + (cols + 127) / 128);
  }
  TensorView v;
  v.dtype = quant::to_dtype(t);
  v.ndim = 2;
  v.shape = {rows, cols, 1, 1};
  v.data = w.data();
  v.scale_inv = fp8 ? scales.data() : nullptr;
  v.name = std::string(quant::name(t));
  std::vector<float> x(64 * cols), y(64 * rows);
  for (auto& e : x) e = nd(rng);
  Result r;
  if (o.experts > 0) {  // 8 experts per grouped call, 1 token each, over every expert
    std::vector<TensorView> ev(o.experts, v);
    for (int64_t e = 0; e < o.experts; ++e) {
      ev[e].shape[0] = o.rows;
      ev[e].data = w.data() + e * o.rows * rb;
      ev[e].scale_inv = fp8 ? scales.data() + e * (o.rows / 128) * ((cols + 127) / 128) : nullptr;
    }
    auto layer = [&] {
      for (int64_t e0 = 0; e0 < o.experts; e0 += 8) {
        std::vector<ops::GemmProblem> ps;
        for (int64_t e = e0; e < std::min(o.experts, e0 + 8); ++e)
          ps.push_back({x.data(), 1, &ev[e], y.data() + (e - e0) * o.rows});
        ops::matmul_grouped(pool, ps);
      }
    };
    layer();
    Paired pr{&pool, o.read_buf, {}};
    const double amount = static_cast<double>(o.experts * o.rows * rb);
    for (int rep = 0; rep < o.reps; ++rep) r.gemv.add(amount, pr.run(amount, layer));
    r.paired = pr.median();
    return r;
  }
  ops::matmul(pool, x.data(), 1, v, y.data());  // warm: page in, scratch
  {
    Paired pr{&pool, o.read_buf, {}};
    const double amount = static_cast<double>(w.size());
    for (int rep = 0; rep < o.reps; ++rep)
      r.gemv.add(amount, pr.run(amount, [&] { ops::matmul(pool, x.data(), 1, v, y.data()); }));
    r.paired = pr.median();
  }
  if (!o.gemm) return r;
  // batch of 64 tokens over the first 1/8 of the rows (a prefill-shaped GEMM)
  TensorView part = v;
  part.shape[0] = std::max<int64_t>(128, rows / 8 / 128 * 128);
  for (int rep = 0; rep < 2; ++rep)
    r.gemm.add(2.0 * 64 * part.shape[0] * cols,
               timed(pool.size(), [&] { ops::matmul(pool, x.data(), 64, part, y.data()); }));
  return r;
}

int run(int argc, char** argv) {
  Options o;
  auto usage = [] {
    std::fprintf(stderr,
                 "usage: quant_bench [--mib 1024] [--cols 4096] [--rows 0] [--experts 0|N|auto] "
                 "[--threads 0] [--gemm 1] [--reps 5] [--formats Q4_K,Q8_0,...]\n");
    return 1;
  };
  if (argc % 2 == 0) return usage();  // a flag without its value, --help
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--mib") o.mib = std::strtoull(argv[i + 1], nullptr, 10);
    else if (a == "--cols") o.cols = std::strtoll(argv[i + 1], nullptr, 10);
    else if (a == "--rows") o.rows = std::strtoll(argv[i + 1], nullptr, 10);
    else if (a == "--experts")
      o.experts = std::string(argv[i + 1]) == "auto" ? -1 : std::strtoll(argv[i + 1], nullptr, 10);
    else if (a == "--threads") o.threads = std::atoi(argv[i + 1]);
    else if (a == "--gemm") o.gemm = std::atoi(argv[i + 1]) != 0;
    else if (a == "--reps") o.reps = std::max(1, std::atoi(argv[i + 1]));
    else if (a == "--formats") o.formats = "," + std::string(argv[i + 1]) + ",";
    else
      return usage();
  }
  if (o.experts != 0 && o.rows <= 0) o.rows = 768;
  const int64_t cols = o.cols;
  const size_t mib = o.mib;
  const int threads = o.threads;
  cpu_set_t aff;
  const int aff_n = sched_getaffinity(0, sizeof(aff), &aff) == 0 ? CPU_COUNT(&aff) : -1;
  double load[1] = {0};
  std::printf("CPUs: %d in the affinity mask, cpu_count() %d (cgroup quota honoured), load "
              "average %.1f (other jobs contend when it exceeds the threads: trust the CPU "
              "columns then)\n",
              aff_n, cpu_count(), getloadavg(load, 1) == 1 ? load[0] : -1.0);
  ThreadPool pool(threads);
  const std::vector<float> read_buf((size_t{1} << 30) / sizeof(float), 1.f);
  o.read_buf = &read_buf;
  const Rate bw1 = read_bandwidth(pool, read_buf, false);
  const Rate bw4 = read_bandwidth(pool, read_buf, true);
  const Rate bw{std::max(bw1.wall, bw4.wall), std::max(bw1.cpu, bw4.cpu)};
  std::printf("kernels: %s (quant table %s), %d threads, fork-join %.2f us\n", cpu::kernels().isa,
              cpu::quant_kernels().isa, pool.size(), fork_join_us(pool));
  if (o.experts != 0)
    std::printf("%s experts of [%lld, %lld], 8 per grouped matmul, 1 token\n",
                o.experts < 0 ? "--mib worth of" : std::to_string(o.experts).c_str(),
                (long long)o.rows, (long long)cols);
  else if (o.rows > 0)
    std::printf("matrix [%lld, %lld]\n", (long long)o.rows, (long long)cols);
  else
    std::printf("%zu MiB per matrix, %lld columns\n", mib, (long long)cols);
  std::printf("machine read bandwidth (streaming 1 GiB): %.1f GB/s per wall second, %.1f GB/s per "
              "CPU second (1 stream per task %.1f / %.1f, 4 streams %.1f / %.1f)\n\n",
              bw.wall / 1e9, bw.cpu / 1e9, bw1.wall / 1e9, bw1.cpu / 1e9, bw4.wall / 1e9,
              bw4.cpu / 1e9);
  std::printf("| format | bits/weight | GEMV GB/s (wall) | / DRAM (wall) | GEMV GB/s (CPU) | / DRAM "
              "(CPU) | Gweights/s (CPU) | 64-token GEMM GFLOP/s (CPU) | / DRAM (paired) |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (quant::QuantType t : quant::all_types()) {
    if (t == quant::QuantType::F16) continue;
    if (!o.formats.empty() && o.formats.find("," + std::string(quant::name(t)) + ",") == std::string::npos)
      continue;
    const Result r = bench_type(pool, t, o);
    const double bits = t == quant::QuantType::FP8_E4M3_B128
                            ? 8.0
                            : 8.0 * quant::block_bytes(t) / quant::block_elems(t);
    std::printf("| %s | %.2f | %.1f | %.0f%% | %.1f | %.0f%% | %.2f | %.1f | %.0f%% |\n",
                std::string(quant::name(t)).c_str(), bits, r.gemv.wall / 1e9,
                100.0 * r.gemv.wall / bw.wall, r.gemv.cpu / 1e9, 100.0 * r.gemv.cpu / bw.cpu,
                r.gemv.cpu * 8 / bits / 1e9, r.gemm.cpu / 1e9, 100.0 * r.paired);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace ft

int main(int argc, char** argv) { return ft::run(argc, argv); }
