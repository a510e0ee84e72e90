// Where a decode GEMV's time goes (cuda_validate tests/fixtures 0 overhead): bf16 [rows, 2048]
// one-token GEMVs replayed from one captured graph (PDL on, as decode's steps run), for matrices
// of 4 KiB to 256 MiB, each from DRAM (launches cycle through copies totalling >= 512 MB, past
// the 60 MB L2; at most 4096 copies, so the 1-row matrices stay in L2) and, up to 32 MB, from
// L2 (the same matrix every launch). A least-squares line time = a + bytes / b over the DRAM
// rows splits a kernel's fixed cost a (launch, ramp, tail) from its streaming rate b; decode's
// six kernels per layer pay a each.
#include <fmt/format.h>

#include "cuda_checks.h"

namespace ft::cuda_checks {

namespace {
// Microseconds per launch of `reps` GEMVs over the matrices w[i % w.size()] (graph replay).
double graph_us(const std::vector<cuda::DeviceBuffer>& w, int64_t rows, int64_t cols,
                const cuda::DeviceBuffer& x, const cuda::DeviceBuffer& y, int reps) {
  return 1e6 * graph_seconds_per_launch(reps, [&](int r) {
           const cuda::DeviceMatrix m{
               .data = w[r % w.size()].data(), .dtype = DType::BF16, .rows = rows, .cols = cols};
           cuda::gemv(x.as<float>(), 1, m, y.as<float>());
         });
}
}  // namespace

std::string gemv_overhead_benchmark() {
  constexpr int64_t cols = 2048;
  const int64_t row_counts[] = {1, 128, 512, 2048, 5120, 8192, 16384, 65536};
  std::string s =
      "| bf16 GEMV [rows, 2048], n = 1, graph replay | MB | DRAM us | DRAM GB/s | L2 us |\n"
      "|---|---|---|---|---|\n";
  auto x = up(randv(cols, 7));
  std::vector<double> xs, ts;  // DRAM rows: bytes, us
  for (const int64_t rows : row_counts) {
    const size_t bytes = static_cast<size_t>(rows * cols * 2);
    const size_t copies = std::max<size_t>(2, (size_t{512} << 20) / bytes + 1);
    std::vector<cuda::DeviceBuffer> w;
    for (size_t i = 0; i < std::min<size_t>(copies, 4096); ++i) {
      w.emplace_back(bytes);
      cuda::memset_async(w.back().data(), 0x11, bytes);
    }
    cuda::DeviceBuffer y(rows * sizeof(float));
    const int reps = static_cast<int>(std::clamp<size_t>(w.size() * 2, 64, 4096));
    const double dram = graph_us(w, rows, cols, x, y, reps);
    std::string l2 = "-";
    if (bytes <= (size_t{32} << 20)) {
      std::vector<cuda::DeviceBuffer> same;
      same.push_back(std::move(w[0]));
      l2 = fmt::format("{:.2f}", graph_us(same, rows, cols, x, y, 256));
    }
    xs.push_back(static_cast<double>(bytes));
    ts.push_back(dram);
    s += fmt::format("| {} | {:.3f} | {:.2f} | {:.0f} | {} |\n", rows, bytes / 1e6, dram,
                     bytes / dram / 1e3, l2);
  }
  // Least squares over the DRAM rows: us = a + bytes * c.
  const double n = static_cast<double>(xs.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < xs.size(); ++i)
    sx += xs[i], sy += ts[i], sxx += xs[i] * xs[i], sxy += xs[i] * ts[i];
  const double c = (n * sxy - sx * sy) / (n * sxx - sx * sx), a = (sy - c * sx) / n;
  s += fmt::format("fit: {:.2f} us fixed per GEMV + bytes at {:.0f} GB/s\n", a, 1e-3 / c);
  return s;
}

}  // namespace ft::cuda_checks
