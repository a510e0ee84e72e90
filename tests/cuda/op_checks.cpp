// Each CUDA op vs the CPU op (ops::, the scalar kernels, Rope, CpuExperts) on the same inputs.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <random>

#include "backend/cpu/kernels.h"
#include "backend/cuda/cuda_ops.h"
#include "base/half.h"
#include "cuda_checks.h"
#include "experts/experts.h"
#include "engine/sampler.h"
#include "model/cuda_transformer.h"
#include "model/rope.h"
#include "ops/ops.h"

namespace ft::cuda_checks {

namespace {
using cuda::DeviceBuffer;

// A host weight matrix in one dtype, its f32 values, and device copy.
struct Weights {
  DType dtype;
  int64_t rows, cols;
  std::vector<uint16_t> half;  // bf16/f16 bits
  std::vector<float> f;        // the values (exactly representable in dtype)
  TensorView view() const {
    TensorView t;
    t.dtype = dtype, t.ndim = 2, t.shape = {rows, cols, 1, 1};
    t.data = dtype == DType::F32 ? static_cast<const void*>(f.data()) : half.data();
    t.name = "w";
    return t;
  }
  size_t bytes() const { return f.size() * (dtype == DType::F32 ? 4 : 2); }
  const void* data() const { return view().data; }
};

Weights make_weights(DType dt, int64_t rows, int64_t cols, uint32_t seed, float scale = 1.f) {
  Weights w{dt, rows, cols, {}, randv(rows * cols, seed, scale)};
  if (dt != DType::F32) {
    w.half.resize(w.f.size());
    for (size_t i = 0; i < w.f.size(); ++i) {
      w.half[i] = dt == DType::BF16 ? f32_to_bf16(w.f[i]) : f32_to_f16(w.f[i]);
      w.f[i] = dt == DType::BF16 ? bf16_to_f32(w.half[i]) : f16_to_f32(w.half[i]);
    }
  }
  return w;
}

struct DeviceWeights {
  DeviceBuffer buf;
  cuda::DeviceMatrix m;
};
DeviceWeights upload(const Weights& w) {
  DeviceBuffer b(w.bytes());
  b.upload(w.data(), w.bytes());
  const void* p = b.data();
  return {std::move(b), {.data = p, .dtype = w.dtype, .rows = w.rows, .cols = w.cols}};
}

// Elementwise comparison that remembers the worst violation of |got - ref| <= tol.
struct Compare {
  std::string what;
  int64_t at = -1;
  float got = 0, ref = 0, tol = 0, ratio = 0;
  int64_t bad = 0;
  void add(int64_t i, float g, float r, float t) {
    const float d = std::fabs(g - r);
    if (d <= t) return;
    ++bad;
    const float q = std::isnan(d) ? INFINITY : d / t;
    if (at < 0 || q > ratio) at = i, got = g, ref = r, tol = t, ratio = q;
  }
  std::string result() const {
    if (bad == 0) return "";
    return fmt::format("{}: {} mismatches, worst at {}: got {} ref {} (tol {})\n", what, bad, at,
                       got, ref, tol);
  }
};

const char* dname(DType d) { return d == DType::F32 ? "f32" : d == DType::BF16 ? "bf16" : "f16"; }
constexpr DType k_dtypes[] = {DType::F32, DType::BF16, DType::F16};

// ---- checks
std::string check_embed() {
  std::string err;
  for (DType dt : k_dtypes)
    for (int64_t dim : {1, 7, 64, 300}) {
      const Weights w = make_weights(dt, 37, dim, static_cast<uint32_t>(dim));
      const std::vector<int32_t> ids = {0, 36, 5, 5, 17};
      const int64_t n = static_cast<int64_t>(ids.size());
      DeviceWeights dw = upload(w);
      DeviceBuffer dids = up(ids), dout(n * dim * sizeof(float));
      cuda::embed(dw.m, dids.as<int32_t>(), n, dout.as<float>());
      auto got = down(dout, n * dim);
      std::vector<float> ref(n * dim);
      ops::embed(w.view(), ids.data(), n, ref.data());
      Compare c{fmt::format("embed {} dim {}", dname(dt), dim)};
      for (int64_t i = 0; i < n * dim; ++i) c.add(i, got[i], ref[i], 0.f);
      err += c.result();
    }
  return err;
}

std::string check_rmsnorm() {
  std::string err;
  for (int64_t dim : {1, 16, 31, 64, 1000, 1024, 1025, 5000})
    for (int64_t n : {1, 5, 33}) {
      auto x = randv(n * dim, static_cast<uint32_t>(dim * 7 + n), 3.f), w = randv(dim, 9);
      DeviceBuffer dx = up(x), dw = up(w), dy(n * dim * sizeof(float));
      cuda::rmsnorm(dx.as<float>(), n, dim, dw.as<float>(), 1e-6f, dy.as<float>());
      cuda::rmsnorm(dx.as<float>(), n, dim, dw.as<float>(), 1e-6f, dx.as<float>());  // in place
      auto got = down(dy, n * dim), got_inplace = down(dx, n * dim);
      std::vector<float> ref(n * dim);
      for (int64_t i = 0; i < n; ++i)
        cpu::k_scalar_kernels.rmsnorm(&x[i * dim], w.data(), 1e-6f, dim, &ref[i * dim]);
      Compare c{fmt::format("rmsnorm [{}, {}]", n, dim)};
      for (int64_t i = 0; i < n * dim; ++i) {
        c.add(i, got[i], ref[i], 1e-5f * (1 + std::fabs(ref[i])));
        c.add(i, got_inplace[i], ref[i], 1e-5f * (1 + std::fabs(ref[i])));
      }
      err += c.result();
    }
  return err;
}

// argmax_rows vs the host's argmax (engine/sampler.cpp): random rows, rows of few distinct
// values (ties: the lowest index), -inf rows, NaNs (first or not), unaligned rows (odd widths).
std::string check_argmax() {
  std::string err;
  for (int64_t cols : {1, 3, 31, 4097, 151936, 151937})
    for (int64_t rows : {1, 3, 8})
      for (int kind = 0; kind < 5; ++kind) {
        auto x = randv(rows * cols, static_cast<uint32_t>(cols * 13 + rows * 5 + kind), 4.f);
        std::mt19937 rng(static_cast<uint32_t>(cols + kind));
        for (int64_t i = 0; i < rows * cols; ++i) {
          if (kind == 1) x[i] = std::round(x[i]);  // ~9 values: many ties
          if (kind == 2) x[i] = -INFINITY;
          if (kind == 3 && rng() % 7 == 0) x[i] = NAN;
          if (kind == 4) x[i] = i % cols == 0 || rng() % 3 == 0 ? NAN : std::round(x[i]);
        }
        DeviceBuffer dx = up(x), dout(rows * sizeof(int32_t));
        cuda::argmax_rows(dx.as<float>(), rows, cols, dout.as<int32_t>());
        std::vector<int32_t> got(rows);
        cuda::copy_to_host(got.data(), dout.data(), rows * sizeof(int32_t));
        for (int64_t r = 0; r < rows; ++r) {
          const int32_t want = ft::argmax(&x[r * cols], cols);
          if (got[r] != want)
            err += fmt::format("argmax [{}, {}] kind {} row {}: {} != host {}\n", rows, cols, kind,
                               r, got[r], want);
        }
      }
  return err;
}

std::string check_elementwise() {
  std::string err;
  for (int64_t count : {1, 255, 257, 100003}) {
    auto g = randv(count, 1, 4.f), u = randv(count, 2);
    DeviceBuffer dg = up(g), du = up(u), dy(count * sizeof(float));
    cuda::silu_mul(dg.as<float>(), du.as<float>(), count, dy.as<float>());
    auto got = down(dy, count);
    std::vector<float> ref(count);
    cpu::k_scalar_kernels.silu_mul(g.data(), u.data(), count, ref.data());
    Compare c{fmt::format("silu_mul {}", count)};
    for (int64_t i = 0; i < count; ++i) c.add(i, got[i], ref[i], 1e-5f * (1 + std::fabs(ref[i])));
    // x += y; then clamp to 1.5
    cuda::add_inplace(dg.as<float>(), du.as<float>(), count);
    auto sum = down(dg, count);
    cuda::clamp(dg.as<float>(), count, 1.5f);
    auto clamped = down(dg, count);
    Compare a{fmt::format("add/clamp {}", count)};
    for (int64_t i = 0; i < count; ++i) {
      a.add(i, sum[i], g[i] + u[i], 0.f);
      a.add(i, clamped[i], std::clamp(g[i] + u[i], -1.5f, 1.5f), 0.f);
    }
    err += c.result() + a.result();
  }
  const int64_t n = 7, rows = 13;
  auto y = randv(n * rows, 3), b = randv(rows, 4);
  DeviceBuffer dy = up(y), db = up(b);
  cuda::add_bias(dy.as<float>(), n, rows, db.as<float>());
  auto got = down(dy, n * rows);
  Compare c{"add_bias [7, 13]"};
  for (int64_t i = 0; i < n * rows; ++i) c.add(i, got[i], y[i] + b[i % rows], 0.f);
  return err + c.result();
}

std::string check_rope() {
  std::string err;
  struct Case {
    const char* name;
    RopeConfig cfg;
    int64_t head_dim;
  };
  RopeConfig neox, inter, partial, yarn, linear;
  inter.interleaved = true;
  partial.partial_rotary_factor = 0.5;
  partial.theta = 1e6;
  yarn.type = RopeConfig::Type::YARN, yarn.factor = 4, yarn.original_max_pos = 1024;
  yarn.theta = 50000;
  linear.type = RopeConfig::Type::LINEAR, linear.factor = 2;
  const Case cases[] = {{"neox", neox, 64},
                        {"interleaved", inter, 32},
                        {"partial", partial, 48},
                        {"yarn", yarn, 16},
                        {"linear", linear, 128},
                        {"partial-interleaved",
                         [] {
                           RopeConfig c;
                           c.interleaved = true;
                           c.partial_rotary_factor = 0.25;
                           return c;
                         }(),
                         64}};
  for (const Case& cs : cases) {
    const Rope rope(cs.cfg, cs.head_dim);
    const int64_t n = 5, heads = 3, pos0 = 1000, hd = cs.head_dim;
    auto x = randv(n * heads * hd, static_cast<uint32_t>(hd));
    std::vector<float> cos, sin;
    rope_tables(rope, pos0 + n, cos, sin);
    DeviceBuffer dx = up(x), dc = up(cos), ds = up(sin);
    cuda::rope({.x = dx.as<float>(),
                .n = n,
                .n_heads = heads,
                .head_dim = hd,
                .rot_dim = static_cast<int64_t>(rope.inv_freq().size()) * 2,
                .pos0 = pos0,
                .interleaved = cs.cfg.interleaved,
                .cos = dc.as<float>(),
                .sin = ds.as<float>()});
    auto got = down(dx, x.size());
    for (int64_t t = 0; t < n; ++t) rope.apply(x.data() + t * heads * hd, heads, pos0 + t);
    Compare c{fmt::format("rope {}", cs.name)};
    for (size_t i = 0; i < x.size(); ++i) c.add(i, got[i], x[i], 1e-5f * (1 + std::fabs(x[i])));
    err += c.result();
  }
  return err;
}

// y = x W^T (+ b) on every path (GEMV for n <= 4, each cuBLAS path above) vs ops::matmul.
// Tolerance: 2e-5 * sum_i |x_i w_i| (fp32 reordering; the bf16 split adds ~2^-17 relative).
std::string check_matmul() {
  std::string err;
  ThreadPool pool(2, false);
  cuda::Blas blas(64, 2048);
  struct Shape {
    int64_t rows, cols;
  };
  for (DType dt : k_dtypes)
    for (Shape s : {Shape{37, 7}, Shape{64, 64}, Shape{33, 200}, Shape{300, 2048}, Shape{1, 96}})
      for (int64_t n : {1, 2, 3, 4, 5, 17, 64}) {
        const bool with_bias = (n + s.cols) % 2 == 1;
        const Weights w = make_weights(dt, s.rows, s.cols, static_cast<uint32_t>(s.cols + n));
        auto x = randv(n * s.cols, static_cast<uint32_t>(n * 3 + s.rows), 2.f);
        auto b = randv(s.rows, 5);
        DeviceWeights dw = upload(w);
        DeviceBuffer dx = up(x), db = up(b), dy(n * s.rows * sizeof(float));
        cuda::matmul(blas, dx.as<float>(), n, dw.m, dy.as<float>(),
                     with_bias ? db.as<float>() : nullptr);
        auto got = down(dy, n * s.rows);
        std::vector<float> ref(n * s.rows);
        ops::matmul(pool, x.data(), n, w.view(), ref.data(), with_bias ? b.data() : nullptr);
        Compare c{fmt::format("matmul {} n {} [{}, {}]{}", dname(dt), n, s.rows, s.cols,
                              with_bias ? " +bias" : "")};
        for (int64_t t = 0; t < n; ++t)
          for (int64_t r = 0; r < s.rows; ++r) {
            double mag = 0;
            for (int64_t i = 0; i < s.cols; ++i)
              mag += std::fabs(x[t * s.cols + i] * w.f[r * s.cols + i]);
            const int64_t i = t * s.rows + r;
            c.add(i, got[i], ref[i], 2e-5f * static_cast<float>(mag) + 1e-6f);
          }
        err += c.result();
      }
  return err;
}

std::string check_route() {
  std::string err;
  for (int64_t E : {4, 8, 60, 128, 512})
    for (int64_t k : {1, 2, 8})
      for (bool renorm : {false, true}) {
        if (k > E) continue;
        const int64_t n = 37;
        auto logits = randv(n * E, static_cast<uint32_t>(E + k), 2.f);
        logits[3] = logits[5];  // an exact tie: the lower index wins
        // Ties of the max across slots: expert 5 (lane 5) vs 36 (lane 4), 8 vs 40 (one lane),
        // and a row of equal logits (ids 0..k-1): the lower index wins, not the lower lane.
        for (int64_t e = 0; e < E; ++e) logits[E + e] = 0.5f;
        if (E > 36) logits[2 * E + 5] = logits[2 * E + 36] = 9.f;
        if (E > 40) logits[3 * E + 40] = logits[3 * E + 8] = 9.f;
        DeviceBuffer dl = up(logits), dids(n * k * 4), dw(n * k * 4);
        cuda::route_topk_softmax(dl.as<float>(), n, E, k, renorm, dids.as<int32_t>(),
                                 dw.as<float>());
        auto w = down(dw, n * k);
        std::vector<int32_t> ids(n * k), rids(n * k);
        cuda::copy_to_host(ids.data(), dids.data(), ids.size() * 4);
        std::vector<float> rw(n * k);
        ops::route_topk_softmax(logits.data(), n, E, k, renorm, rids.data(), rw.data());
        Compare c{fmt::format("route E {} k {}{}", E, k, renorm ? " renorm" : "")};
        for (int64_t i = 0; i < n * k; ++i) {
          c.add(i, static_cast<float>(ids[i]), static_cast<float>(rids[i]), 0.f);
          c.add(i, w[i], rw[i], 1e-5f * rw[i] + 1e-7f);
        }
        err += c.result();
      }
  return err;
}

// The router GEMV with the top-k softmax fused into its last block vs the GEMV and
// route_topk_softmax launched apart: the same logits and weights (same arithmetic; 1e-6
// relative slack) and ids, twice in a row (the block counter is left at zero).
std::string check_gemv_route() {
  std::string err;
  for (DType dt : {DType::F32, DType::BF16})
    for (int64_t E : {60, 128, 512})
      for (int64_t cols : {96, 2048})
        for (int64_t n : {1, 3, 4}) {
          const int64_t k = E == 60 ? 4 : 8;
          const bool renorm = E != 512;
          const Weights w = make_weights(dt, E, cols, static_cast<uint32_t>(E + cols + n));
          auto x = randv(n * cols, static_cast<uint32_t>(n + cols), 2.f);
          DeviceWeights dw = upload(w);
          DeviceBuffer dx = up(x), dy(n * E * 4), dy2(n * E * 4), dids(n * k * 4), dwt(n * k * 4),
                       rids(n * k * 4), rwt(n * k * 4), counter(4);
          const uint32_t zero = 0;
          counter.upload(&zero, 4);
          cuda::gemv(dx.as<float>(), n, dw.m, dy2.as<float>());
          cuda::route_topk_softmax(dy2.as<float>(), n, E, k, renorm, rids.as<int32_t>(),
                                   rwt.as<float>());
          const cuda::GemvOut o{.w = dw.m, .y = dy.as<float>()};
          const cuda::GemvRoute r{.top_k = k,
                                  .renormalize = renorm,
                                  .ids = dids.as<int32_t>(),
                                  .weights = dwt.as<float>(),
                                  .counter = counter.as<uint32_t>()};
          Compare c{fmt::format("gemv+route {} E {} cols {} n {}", dname(dt), E, cols, n)};
          for (int rep = 0; rep < 2; ++rep) {
            cuda::gemv_multi(dx.as<float>(), n, &o, 1, nullptr, &r);
            auto y = down(dy, n * E), y2 = down(dy2, n * E);
            auto wt = down(dwt, n * k), rw = down(rwt, n * k);
            std::vector<int32_t> ids(n * k), ref_ids(n * k);
            cuda::copy_to_host(ids.data(), dids.data(), ids.size() * 4);
            cuda::copy_to_host(ref_ids.data(), rids.data(), ref_ids.size() * 4);
            for (int64_t i = 0; i < n * E; ++i) c.add(i, y[i], y2[i], 1e-6f * std::fabs(y2[i]));
            for (int64_t i = 0; i < n * k; ++i) {
              c.add(i, static_cast<float>(ids[i]), static_cast<float>(ref_ids[i]), 0.f);
              c.add(i, wt[i], rw[i], 1e-6f * rw[i]);
            }
            uint32_t left = 1;
            cuda::copy_to_host(&left, counter.data(), 4);
            c.add(rep, static_cast<float>(left), 0.f, 0.f);
          }
          err += c.result();
        }
  return err;
}

// The experts layer (decode and grouped paths) vs CpuExperts on random routes.
std::string check_moe() {
  std::string err;
  ThreadPool pool(2, false);
  cuda::Blas blas(64, 256);
  struct Shape {
    int64_t E, H, I, k;
  };
  for (DType dt : k_dtypes)
    // Decode's down projection: down_ahead_kernel up to 16-bit rows of 768 and top-8, else
    // down_stream_kernel (rows of 1024; f32 weights).
    for (Shape s : {Shape{8, 64, 32, 2}, Shape{6, 30, 20, 3}, Shape{16, 128, 96, 4},
                    Shape{16, 2048, 768, 8}, Shape{10, 1040, 200, 6}, Shape{6, 256, 1024, 2}})
      for (int64_t n : {1, 3, 4, 5, 40}) {
        // Decode-sized widths (more units than resident warps, several chunks per row,
        // partial chunks and expert groups): the streaming kernels, 1 and 4 tokens only.
        if (s.H > 128 && n != 1 && n != 4) continue;
        std::vector<Weights> gate, upw, dn;
        ModelWeights mw;
        mw.layers.resize(1);
        for (int64_t e = 0; e < s.E; ++e) {
          const auto seed = static_cast<uint32_t>(100 * e + s.H);
          gate.push_back(make_weights(dt, s.I, s.H, seed, 0.2f));
          upw.push_back(make_weights(dt, s.I, s.H, seed + 1, 0.2f));
          dn.push_back(make_weights(dt, s.H, s.I, seed + 2, 0.2f));
        }
        for (int64_t e = 0; e < s.E; ++e)
          mw.layers[0].experts.push_back({gate[e].view(), upw[e].view(), dn[e].view()});
        auto stack = [&](const std::vector<Weights>& ws) {
          const size_t each = ws[0].bytes();
          DeviceBuffer b(each * ws.size());
          for (size_t e = 0; e < ws.size(); ++e) b.upload(ws[e].data(), each, e * each);
          return b;
        };
        DeviceBuffer dg = stack(gate), du = stack(upw), dd = stack(dn);
        const cuda::DeviceExperts de{.gate = dg.data(),
                                     .up = du.data(),
                                     .down = dd.data(),
                                     .dtype = dt,
                                     .n_experts = s.E,
                                     .hidden = s.H,
                                     .inter = s.I};
        auto x = randv(n * s.H, static_cast<uint32_t>(n + s.E));
        std::mt19937 rng(static_cast<uint32_t>(n * 13 + s.k));
        std::vector<int32_t> ids(n * s.k), order(s.E);
        std::vector<float> rw(n * s.k);
        std::uniform_real_distribution<float> uw(0.1f, 1.f);
        for (int64_t t = 0; t < n; ++t) {
          std::iota(order.begin(), order.end(), 0);
          std::shuffle(order.begin(), order.end(), rng);
          for (int64_t j = 0; j < s.k; ++j) ids[t * s.k + j] = order[j], rw[t * s.k + j] = uw(rng);
        }
        cuda::MoeWorkspace ws(64, s.k, s.E, s.H, s.I);
        DeviceBuffer dx = up(x), dids = up(ids), dw = up(rw), dout(n * s.H * 4);
        std::vector<float> ref(n * s.H);
        CpuExperts cpu(mw, s.H, s.I, pool);
        cpu.apply({.layer = 0,
                   .x = x.data(),
                   .n_tokens = n,
                   .ids = ids.data(),
                   .weights = rw.data(),
                   .top_k = s.k,
                   .out = ref.data()});
        // Writing out, then adding into it (the decoder's residual).
        const auto base = randv(n * s.H, static_cast<uint32_t>(n + 7 * s.E));
        for (const bool acc : {false, true}) {
          dout.upload(base.data(), base.size() * 4);
          cuda::moe_experts(blas, de,
                            {.x = dx.as<float>(),
                             .n = n,
                             .ids = dids.as<int32_t>(),
                             .weights = dw.as<float>(),
                             .top_k = s.k,
                             .out = dout.as<float>(),
                             .accumulate = acc},
                            ws);
          auto got = down(dout, n * s.H);
          Compare c{fmt::format("moe {} E {} H {} I {} k {} n {}{}", dname(dt), s.E, s.H, s.I,
                                s.k, n, acc ? " accumulate" : "")};
          for (int64_t t = 0; t < n; ++t) {
            float mx = 0;
            for (int64_t j = 0; j < s.H; ++j) mx = std::max(mx, std::fabs(ref[t * s.H + j]));
            for (int64_t j = 0; j < s.H; ++j) {
              const int64_t i = t * s.H + j;
              c.add(i, got[i], ref[i] + (acc ? base[i] : 0.f), 1e-4f * mx + 1e-7f);
            }
          }
          err += c.result();
        }
      }
  return err;
}

std::string check_attention() {
  std::string err;
  ThreadPool pool(2, false);
  for (auto kernel : {cuda::AttentionKernel::PER_TOKEN, cuda::AttentionKernel::TILED,
                      cuda::AttentionKernel::TENSOR})
    for (int64_t hd : {16, 32, 48, 64, 100, 128, 256})
      for (int64_t n : {1, 7, 33, 150})
        for (int64_t pos0 : {0, 5, 300}) {
          if (kernel == cuda::AttentionKernel::TENSOR && !cuda::attention_tensor_supported(hd))
            continue;
          const int64_t heads = 4, kv_heads = hd == 48 ? 4 : 2, len = pos0 + n;
          auto q = randv(n * heads * hd, static_cast<uint32_t>(hd + n));
          auto kc = randv(len * kv_heads * hd, static_cast<uint32_t>(pos0 + 1), 1.5f);
          auto vc = randv(len * kv_heads * hd, static_cast<uint32_t>(pos0 + 2));
          DeviceBuffer dq = up(q), dk = up(kc), dv = up(vc), dout(q.size() * 4);
          ops::AttentionArgs a{.q = q.data(),
                               .n_tokens = n,
                               .pos0 = pos0,
                               .k_cache = kc.data(),
                               .v_cache = vc.data(),
                               .n_heads = heads,
                               .n_kv_heads = kv_heads,
                               .head_dim = hd,
                               .scale = 1.f / std::sqrt(static_cast<float>(hd)),
                               .out = nullptr};
          std::vector<float> ref(q.size());
          a.out = ref.data();
          ops::attention(pool, a);
          cuda::attention({.q = dq.as<float>(),
                           .n_tokens = n,
                           .pos0 = pos0,
                           .k_cache = dk.as<float>(),
                           .v_cache = dv.as<float>(),
                           .n_heads = heads,
                           .n_kv_heads = kv_heads,
                           .head_dim = hd,
                           .scale = a.scale,
                           .out = dout.as<float>(),
                           .kernel = kernel});
          auto got = down(dout, q.size());
          Compare c{fmt::format("attention {} hd {} n {} pos0 {}",
                                kernel == cuda::AttentionKernel::TILED    ? "tiled"
                                : kernel == cuda::AttentionKernel::TENSOR ? "tensor"
                                                                          : "per-token",
                                hd, n, pos0)};
          for (size_t i = 0; i < q.size(); ++i)
            c.add(i, got[i], ref[i], 2e-5f * (1 + std::fabs(ref[i])));
          err += c.result();
        }
  return err;
}
}  // namespace

std::string attention_benchmark() {
  const int64_t n = 2048, heads = 32, kv_heads = 8, hd = 128;
  auto q = randv(n * heads * hd, 1), kc = randv(n * kv_heads * hd, 2),
       vc = randv(n * kv_heads * hd, 3);
  DeviceBuffer dq = up(q), dk = up(kc), dv = up(vc), dout(q.size() * 4);
  std::string out;
  for (auto kernel : {cuda::AttentionKernel::PER_TOKEN, cuda::AttentionKernel::TILED,
                      cuda::AttentionKernel::TENSOR}) {
    const cuda::AttentionArgs a{.q = dq.as<float>(),
                                .n_tokens = n,
                                .pos0 = 0,
                                .k_cache = dk.as<float>(),
                                .v_cache = dv.as<float>(),
                                .n_heads = heads,
                                .n_kv_heads = kv_heads,
                                .head_dim = hd,
                                .scale = 0.088f,
                                .out = dout.as<float>(),
                                .kernel = kernel};
    cuda::attention(a);
    cuda::synchronize();
    const int reps = 5;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) cuda::attention(a);
    cuda::synchronize();
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
        reps;
    // causal QK^T and PV: 2 * 2 * hd FLOP per (query, key) pair, n^2/2 pairs per head
    const double tflops = 4.0 * hd * heads * (n * (n + 1) / 2.0) / (ms * 1e-3) / 1e12;
    out +=
        fmt::format("attention prefill {} n {} heads {}/{} hd {}: {:.3f} ms, {:.1f} TFLOP/s fp32\n",
                    kernel == cuda::AttentionKernel::TILED    ? "tiled"
                    : kernel == cuda::AttentionKernel::TENSOR ? "tensor"
                                                              : "per-token",
                    n, heads, kv_heads, hd, ms, tflops);
  }
  return out;
}

std::vector<Check> op_checks() {
  return {{"embed", check_embed},
          {"rmsnorm", check_rmsnorm},
          {"argmax", check_argmax},
          {"elementwise", check_elementwise},
          {"rope", check_rope},
          {"matmul", check_matmul},
          {"route", check_route},
          {"gemv_route", check_gemv_route},
          {"moe_experts", check_moe},
          {"attention", check_attention}};
}

}  // namespace ft::cuda_checks
