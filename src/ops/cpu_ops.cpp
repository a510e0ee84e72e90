// CPU implementation of ops.h over the ISA-dispatched kernel table.
#include <algorithm>
#include <cmath>
#include <tuple>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/quant_kernels.h"
#include "base/error.h"
#include "base/half.h"
#include "ops/ops.h"

namespace ft::ops {

namespace {
// Rows per task: small enough to balance threads, a multiple of the 4-row micro-kernel.
int64_t row_block(int64_t rows, int64_t n, int threads) {
  int64_t b = std::max<int64_t>(16, rows / (threads * 8));
  if (n > 64) b = std::max<int64_t>(b, 64);
  return (b + 3) & ~int64_t{3};
}

// Int8 activations (quant_kernels.h) for block-quantized weights: quantized once per call,
// before the row tasks, into per-thread buffers that only grow.
struct QuantActs {
  std::vector<int8_t> q;
  std::vector<float> d, s;
  std::vector<size_t> off;  // per problem: element offset into q (d, s at off / 16)
  std::vector<size_t> use;  // the offset at() reads: off, or an earlier problem's with the same x

  // Reserves space for each (x, n, w) problem with a block-quantized w, then quantizes.
  template <class Get>
  void prepare(ThreadPool& pool, size_t count, Get get) {
    off.assign(count + 1, 0);
    use.resize(count);
    for (size_t p = 0; p < count; ++p) {
      const auto [x, n, w] = get(p);
      off[p + 1] = off[p] + (is_block_quant(*w) ? static_cast<size_t>(n * w->shape[1]) : 0);
    }
    std::copy_n(off.begin(), count, use.begin());
    if (off[count] == 0) return;
    if (q.size() < off[count]) {
      q.resize(off[count]);
      d.resize(off[count] / 16);
      s.resize(off[count] / 16);
    }
    if (count == 1) {  // one matmul: split its tokens across the pool
      const auto [x, n, w] = get(0);
      const int64_t k = w->shape[1];
      pool.run(n, std::max<int64_t>(1, 16384 / k), [&](int64_t t0, int64_t t1) {
        cpu::quantize_acts(x + t0 * k, t1 - t0, k, q.data() + t0 * k, d.data() + t0 * k / 16,
                           s.data() + t0 * k / 16);
      });
      return;
    }
    // Problems sharing their input (an MoE layer's gate/up experts) reuse its first quantization.
    // A decode step's few tokens are quantized on the calling thread: a fork-join would cost
    // more than the work.
    auto one = [&](int64_t p) {
      const auto [x, n, w] = get(p);
      if (!is_block_quant(*w)) return;
      for (int64_t e = 0; e < p; ++e)
        if (const auto [xe, ne, we] = get(e);
            xe == x && ne == n && is_block_quant(*we) && we->shape[1] == w->shape[1]) {
          use[p] = use[e];
          return;
        }
      const size_t o = off[p];
      cpu::quantize_acts(x, n, w->shape[1], q.data() + o, d.data() + o / 16, s.data() + o / 16);
    };
    if (off[count] <= k_serial_quant_elems) {
      for (size_t p = 0; p < count; ++p) one(static_cast<int64_t>(p));
      return;
    }
    pool.run(static_cast<int64_t>(count), 1, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        const auto [x, n, w] = get(p);
        if (!is_block_quant(*w)) continue;
        const size_t o = off[p];
        cpu::quantize_acts(x, n, w->shape[1], q.data() + o, d.data() + o / 16, s.data() + o / 16);
      }
    });
  }
  static constexpr size_t k_serial_quant_elems = 65536;
  cpu::QActs at(size_t p) const {
    const size_t o = use[p];
    return {q.data() + o, d.data() + o / 16, s.data() + o / 16};
  }
  static bool is_block_quant(const TensorView& w) {
    return dtype_is_quant(w.dtype) && w.dtype != DType::F8_E4M3_B128;
  }
};
QuantActs& quant_acts() {
  thread_local QuantActs a;
  return a;
}

void gemm_rows(const float* x, const cpu::QActs& qx, int64_t n, const TensorView& w, int64_t r0,
               int64_t r1, float* y) {
  const auto& k = cpu::kernels();
  const int64_t cols = w.shape[1], rows = w.shape[0];
  if (dtype_is_quant(w.dtype)) {
    const auto& qk = cpu::quant_kernels();
    if (w.dtype == DType::F8_E4M3_B128) {
      FT_CHECK(w.scale_inv, "matmul: {} is F8_E4M3_B128 without scale_inv", w.name);
      qk.gemm_fp8(x, n, cols, w.as<uint8_t>(), w.scale_inv, r0, r1, y, rows);
    } else {
      const float post = w.dtype == DType::NVFP4 ? w.global_scale : 1.f;
      qk.for_dtype(w.dtype)(qx, n, cols, w.as<uint8_t>(), dtype_row_bytes(w.dtype, cols), r0, r1,
                            post, y, rows);
    }
    return;
  }
  switch (w.dtype) {
    case DType::F32: k.gemm_f32(x, n, cols, w.as<float>(), r0, r1, y, rows); break;
    case DType::BF16:
      k.gemm_bf16(x, n, cols, static_cast<const cpu::bf16_t*>(w.data), r0, r1, y, rows);
      break;
    case DType::F16:
      k.gemm_f16(x, n, cols, static_cast<const cpu::f16_t*>(w.data), r0, r1, y, rows);
      break;
    default: FT_CHECK(false, "matmul: unsupported weight dtype {}", dtype_name(w.dtype));
  }
}
}  // namespace

void matmul(ThreadPool& pool, const float* x, int64_t n, const TensorView& w, float* y,
            const float* bias) {
  FT_CHECK(w.ndim == 2, "matmul: {} must be 2-D", w.name);
  const int64_t rows = w.shape[0];
  const int64_t block = row_block(rows, n, pool.size());
  QuantActs& qa = quant_acts();
  qa.prepare(pool, 1, [&](size_t) { return std::tuple{x, n, &w}; });
  const cpu::QActs qx = qa.at(0);
  pool.run((rows + block - 1) / block, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      int64_t r0 = b * block, r1 = std::min(rows, r0 + block);
      gemm_rows(x, qx, n, w, r0, r1, y);
      if (bias)
        for (int64_t t = 0; t < n; ++t)
          for (int64_t r = r0; r < r1; ++r) y[t * rows + r] += bias[r];
    }
  });
}

void matmul_grouped(ThreadPool& pool, std::span<const GemmProblem> problems) {
  struct Task {
    int32_t problem;
    int64_t r0, r1;
  };
  std::vector<Task> tasks;
  // Blocks sized by the rows of all problems together: a decode step's 8 small experts make
  // ~8 tasks per thread in all, not 8 per expert (each task pays a fork-join share and its
  // streams' prefetch ramp).
  int64_t all_rows = 0, max_n = 1;
  for (const GemmProblem& p : problems) {
    all_rows += p.w->shape[0];
    max_n = std::max(max_n, p.n);
  }
  const int64_t all_block = row_block(all_rows, max_n, pool.size());
  for (size_t p = 0; p < problems.size(); ++p) {
    const TensorView& w = *problems[p].w;
    FT_CHECK(w.ndim == 2, "matmul_grouped: {} must be 2-D", w.name);
    const int64_t rows = w.shape[0], block = std::max(row_block(rows, problems[p].n, pool.size()),
                                                      std::min(rows, all_block));
    for (int64_t r = 0; r < rows; r += block)
      tasks.push_back({static_cast<int32_t>(p), r, std::min(rows, r + block)});
  }
  QuantActs& qa = quant_acts();
  qa.prepare(pool, problems.size(),
             [&](size_t p) { return std::tuple{problems[p].x, problems[p].n, problems[p].w}; });
  pool.run(static_cast<int64_t>(tasks.size()), 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const Task& t = tasks[b];
      const GemmProblem& p = problems[t.problem];
      gemm_rows(p.x, qa.at(t.problem), p.n, *p.w, t.r0, t.r1, p.y);
    }
  });
}

void rmsnorm(ThreadPool& pool, const float* x, int64_t n, int64_t dim, const float* w, float eps,
             float* y) {
  const auto& k = cpu::kernels();
  auto rows = [&](int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i) k.rmsnorm(x + i * dim, w, eps, dim, y + i * dim);
  };
  if (n * dim < 65536)
    rows(0, n);
  else
    pool.run(n, std::max<int64_t>(1, 16384 / dim), rows);
}

void silu_mul(ThreadPool& pool, const float* g, const float* u, int64_t count, float* y) {
  const auto& k = cpu::kernels();
  constexpr int64_t chunk = 16384;
  if (count <= chunk) {
    k.silu_mul(g, u, count, y);
    return;
  }
  pool.run((count + chunk - 1) / chunk, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      int64_t s = b * chunk, e = std::min(count, s + chunk);
      k.silu_mul(g + s, u + s, e - s, y + s);
    }
  });
}

void swiglu_oai(ThreadPool& pool, const float* g, const float* u, int64_t count, float alpha,
                float limit, float* y) {
  constexpr int64_t chunk = 16384;
  pool.run((count + chunk - 1) / chunk, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t i = b0 * chunk, e = std::min(count, b1 * chunk); i < e; ++i) {
      const float gc = std::min(g[i], limit), uc = std::clamp(u[i], -limit, limit);
      y[i] = gc / (1.f + std::exp(-alpha * gc)) * (uc + 1.f);
    }
  });
}

void embed(const TensorView& table, const int32_t* ids, int64_t n, float* out) {
  const int64_t dim = table.shape[1];
  for (int64_t i = 0; i < n; ++i) {
    FT_CHECK(ids[i] >= 0 && ids[i] < table.shape[0], "token id {} out of range", ids[i]);
    float* o = out + i * dim;
    const size_t row = static_cast<size_t>(ids[i]) * dim;
    switch (table.dtype) {
      case DType::F32: std::copy_n(table.as<float>() + row, dim, o); break;
      case DType::BF16:
        for (int64_t j = 0; j < dim; ++j) o[j] = bf16_to_f32(table.as<uint16_t>()[row + j]);
        break;
      case DType::F16:
        for (int64_t j = 0; j < dim; ++j) o[j] = f16_to_f32(table.as<uint16_t>()[row + j]);
        break;
      default: FT_CHECK(false, "embed: unsupported dtype");
    }
  }
}

}  // namespace ft::ops
