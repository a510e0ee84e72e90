// Quantized weights on CUDA (issue #6), per format: the device dequant vs the scalar reference
// (quant::dequantize_rows), the fused GEMV (1..4 tokens, several matrices, bias, accumulate;
// the int8-activation kernel and the f32 one) and the tensor-core GEMM vs an f64 reference over
// the dequantized weights and vs the CPU quant matmul (int8 activations: bounded by their
// rounding), quantized MoE experts (decode on both GEMV kernels, prefill), and GGUF models
// (Q8_0, Q4_K written from a fixture) on CUDA with the CPU's greedy tokens, resident and
// offloaded. Also a GEMV bandwidth table (quant_bandwidth).
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "backend/cpu/thread_pool.h"
#include "base/error.h"
#include "cuda_checks.h"
#include "experts/gpu_expert_store.h"
#include "io/gguf_writer.h"
#include "model/cuda_transformer.h"
#include "model/gguf_export.h"
#include "model/transformer.h"
#include "ops/ops.h"
#include "quant/quant.h"

namespace ft::cuda_checks {

namespace {
using quant::QuantType;

// A random [rows, cols] matrix quantized to t on the host, its f32 dequantization (the scalar
// reference) and a device copy. FP8 tiles carry scale_inv, NVFP4 a global scale.
struct QMatrix {
  DType dtype;
  int64_t rows, cols;
  std::vector<uint8_t> q;
  std::vector<float> scale_inv, ref;  // ref: dequantized [rows, cols]
  float global_scale = 1.f;
  cuda::DeviceBuffer dq, dscale;
  TensorView view() const {
    TensorView v;
    v.dtype = dtype, v.ndim = 2, v.shape = {rows, cols, 1, 1}, v.data = q.data(), v.name = "w";
    v.scale_inv = scale_inv.empty() ? nullptr : scale_inv.data();
    v.global_scale = global_scale;
    return v;
  }
  cuda::DeviceMatrix device() const {
    return {.data = dq.data(), .dtype = dtype, .rows = rows, .cols = cols,
            .scale_inv = dscale.bytes() ? dscale.as<float>() : nullptr,
            .global_scale = global_scale};
  }
};

QMatrix make_matrix(DType dt, int64_t rows, int64_t cols, uint32_t seed) {
  QMatrix m{.dtype = dt, .rows = rows, .cols = cols};
  const std::vector<float> w = randv(rows * cols, seed, 0.05f);
  if (dt == DType::F8_E4M3_B128) {
    m.q.resize(rows * cols);
    m.scale_inv.resize(quant::fp8_b128_scale_count(rows, cols));
    quant::quantize_fp8_b128(w.data(), rows, cols, m.q.data(), m.scale_inv.data());
  } else {
    const QuantType qt = quant::from_dtype(dt);
    const size_t rb = dtype_row_bytes(dt, cols);
    m.q.resize(rows * rb);
    if (dt == DType::NVFP4) {
      float amax = 0;
      for (float v : w) amax = std::max(amax, std::fabs(v));
      m.global_scale = quant::nvfp4_global_scale(amax);
    }
    for (int64_t r = 0; r < rows; ++r)
      quant::quantize_row(qt, w.data() + r * cols, m.q.data() + r * rb, cols, m.global_scale);
  }
  m.ref.resize(rows * cols);
  const TensorView v = m.view();
  quant::dequantize_rows(v, 0, rows, m.ref.data());
  m.dq = up(m.q);
  if (!m.scale_inv.empty()) m.dscale = up(m.scale_inv);
  return m;
}

const std::vector<DType>& formats() {
  static const std::vector<DType> f = {
      DType::Q4_0, DType::Q4_1, DType::Q8_0, DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K,
      DType::Q6_K, DType::IQ4_NL, DType::IQ4_XS, DType::MXFP4, DType::NVFP4, DType::F8_E4M3_B128};
  return f;
}

// y[t, r] vs the f64 dot over the dequantized rows: |d| <= tol * sum|w x| + 1e-6. With
// cpu_acts, the bound adds int8 activation rounding (<= max|x_g| / 254 per element of each
// group g of `group` elements): the CPU quant matmul and the CUDA int8-activation GEMV are
// compared with that.
std::string compare(const QMatrix& m, const std::vector<float>& x, int64_t n,
                    const std::vector<float>& got, double tol, const std::string& what,
                    bool cpu_acts = false, int group = 16) {
  for (int64_t t = 0; t < n; ++t) {
    const float* xt = x.data() + t * m.cols;
    std::vector<float> gmax((m.cols + group - 1) / group, 0.f);
    for (int64_t i = 0; i < m.cols; ++i) gmax[i / group] = std::max(gmax[i / group], std::fabs(xt[i]));
    for (int64_t r = 0; r < m.rows; ++r) {
      double ref = 0, mag = 0, act = 0;
      for (int64_t i = 0; i < m.cols; ++i) {
        const double w = m.ref[r * m.cols + i];
        ref += w * xt[i], mag += std::fabs(w * xt[i]), act += std::fabs(w) * gmax[i / group] / 254;
      }
      const double bound = tol * mag + 1e-6 + (cpu_acts ? 1.01 * act : 0.0);
      const double d = std::fabs(got[t * m.rows + r] - ref);
      if (!(d <= bound))
        return fmt::format("{}: token {} row {}: got {} ref {} (|d| {:.3g} > {:.3g})\n", what, t,
                           r, got[t * m.rows + r], ref, d, bound);
    }
  }
  return "";
}

std::string fmt_name(DType d) { return std::string(dtype_name(d)); }

// Whether CUDA decode GEMVs on dt quantize activations to int8 (every format with integer
// codes, when the int8 kernel is on).
bool int8_acts(DType dt, bool int8_on) { return int8_on && dt != DType::F8_E4M3_B128; }

// Elements per activation scale of the int8 GEMV on dt for nt tokens per launch: 16, except
// the one-token streaming kernel on the nibble-codebook formats (quant_dot32.cuh's
// NIBBLE_PAIRS: their code words mix a unit's two halves), 32.
int act_group(DType dt, int64_t nt) {
  const bool pairs = dt == DType::MXFP4 || dt == DType::IQ4_NL || dt == DType::IQ4_XS;
  return nt == 1 && pairs ? 32 : 16;
}

// x rounded as the int8 GEMV rounds it: per `group` elements q = rint(x * 127 / amax), x' = q
// * amax / 127 (the reference for checks whose error bound does not follow the rounding
// analytically).
std::vector<float> round_acts(const std::vector<float>& x, int group) {
  std::vector<float> out(x.size());
  for (size_t g = 0; g + group <= x.size(); g += group) {
    float a = 0;
    for (size_t i = g; i < g + group; ++i) a = std::max(a, std::fabs(x[i]));
    const float inv = a > 0 ? 127.f / a : 0.f, dx = a * (1.f / 127.f);
    for (size_t i = g; i < g + group; ++i) out[i] = dx * std::nearbyint(x[i] * inv);
  }
  return out;
}

// Runs f with the int8 GEMV kernel on or off, restoring it on.
template <class Fn>
auto with_int8(bool on, Fn&& f) {
  cuda::set_quant_gemv_int8(on);
  struct Restore {
    ~Restore() { cuda::set_quant_gemv_int8(true); }
  } restore;
  return f();
}

// Device dequant (every group decoder) == the scalar reference, to f32 rounding.
std::string check_dequant(DType dt) {
  const int64_t cols = dt == DType::F8_E4M3_B128 ? 384 : 512, rows = 130;
  QMatrix m = make_matrix(dt, rows, cols, 11);
  cuda::DeviceBuffer out(rows * cols * sizeof(float));
  cuda::quant_dequant_rows(m.device(), 0, rows, out.as<float>());
  const auto got = down<float>(out, rows * cols);
  // One rounding each, possibly of d*u + m vs d*u then + m: 1e-6 of the row's largest value.
  for (int64_t r = 0; r < rows; ++r) {
    float mx = 0;
    for (int64_t i = 0; i < cols; ++i) mx = std::max(mx, std::fabs(m.ref[r * cols + i]));
    for (int64_t i = r * cols; i < (r + 1) * cols; ++i)
      if (!(std::fabs(got[i] - m.ref[i]) <= 1e-6f * mx))
        return fmt::format("{} dequant: row {} element {}: got {} ref {}\n", fmt_name(dt), r,
                           i - r * cols, got[i], m.ref[i]);
  }
  return "";
}

// GEMV for 1..4 tokens (one matrix; two matrices with bias + accumulate) and the CPU matmul,
// on the int8-activation kernel (int8_on) or the f32 one.
std::string check_gemv_mode(DType dt, bool int8_on) {
  const bool i8 = int8_acts(dt, int8_on);
  const std::string kern = int8_on ? "" : " (f32 kernel)";
  // FP8's fast kernel rounds activations to f16 (relative 2^-11 each, quant_gemv_fp8.cu).
  const double tol = dt == DType::F8_E4M3_B128 && int8_on ? 2e-5 + 1.0 / 2048 : 2e-5;
  const int64_t be = std::max<int64_t>(16, dtype_block(dt).elems);
  std::string err;
  ThreadPool pool(2, false);
  // [70, 768]: 24 units per row, several whole rows to a streaming chunk (an expert's down
  // projection in Qwen3-30B-A3B), rows crossing the lanes' 32-unit runs. [24, ~4480]: rows of
  // several streaming chunks and a partial last one for every format (140 units or more).
  // [7001, 2048]: 64 units per row, the 30B-A3B hidden size, 2-3 rows per warp on an H200 (the
  // streaming kernel's rows reduced together, RowsRed; a warp's last chunk short). MXFP4 and
  // NVFP4 take the streaming kernel's Wide groups on the multiples of 128 / 64 columns and
  // single blocks on the others (32, 544 / 32, 272).
  std::vector<std::pair<int64_t, int64_t>> shapes = {
      {1, be}, {37, 2 * be}, {300, std::max<int64_t>(1024, 4 * be)},
      {129, 17 * be}, {70, 768}, {24, (4480 + be - 1) / be * be}, {7001, 2048}};
  if (dt == DType::F8_E4M3_B128) {  // whole 128-column tiles plus one; and a 16-column tail tile
    for (auto& [rows, c0] : shapes) c0 = (c0 + 127) / 128 * 128 + 128;
    shapes.push_back({19, 400});
    // enough 16-row strips for the fast kernel to give each warp its own (and 2 or 4 warps a
    // strip on the H200's 132 SMs)
    for (int64_t rows : {60000, 30000, 16000}) shapes.push_back({rows, 256});
  }
  for (auto [rows, cols] : shapes) {
    QMatrix m = make_matrix(dt, rows, cols, static_cast<uint32_t>(rows * 7 + cols));
    for (int64_t n = 1; n <= cuda::k_gemv_max_tokens; ++n) {
      auto x = randv(n * cols, static_cast<uint32_t>(n + rows), 1.f);
      if (cols == 400)  // FP8: blocks past f16's range and far below it (per-block f16 scales)
        for (int64_t t = 0; t < n; ++t)
          for (int64_t i = 128; i < 384; ++i) x[t * cols + i] *= i < 256 ? 1e6f : 1e-6f;
      auto dx = up(x);
      cuda::DeviceBuffer dy(n * rows * sizeof(float));
      cuda::gemv(dx.as<float>(), n, m.device(), dy.as<float>());
      const std::string what =
          fmt::format("{} gemv [{}, {}] n={}{}", fmt_name(dt), rows, cols, n, kern);
      err += compare(m, x, n, down<float>(dy, n * rows), tol, what, i8, act_group(dt, n));
      std::vector<float> cpu(n * rows);
      const TensorView v = m.view();
      ops::matmul(pool, x.data(), n, v, cpu.data());
      err += compare(m, x, n, cpu, 2e-5, what + " (CPU quant matmul)",
                     dt != DType::F8_E4M3_B128);
      if (!err.empty()) return err;
    }
  }
  // Two matrices in one launch, bias on the first, accumulate into the second.
  const int64_t cols = dt == DType::F8_E4M3_B128 ? 256 : 2 * std::max<int64_t>(be, 32), n = 3;
  QMatrix a = make_matrix(dt, 45, cols, 3), b = make_matrix(dt, 20, cols, 4);
  const auto x = randv(n * cols, 5), bias = randv(45, 6), y0 = randv(n * 20, 7);
  auto dx = up(x), db = up(bias), dyb = up(y0);
  cuda::DeviceBuffer dya(n * 45 * sizeof(float));
  const cuda::GemvOut outs[2] = {{.w = a.device(), .y = dya.as<float>(), .bias = db.as<float>()},
                                 {.w = b.device(), .y = dyb.as<float>(), .accumulate = true}};
  cuda::gemv_multi(dx.as<float>(), n, outs, 2);
  auto ya = down<float>(dya, n * 45), yb = down<float>(dyb, n * 20);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t r = 0; r < 45; ++r) ya[t * 45 + r] -= bias[r];
    for (int64_t r = 0; r < 20; ++r) yb[t * 20 + r] -= y0[t * 20 + r];
  }
  err += compare(a, x, n, ya, tol, fmt_name(dt) + " gemv_multi bias" + kern, i8);
  err += compare(b, x, n, yb, tol, fmt_name(dt) + " gemv_multi accumulate" + kern, i8);
  if (!err.empty()) return err;
  // One token over more rows than the GPU has warps: the streaming kernel gives each warp
  // several rows, packs short rows several to a chunk (1024 columns: one 32-unit run per row)
  // and a warp's rows cross from the first matrix into the second.
  const int64_t wide = 1024, ra = 4201, rb = 3001;
  QMatrix c = make_matrix(dt, ra, wide, 8), d = make_matrix(dt, rb, wide, 9);
  const auto x1 = randv(wide, 10);
  auto dx1 = up(x1);
  cuda::DeviceBuffer dyc(ra * sizeof(float)), dyd(rb * sizeof(float));
  const cuda::GemvOut many[2] = {{.w = c.device(), .y = dyc.as<float>()},
                                 {.w = d.device(), .y = dyd.as<float>()}};
  cuda::gemv_multi(dx1.as<float>(), 1, many, 2);
  err += compare(c, x1, 1, down<float>(dyc, ra), tol, fmt_name(dt) + " gemv_multi many rows" + kern,
                 i8, act_group(dt, 1));
  err += compare(d, x1, 1, down<float>(dyd, rb), tol,
                 fmt_name(dt) + " gemv_multi many rows, second" + kern, i8, act_group(dt, 1));
  return err;
}

std::string check_gemv(DType dt) {
  std::string err = with_int8(true, [&] { return check_gemv_mode(dt, true); });
  if (err.empty()) err = with_int8(false, [&] { return check_gemv_mode(dt, false); });
  return err;
}

// FP8 experts on the tensor-core GEMV (fp8_experts_gemv): records of rows then scale tiles,
// gate and up in one launch (x shared by each token's 2 slots), then down over silu(gate) * up
// fused into its input, with a skipped (-1) slot; widths that end in a partial 128-column
// tile (each is the other matrix's rows: whole 16-row strips). Each output vs the f64 dot over
// the dequantized expert at the f16 bound.
std::string check_fp8_experts() {
  constexpr DType f8 = DType::F8_E4M3_B128;
  const int64_t E = 5, I = 80, H = 272, slots = 4;
  const std::vector<int32_t> ids = {3, -1, 0, 3};
  std::string err;
  // stacks[m]: E records of matrix m (0 gate, 1 up: [I, H]; 2 down: [H, I])
  std::vector<std::vector<QMatrix>> mats(3);
  std::vector<cuda::DeviceBuffer> stacks;
  size_t stride[3];
  for (int m = 0; m < 3; ++m) {
    const int64_t rows = m < 2 ? I : H, cols = m < 2 ? H : I;
    const cuda::ExpertRecord rec = cuda::expert_record(f8, rows, cols);
    stride[m] = rec.bytes;
    std::vector<uint8_t> host(E * rec.bytes, 0);
    for (int64_t e = 0; e < E; ++e) {
      mats[m].push_back(make_matrix(f8, rows, cols, static_cast<uint32_t>(100 * m + e)));
      std::memcpy(host.data() + e * rec.bytes, mats[m][e].q.data(), mats[m][e].q.size());
      std::memcpy(host.data() + e * rec.bytes + rec.scale_offset, mats[m][e].scale_inv.data(),
                  mats[m][e].scale_inv.size() * sizeof(float));
    }
    stacks.push_back(up(host));
  }
  const auto x = randv(2 * H, 21, 1.f);  // two tokens, x_div 2
  auto dx = up(x), dids = up(ids);
  cuda::DeviceBuffer dg(slots * I * sizeof(float)), du(slots * I * sizeof(float)),
      dd(slots * H * sizeof(float));
  const bool ok1 =
      cuda::fp8_experts_gemv({.x = dx.as<float>(), .x_slot = H, .x_div = 2,
                              .ids = dids.as<int32_t>(), .slots = slots,
                              .w = {stacks[0].data(), stacks[1].data()},
                              .y = {dg.as<float>(), du.as<float>()}, .count = 2, .dtype = f8,
                              .rows = I, .cols = H, .y_slot = I, .expert_stride = stride[0],
                              .scale_offset = cuda::expert_record(f8, I, H).scale_offset});
  const bool ok2 =
      cuda::fp8_experts_gemv({.x = dg.as<float>(), .x_slot = I, .x_div = 1,
                              .ids = dids.as<int32_t>(), .slots = slots,
                              .w = {stacks[2].data(), nullptr}, .y = {dd.as<float>(), nullptr},
                              .count = 1, .dtype = f8, .rows = H, .cols = I, .y_slot = H,
                              .expert_stride = stride[2], .x_up = du.as<float>(),
                              .scale_offset = cuda::expert_record(f8, H, I).scale_offset});
  if (!ok1 || !ok2) return "fp8_experts_gemv declined a supported shape\n";
  const auto g = down<float>(dg, slots * I), u = down<float>(du, slots * I),
             d = down<float>(dd, slots * H);
  const double tol = 2e-5 + 1.0 / 2048;  // f16 activations
  for (int64_t s = 0; s < slots; ++s) {
    if (ids[s] < 0) {
      for (int64_t r = 0; r < I; ++r)
        if (g[s * I + r] != 0.f || u[s * I + r] != 0.f) return fmt::format("skipped slot {} not zero\n", s);
      for (int64_t r = 0; r < H; ++r)
        if (d[s * H + r] != 0.f) return fmt::format("skipped slot {} down not zero\n", s);
      continue;
    }
    const std::vector<float> xs(x.begin() + (s / 2) * H, x.begin() + (s / 2 + 1) * H);
    const std::vector<float> gs(g.begin() + s * I, g.begin() + (s + 1) * I),
        us(u.begin() + s * I, u.begin() + (s + 1) * I);
    err += compare(mats[0][ids[s]], xs, 1, gs, tol, fmt::format("fp8 experts gate slot {}", s));
    err += compare(mats[1][ids[s]], xs, 1, us, tol, fmt::format("fp8 experts up slot {}", s));
    std::vector<float> h(I);  // down's input from the GPU's own gate / up (checked above)
    for (int64_t i = 0; i < I; ++i) h[i] = gs[i] / (1.f + std::exp(-gs[i])) * us[i];
    const std::vector<float> ds(d.begin() + s * H, d.begin() + (s + 1) * H);
    err += compare(mats[2][ids[s]], h, 1, ds, tol + 1e-5, fmt::format("fp8 experts down slot {}", s));
    if (!err.empty()) return err;
  }
  return err;
}

// Prefill GEMM (bf16 hi/lo panels on tensor cores) vs the f64 reference.
std::string check_gemm(DType dt) {
  const int64_t be = std::max<int64_t>(16, dtype_block(dt).elems);
  const int64_t cols = dt == DType::F8_E4M3_B128 ? 640 : std::max<int64_t>(512, 2 * be);
  cuda::Blas blas(160, cols);
  std::string err;
  for (int64_t rows : {33, 700})
    for (int64_t n : {5, 37, 160}) {
      QMatrix m = make_matrix(dt, rows, cols, static_cast<uint32_t>(rows + n));
      const auto x = randv(n * cols, static_cast<uint32_t>(n), 1.f);
      auto dx = up(x);
      cuda::DeviceBuffer dy(n * rows * sizeof(float));
      cuda::matmul(blas, dx.as<float>(), n, m.device(), dy.as<float>());
      err += compare(m, x, n, down<float>(dy, n * rows), 1e-4,
                     fmt::format("{} gemm [{}, {}] n={}", fmt_name(dt), rows, cols, n));
      if (!err.empty()) return err;
    }
  return err;
}

// Quantized experts: moe_experts decode (1..3 tokens) and prefill (9 tokens) vs f64 over the
// dequantized experts, top-k order, with a skipped (-1) id in decode. Decode on the int8 kernel
// is compared with a reference whose GEMV inputs are rounded as the kernel rounds them
// (round_acts), within 2e-3 of the max (a device-vs-host rounding tie moves one step); prefill
// runs with the f32 kernel only (its per-expert groups of <= 4 rows take the GEMV, >= 5 the
// GEMM, so no one rounding describes it).
std::string check_moe_mode(DType dt, bool int8_on) {
  const int64_t be = std::max<int64_t>(32, dtype_block(dt).elems);
  const int64_t E = 6, H = std::max<int64_t>(256, be), I = be, K = 3;
  std::vector<QMatrix> g, u, d;
  for (int64_t e = 0; e < E; ++e) {
    g.push_back(make_matrix(dt, I, H, 100 + e));
    u.push_back(make_matrix(dt, I, H, 200 + e));
    d.push_back(make_matrix(dt, H, I, 300 + e));
  }
  auto stack = [&](const std::vector<QMatrix>& ms) {
    std::vector<uint8_t> all;
    for (const auto& m : ms) all.insert(all.end(), m.q.begin(), m.q.end());
    return up(all);
  };
  auto dg = stack(g), du = stack(u), dd = stack(d);
  const cuda::DeviceExperts ex{.gate = dg.data(), .up = du.data(), .down = dd.data(),
                               .dtype = dt, .n_experts = E, .hidden = H, .inter = I};
  cuda::Blas blas(16, std::max(H, I));
  cuda::MoeWorkspace ws(16, K, E, H, I);
  std::string err;
  for (int64_t n : {1, 3, 9}) {
    if (int8_on && n > cuda::k_gemv_max_tokens) continue;
    const auto x = randv(n * H, static_cast<uint32_t>(n), 1.f);
    std::vector<int32_t> ids(n * K);
    std::vector<float> w(n * K);
    for (int64_t i = 0; i < n * K; ++i) ids[i] = static_cast<int32_t>((i * 5 + n) % E), w[i] = 0.2f + 0.1f * (i % 3);
    if (n == 3) ids[4] = -1;  // computed elsewhere (decode only)
    auto dx = up(x), di = up(ids), dw = up(w);
    cuda::DeviceBuffer dout(n * H * sizeof(float));
    cuda::moe_experts(blas, ex, {.x = dx.as<float>(), .n = n, .ids = di.as<int32_t>(),
                                 .weights = dw.as<float>(), .top_k = K, .out = dout.as<float>()},
                      ws);
    const auto got = down<float>(dout, n * H);
    const bool i8 = n <= cuda::k_gemv_max_tokens && int8_acts(dt, int8_on);
    const double tol = i8 ? 2e-3 : 1e-4;
    const int group = act_group(dt, 1);  // the experts form runs one token per slot
    const std::vector<float> xr = i8 ? round_acts(x, group) : x;
    for (int64_t t = 0; t < n; ++t) {
      std::vector<double> ref(H, 0.0);
      double mx = 1e-6;
      for (int64_t k = 0; k < K; ++k) {
        const int32_t e = ids[t * K + k];
        if (e < 0) continue;
        std::vector<float> act(I);
        for (int64_t r = 0; r < I; ++r) {
          double gs = 0, us = 0;
          for (int64_t c = 0; c < H; ++c) {
            gs += double(g[e].ref[r * H + c]) * xr[t * H + c];
            us += double(u[e].ref[r * H + c]) * xr[t * H + c];
          }
          act[r] = static_cast<float>(gs / (1 + std::exp(-gs)) * us);
        }
        if (i8) act = round_acts(act, group);
        for (int64_t r = 0; r < H; ++r) {
          double s = 0;
          for (int64_t c = 0; c < I; ++c) s += double(d[e].ref[r * I + c]) * act[c];
          ref[r] += w[t * K + k] * s;
        }
      }
      for (double v : ref) mx = std::max(mx, std::fabs(v));
      for (int64_t r = 0; r < H; ++r)
        if (!(std::fabs(got[t * H + r] - ref[r]) <= tol * mx))
          return fmt::format("{} moe n={}{} token {} row {}: got {} ref {} (max {})\n",
                             fmt_name(dt), n, int8_on ? "" : " (f32 kernel)", t, r,
                             got[t * H + r], ref[r], mx);
    }
  }
  return err;
}

std::string check_moe(DType dt) {
  std::string err = with_int8(true, [&] { return check_moe_mode(dt, true); });
  if (err.empty()) err = with_int8(false, [&] { return check_moe_mode(dt, false); });
  return err;
}

// A GGUF of the qwen3_moe fixture at `type` (K-quant shapes fall back per tensor as llama.cpp
// does), resident and offloaded: every matrix through CUDA and the CPU matmul vs f64; CUDA's
// prefill logits within `bound` (x max) of the unquantized checkpoint's; greedy tokens and
// logits == the CPU's on the same file (when the CPU forward is itself within the bound).
std::string check_gguf(const std::string& fixtures, uint32_t type, const char* tag, float bound) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / fmt::format("ft_quant_checks_{}", tag);
  fs::create_directories(dir);
  std::string path;
  std::vector<float> orig_first;  // the unquantized checkpoint's CPU logits (diagnostics)
  {
    auto st = Model::load(fixtures + "/qwen3_moe");
    ThreadPool pool(2, false);
    Transformer tf(*st, pool, 64);
    KVCache kv(st->config(), 16);
    const std::vector<int32_t> pr = {1, 17, 42, 300, 7, 512, 99, 3};
    orig_first.resize(st->config().vocab_size);
    tf.forward(pr.data(), pr.size(), 0, kv, orig_first.data(), false);
    GgufWriter w;
    gguf_add_model(w, *st, {.type = type, .name = "quant_checks"});
    path = w.write((dir / "m.gguf").string()).front();
  }
  auto m = Model::load(path);
  const ModelConfig& c = m->config();
  // Every matrix of the file through the CUDA GEMV (1 token) and GEMM (7 tokens) and the CPU
  // matmul vs the f64 reference (names the first that differs).
  {
    const auto& W = m->weights();
    std::vector<const TensorView*> mats = {&W.lm_head};
    for (const auto& L : W.layers) {
      for (const Linear* l : {&L.q, &L.k, &L.v, &L.o}) mats.push_back(&l->w);
      for (const TensorView* t : {&L.gate, &L.up, &L.down, &L.router}) mats.push_back(t);
      for (const auto& e : L.experts) mats.insert(mats.end(), {&e.gate, &e.up, &e.down});
    }
    ThreadPool pool(2, false);
    cuda::Blas blas(8, 4096);
    for (const TensorView* t : mats) {
      if (t->empty() || !dtype_is_quant(t->dtype)) continue;
      QMatrix q{.dtype = t->dtype, .rows = t->shape[0], .cols = t->shape[1]};
      q.q.assign(t->as<uint8_t>(), t->as<uint8_t>() + t->nbytes());
      q.ref.resize(q.rows * q.cols);
      quant::dequantize_rows(*t, 0, q.rows, q.ref.data());
      q.dq = up(q.q);
      for (int64_t n : {1, 7}) {
        const auto x = randv(n * q.cols, 9, 1.f);
        auto dx = up(x);
        cuda::DeviceBuffer dy(n * q.rows * sizeof(float));
        cuda::matmul(blas, dx.as<float>(), n, q.device(), dy.as<float>());
        const std::string what =
            fmt::format("{} {} {} {} n={}", tag, t->name, dtype_name(t->dtype), t->shape_str(), n);
        const bool i8 = n <= cuda::k_gemv_max_tokens && int8_acts(t->dtype, true);
        std::string e = compare(q, x, n, down<float>(dy, n * q.rows), 1e-4, what + " CUDA", i8);
        std::vector<float> cpu(n * q.rows);
        ops::matmul(pool, x.data(), n, *t, cpu.data());
        e += compare(q, x, n, cpu, 1e-4, what + " CPU", true);
        if (!e.empty()) return e;
      }
    }
  }
  const int64_t V = c.vocab_size, steps = 16;
  const std::vector<int32_t> prompt = {1, 17, 42, 300, 7, 512, 99, 3};
  const int64_t cap = static_cast<int64_t>(prompt.size()) + steps + 1;
  std::string types;
  for (const auto& L : m->weights().layers)
    if (!L.experts.empty()) {
      types = fmt::format("experts {}, q {}", dtype_name(L.experts[0].gate.dtype),
                          dtype_name(L.q.w.dtype));
      break;
    }
  // CPU greedy.
  ThreadPool pool(2, false);
  std::vector<int32_t> cpu_ids;
  std::vector<float> cpu_first(V);
  {
    Transformer tf(*m, pool, 64);
    KVCache kv(c, cap);
    std::vector<float> lg(V);
    tf.forward(prompt.data(), prompt.size(), 0, kv, lg.data(), false);
    cpu_first = lg;
    int64_t pos = prompt.size();
    for (int64_t s = 0; s < steps; ++s) {
      const int32_t id = static_cast<int32_t>(std::max_element(lg.begin(), lg.end()) - lg.begin());
      cpu_ids.push_back(id);
      tf.forward(&id, 1, pos++, kv, lg.data(), false);
    }
  }
  std::string err;
  for (int mode = 0; mode < 2; ++mode) {  // 0 resident, 1 offloaded (one layer's slots)
    std::unique_ptr<HostExperts> host;
    CudaOffload off;
    if (mode == 1) {
      host = std::make_unique<HostExperts>(HostExperts::copy_of(*m));
      off = {.experts = host.get(), .slots = c.n_experts};
    }
    CudaTransformer tf(*m, cap, 64, off);
    // First with f32 activations everywhere (the quantized weights alone), then as served:
    // decode GEMVs (and prefill's small per-expert groups) with int8 activations, as the CPU.
    std::vector<float> lg(V), lg32(V);
    with_int8(false, [&] {
      tf.forward(prompt.data(), prompt.size(), 0, lg32.data(), false);
      return 0;
    });
    tf.forward(prompt.data(), prompt.size(), 0, lg.data(), false);
    float mx = 0, md = 0;
    for (int64_t i = 0; i < V; ++i)
      mx = std::max(mx, std::fabs(cpu_first[i])), md = std::max(md, std::fabs(lg[i] - cpu_first[i]));
    // The f32 forward vs the unquantized checkpoint: CUDA must stay within the format's noise
    // (bound). int8 activations move this fixture's routing (random weights: near-tied router
    // logits) on CPU and CUDA alike, so the int8 forward is held to the CPU's instead (both
    // round activations the same way); greedy parity with the CPU is asserted when the CPU
    // forward is itself within the bound.
    float d_cpu = 0, d_cuda = 0, d_i8 = 0, mo = 0;
    for (int64_t i = 0; i < V; ++i)
      d_cpu = std::max(d_cpu, std::fabs(cpu_first[i] - orig_first[i])),
      d_cuda = std::max(d_cuda, std::fabs(lg32[i] - orig_first[i])),
      d_i8 = std::max(d_i8, std::fabs(lg[i] - orig_first[i])),
      mo = std::max(mo, std::fabs(orig_first[i]));
    const char* where = mode ? "offload" : "resident";
    if (!(d_cuda <= bound * mo))
      err += fmt::format("{} {}: CUDA prefill logits (f32 activations) differ from the "
                         "unquantized model's by {} (bound {}; {})\n", tag, where, d_cuda,
                         bound * mo, types);
    const bool cpu_ok = d_cpu <= bound * mo;
    std::fprintf(stderr, "  %s %s: max|logit - unquantized| CUDA f32 acts %.4f, CUDA int8 acts "
                 "%.4f, CPU %.4f (max %.3f); CUDA vs CPU %.4f%s\n", tag, where, d_cuda, d_i8,
                 d_cpu, mo, md, cpu_ok ? "" : " -- CPU forward off: greedy parity not assessed");
    // Both quantize activations to int8 per 16 (CUDA's prefill GEMMs keep f32): 5% of the max.
    if (!(md <= 5e-2f * mx))
      err += fmt::format("{} {}: prefill logits max|d| {} vs the CPU's (max {}; {})\n", tag,
                         where, md, mx, types);
    int64_t pos = prompt.size();
    for (int64_t s = 0; s < steps && cpu_ok; ++s) {
      const int32_t id = static_cast<int32_t>(std::max_element(lg.begin(), lg.end()) - lg.begin());
      if (id != cpu_ids[s]) {
        err += fmt::format("{} {}: greedy token {} is {}, CPU {} ({})\n", tag, where, s, id,
                           cpu_ids[s], types);
        break;
      }
      tf.forward(&id, 1, pos++, lg.data(), false);
    }
  }
  fs::remove_all(dir);
  return err;
}
}  // namespace

std::vector<Check> quant_checks(const std::string& fixtures_dir) {
  std::vector<Check> out;
  for (DType dt : formats()) {
    const std::string n = fmt_name(dt);
    out.push_back({"quant_dequant_" + n, [dt] { return check_dequant(dt); }});
    out.push_back({"quant_gemv_" + n, [dt] { return check_gemv(dt); }});
    out.push_back({"quant_gemm_" + n, [dt] { return check_gemm(dt); }});
    if (dt != DType::NVFP4 && dt != DType::F8_E4M3_B128)
      out.push_back({"quant_moe_" + n, [dt] { return check_moe(dt); }});
  }
  out.push_back({"quant_fp8_experts", [] { return check_fp8_experts(); }});
  out.push_back({"quant_gguf_Q8_0", [fixtures_dir] { return check_gguf(fixtures_dir, 8, "q8_0", 0.05f); }});
  out.push_back({"quant_gguf_Q4_K", [fixtures_dir] { return check_gguf(fixtures_dir, 12, "q4_k", 0.5f); }});
  return out;
}

// GEMV bandwidth per format: weight bytes read per second on [rows, cols] matrices (n = 1 on
// the int8-activation kernel and on the f32 one, n = 4 on the int8 one), beside the
// device-to-device copy bandwidth (read + write) measured here. Each shape cycles through
// copies of its matrix totalling >= 512 MB so no launch finds its weights in the 60 MB L2;
// back-to-back launches, so small shapes include the launch gaps. "experts" rows: the 30B-A3B
// decode expert GEMVs, 8 routed experts of 128 (gate+up [768, 2048] in one launch, down
// [2048, 768]) through quant_experts_gemv. FT_QUANT_BENCH=NAME,NAME limits the formats;
// FT_QUANT_BENCH_GRAPH=1 times graph replays instead of host launches; FT_QUANT_BENCH_SHAPE=
// ROWSxCOLS limits the shapes.
std::string quant_bandwidth() {
  std::string s;
  const size_t cb = size_t{1} << 30;
  double copy_bw = 0;
  {
    cuda::DeviceBuffer a(cb), b(cb);
    for (int rep = 0; rep < 5; ++rep) {
      cuda::synchronize();
      const auto t0 = std::chrono::steady_clock::now();
      cuda::copy_on_device(b.data(), a.data(), cb);
      cuda::synchronize();
      const double sec =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      copy_bw = std::max(copy_bw, 2.0 * cb / sec);
    }
  }
  s += fmt::format("HBM (D2D copy, read+write): {:.0f} GB/s\n", copy_bw / 1e9);
  s += "| format | matrix | MB | n=1 GB/s | % of copy | n=1 f32 kernel GB/s | n=4 GB/s | % of copy |\n"
       "|---|---|---|---|---|---|---|---|\n";
  struct Shape {
    int64_t rows, cols;
    int experts;  // 0: a plain matrix; else experts form: 8 of `experts` routed
    bool gate_up;
  };
  const Shape shapes[] = {{14336, 4096, 0, false}, {4096, 14336, 0, false},
                          {6144, 2048, 0, false},  {2048, 6144, 0, false},
                          {98304, 2048, 0, false}, {768, 2048, 128, true},
                          {2048, 768, 128, false}};
  // FT_QUANT_BENCH_GRAPH=1: each timing replays one captured graph of the launches (the
  // kernels' own time, as decode's captured steps see it) instead of launching from the host.
  const bool graph = std::getenv("FT_QUANT_BENCH_GRAPH") != nullptr;
  if (graph) s += "(launches replayed from a captured CUDA graph)\n";
  std::vector<DType> fs = formats();
  fs.insert(fs.begin(), DType::BF16);
  if (const char* only = std::getenv("FT_QUANT_BENCH")) {  // e.g. Q8_0,Q4_K: just these formats
    const std::string list = std::string(",") + only + ",";
    std::erase_if(fs, [&](DType d) { return list.find("," + fmt_name(d) + ",") == std::string::npos; });
  }
  const char* only_shape = std::getenv("FT_QUANT_BENCH_SHAPE");  // e.g. 98304x2048 (for ncu)
  for (DType dt : fs)
    for (const Shape& sh : shapes) {
      const bool ex = sh.experts > 0;
      if (only_shape && fmt::format("{}x{}", sh.rows, sh.cols) != only_shape) continue;
      if (ex && (dt == DType::BF16 || dt == DType::NVFP4 || dt == DType::F8_E4M3_B128)) continue;
      const size_t mat = dt == DType::BF16 ? sh.rows * sh.cols * 2
                                           : dtype_row_bytes(dt, sh.cols) * sh.rows;
      const size_t stack = ex ? mat * sh.experts : mat;  // one buffer: a matrix or a stack
      const int mats = ex && sh.gate_up ? 2 : 1;
      const size_t copies = std::max<size_t>(2, (size_t{512} << 20) / (stack * mats) + 1);
      std::vector<cuda::DeviceBuffer> w;
      for (size_t i = 0; i < copies * mats; ++i) {
        w.emplace_back(stack);
        cuda::memset_async(w.back().data(), 0x11, stack);  // bytes: any finite codes
      }
      cuda::DeviceBuffer dsc;
      if (dt == DType::F8_E4M3_B128) {
        dsc = cuda::DeviceBuffer(quant::fp8_b128_scale_count(sh.rows, sh.cols) * sizeof(float));
        cuda::memset_async(dsc.data(), 0, dsc.bytes());
      }
      const int64_t slots = 8;
      std::vector<int32_t> ids(slots);
      for (int64_t i = 0; i < slots; ++i) ids[i] = static_cast<int32_t>(i * 13 % std::max(sh.experts, 1));
      auto dids = up(ids);
      auto x = up(randv(slots * sh.cols, 1));
      cuda::DeviceBuffer y(mats * slots * sh.rows * sizeof(float));
      auto run = [&](size_t i, int64_t n) {
        if (!ex) {
          cuda::DeviceMatrix m{.data = w[i].data(), .dtype = dt, .rows = sh.rows, .cols = sh.cols,
                               .scale_inv = dsc.bytes() ? dsc.as<float>() : nullptr};
          cuda::gemv(x.as<float>(), n, m, y.as<float>());
          return;
        }
        float* yy = y.as<float>();
        cuda::quant_experts_gemv({.x = x.as<float>(), .x_slot = sh.cols, .x_div = 1,
                                  .ids = dids.as<int32_t>(), .slots = slots,
                                  .w = {w[mats * i].data(), mats == 2 ? w[mats * i + 1].data() : nullptr},
                                  .y = {yy, yy + slots * sh.rows}, .count = mats, .dtype = dt,
                                  .rows = sh.rows, .cols = sh.cols, .y_slot = sh.rows});
      };
      const size_t read = ex ? mat * slots * mats : mat;  // bytes one launch reads
      auto time_bw = [&](int64_t n, bool int8_on) {
        cuda::set_quant_gemv_int8(int8_on);
        for (size_t i = 0; i < copies; ++i) run(i, n);  // warm-up
        cuda::synchronize();
        const int reps = static_cast<int>(std::max<size_t>(20, copies * 2));
        double sec = 0;
        if (graph) {  // the launches captured once and replayed: no host launch cost per kernel
          sec = graph_seconds_per_launch(reps, [&](int r) { run(r % copies, n); });
        } else {
          const auto t0 = std::chrono::steady_clock::now();
          for (int r = 0; r < reps; ++r) run(r % copies, n);
          cuda::synchronize();
          sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
        }
        cuda::set_quant_gemv_int8(true);
        return read / sec;
      };
      const double b1 = time_bw(1, true), bf = time_bw(1, false);
      const double b4 = ex ? 0.0 : time_bw(4, true);
      const std::string name =
          ex ? fmt::format("experts 8x{} {}x{}", sh.gate_up ? "(gate+up)" : "down", sh.rows, sh.cols)
             : fmt::format("{}x{}", sh.rows, sh.cols);
      s += fmt::format("| {} | {} | {:.1f} | {:.0f} | {:.0f}% | {:.0f} | {} | {} |\n", fmt_name(dt),
                       name, read / 1e6, b1 / 1e9, 100 * b1 / copy_bw, bf / 1e9,
                       ex ? "-" : fmt::format("{:.0f}", b4 / 1e9),
                       ex ? "-" : fmt::format("{:.0f}%", 100 * b4 / copy_bw));
    }
  return s;
}

}  // namespace ft::cuda_checks
