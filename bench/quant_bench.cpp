// Quantized GEMV bandwidth: ops::matmul (1 token) over ~1 GiB of weights per format (past
// the last-level cache) vs the machine's streaming read bandwidth, plus a 64-token GEMM rate;
// prints a Markdown table. Each rate is given per wall second and per CPU second (process CPU
// time / threads), so a machine shared with other jobs still yields a meaningful ratio.
// Usage: quant_bench [--mib 1024] [--cols 4096] [--threads 0]   (FT_ISA=avx2|scalar to compare)
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
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

// Best-of-5 parallel streaming read (the same measure as ft bench cpu).
Rate read_bandwidth(ThreadPool& pool, size_t bytes) {
  std::vector<float> buf(bytes / sizeof(float), 1.f);
  const auto& k = cpu::kernels();
  const int64_t n = static_cast<int64_t>(buf.size()), chunk = 1 << 20;
  Rate best;
  for (int rep = 0; rep < 5; ++rep) {
    std::vector<float> sink(pool.size(), 0.f);
    best.add(static_cast<double>(bytes), timed(pool.size(), [&] {
      pool.run((n + chunk - 1) / chunk, 4, [&](int64_t b0, int64_t b1) {
        float s = 0;
        for (int64_t b = b0; b < b1; ++b) {
          const int64_t s0 = b * chunk, len = std::min(chunk, n - s0);
          s += k.dot(buf.data() + s0, buf.data() + s0, len);
        }
        sink[0] += s * 0.f;
      });
    }));
  }
  return best;
}

struct Result {
  Rate gemv, gemm;  // bytes/s; flop/s
};

// A [rows, cols] matrix of type t: 128 quantized random rows tiled over ~mib MiB.
Result bench_type(ThreadPool& pool, quant::QuantType t, int64_t cols, size_t mib) {
  const bool fp8 = t == quant::QuantType::FP8_E4M3_B128;
  const size_t rb = fp8 ? static_cast<size_t>(cols) : quant::row_bytes(t, cols);
  const int64_t rows = std::max<int64_t>(128, static_cast<int64_t>((mib << 20) / rb) / 128 * 128);
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
  ops::matmul(pool, x.data(), 1, v, y.data());  // warm: page in, scratch
  for (int rep = 0; rep < 5; ++rep)
    r.gemv.add(static_cast<double>(w.size()),
               timed(pool.size(), [&] { ops::matmul(pool, x.data(), 1, v, y.data()); }));
  // batch of 64 tokens over the first 1/8 of the rows (a prefill-shaped GEMM)
  TensorView part = v;
  part.shape[0] = std::max<int64_t>(128, rows / 8 / 128 * 128);
  for (int rep = 0; rep < 2; ++rep)
    r.gemm.add(2.0 * 64 * part.shape[0] * cols,
               timed(pool.size(), [&] { ops::matmul(pool, x.data(), 64, part, y.data()); }));
  return r;
}

int run(int argc, char** argv) {
  size_t mib = 1024;
  int64_t cols = 4096;
  int threads = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--mib") mib = std::strtoull(argv[i + 1], nullptr, 10);
    else if (a == "--cols") cols = std::strtoll(argv[i + 1], nullptr, 10);
    else if (a == "--threads") threads = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: quant_bench [--mib 1024] [--cols 4096] [--threads 0]\n");
      return 1;
    }
  }
  ThreadPool pool(threads);
  const Rate bw = read_bandwidth(pool, size_t{1} << 30);
  std::printf("kernels: %s (quant table %s), %d threads, %zu MiB per matrix, %lld columns\n",
              cpu::kernels().isa, cpu::quant_kernels().isa, pool.size(), mib, (long long)cols);
  std::printf("machine read bandwidth (streaming 1 GiB): %.1f GB/s per wall second, %.1f GB/s per "
              "CPU second\n\n", bw.wall / 1e9, bw.cpu / 1e9);
  std::printf("| format | bits/weight | GEMV GB/s (wall) | / DRAM (wall) | GEMV GB/s (CPU) | / DRAM "
              "(CPU) | Gweights/s (CPU) | 64-token GEMM GFLOP/s (CPU) |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (quant::QuantType t : quant::all_types()) {
    if (t == quant::QuantType::F16) continue;
    const Result r = bench_type(pool, t, cols, mib);
    const double bits = t == quant::QuantType::FP8_E4M3_B128
                            ? 8.0
                            : 8.0 * quant::block_bytes(t) / quant::block_elems(t);
    std::printf("| %s | %.2f | %.1f | %.0f%% | %.1f | %.0f%% | %.2f | %.1f |\n",
                std::string(quant::name(t)).c_str(), bits, r.gemv.wall / 1e9,
                100.0 * r.gemv.wall / bw.wall, r.gemv.cpu / 1e9, 100.0 * r.gemv.cpu / bw.cpu,
                r.gemv.cpu * 8 / bits / 1e9, r.gemm.cpu / 1e9);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace ft

int main(int argc, char** argv) { return ft::run(argc, argv); }
