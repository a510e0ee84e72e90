// Experts of mixed formats on CUDA (issue #6, h6f): the demo model (256 wide, trained) as a
// Q4_K_M GGUF (gate/up Q4_K, down IQ4_NL or Q8_0 by layer: two record sizes), as a GGUF whose
// layers' gate/up/down are three different types (one matrix bf16), and as FP8 128x128 / NVFP4
// fast-load checkpoints written by the engine's quantizer (per-expert scales). Each runs
// resident, offloaded with every expert resident, offloaded through a one-layer slot pool
// (device fetches into slots sized for the largest layer, strided views) and HYBRID (CPU
// workers on the pinned records); the reference is the CPU forward of the same model with every
// matrix dequantized to f32 (the same values, f32 arithmetic as on CUDA): prefill logits and
// teacher-forced greedy decode (16 steps) must match.
#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <unistd.h>

#include "cuda_checks.h"
#include "experts/gpu_expert_store.h"
#include "io/gguf_writer.h"
#include "model/cuda_transformer.h"
#include "model/ft_checkpoint.h"
#include "model/gguf_export.h"
#include "model/transformer.h"
#include "quant/quant.h"

namespace ft::cuda_checks {

namespace {
namespace fs = std::filesystem;
using quant::QuantType;

const std::vector<int32_t> k_prompt = {1, 17, 42, 300, 7, 512, 99, 3, 1200, 64, 5};
constexpr int64_t k_steps = 16;

fs::path scratch_dir(const std::string& tag) {
  const fs::path d = fs::temp_directory_path() / fmt::format("ft_mixed_{}_{}", tag, ::getpid());
  fs::create_directories(d);
  return d;
}

// The CPU on `m`: prefill logits of the prompt's last token, then greedy ids and each step's
// logits.
struct CpuRun {
  std::vector<float> first;
  std::vector<int32_t> ids;
  std::vector<std::vector<float>> steps;
};
CpuRun cpu_run(const Model& m) {
  const int64_t V = m.config().vocab_size;
  ThreadPool pool(2, false);
  Transformer tf(m, pool, 64);
  KVCache kv(m.config(), static_cast<int64_t>(k_prompt.size()) + k_steps + 1);
  CpuRun r;
  std::vector<float> lg(V);
  tf.forward(k_prompt.data(), k_prompt.size(), 0, kv, lg.data(), false);
  r.first = lg;
  int64_t pos = static_cast<int64_t>(k_prompt.size());
  for (int64_t s = 0; s < k_steps; ++s) {
    const int32_t id = static_cast<int32_t>(std::max_element(lg.begin(), lg.end()) - lg.begin());
    r.ids.push_back(id);
    tf.forward(&id, 1, pos++, kv, lg.data(), false);
    r.steps.push_back(lg);
  }
  return r;
}

float max_abs(const std::vector<float>& v) {
  float m = 0;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}
float max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

enum class Mode { RESIDENT, OFFLOAD_ALL, OFFLOAD_SLOTS, HYBRID };
const char* mode_name(Mode m) {
  switch (m) {
    case Mode::RESIDENT: return "resident";
    case Mode::OFFLOAD_ALL: return "offload-all";
    case Mode::OFFLOAD_SLOTS: return "offload-slots";
    default: return "hybrid";
  }
}

// CUDA on m in `mode` vs the CPU run of its dequantized twin; teacher-forced with the twin's
// greedy ids. tol: max|d| per row relative to the row's max|logit|. HYBRID's CPU share runs the
// CPU's quantized kernels (int8 activations): a looser bound (0.15), and 13 of 16 argmaxes.
std::string run_mode(const Model& m, const CpuRun& ref, Mode mode, const std::string& tag) {
  const ModelConfig& c = m.config();
  const int64_t V = c.vocab_size, cap = static_cast<int64_t>(k_prompt.size()) + k_steps + 1;
  std::unique_ptr<HostExperts> host;
  CudaOffload off;
  if (mode != Mode::RESIDENT) {
    host = std::make_unique<HostExperts>(HostExperts::copy_of(m));
    const int64_t all = host->moe_layers * host->n_experts;
    off = {.experts = host.get(),
           .slots = mode == Mode::OFFLOAD_ALL ? all : c.n_experts,
           .mode = mode == Mode::HYBRID ? MoeMode::HYBRID : MoeMode::OFFLOAD,
           .pcie_Bps = 1e9,
           .cpu_Bps = 1e9,
           .cpu_threads = 2};
  }
  const bool hybrid = mode == Mode::HYBRID;
  // The reference is the f32 twin, so CUDA's quantized GEMVs keep f32 activations here (the
  // int8-activation kernel is checked against the CPU's int8 kernels in quant_checks).
  cuda::set_quant_gemv_int8(hybrid);
  struct Restore {
    ~Restore() { cuda::set_quant_gemv_int8(true); }
  } restore;
  CudaTransformer tf(m, cap, 64, off);
  // HYBRID: the CPU share's int8 activations over 4-bit weights (NVFP4 reached 0.123 on the
  // H200) -- a bound for "same model", with the argmax count below as the real check.
  const float tol = hybrid ? 1.5e-1f : 2e-3f;
  const std::string where = fmt::format("{} {}", tag, mode_name(mode));
  std::string err;
  std::vector<float> lg(V);
  tf.forward(k_prompt.data(), k_prompt.size(), 0, lg.data(), false);
  float d = max_diff(lg, ref.first), mx = max_abs(ref.first);
  if (!(d <= tol * mx))
    err += fmt::format("{}: prefill logits max|d| {} (max {}, tol {})\n", where, d, mx, tol);
  int64_t pos = static_cast<int64_t>(k_prompt.size()), agree = 0;
  float worst = d / std::max(mx, 1e-6f);
  for (int64_t s = 0; s < k_steps; ++s) {
    const int32_t id = static_cast<int32_t>(std::max_element(lg.begin(), lg.end()) - lg.begin());
    agree += id == ref.ids[s];
    if (id != ref.ids[s] && !hybrid && err.empty())
      err += fmt::format("{}: greedy token {} is {}, CPU {}\n", where, s, id, ref.ids[s]);
    tf.forward(&ref.ids[s], 1, pos++, lg.data(), false);
    d = max_diff(lg, ref.steps[s]), mx = max_abs(ref.steps[s]);
    worst = std::max(worst, d / std::max(mx, 1e-6f));
    if (!(d <= tol * mx) && err.empty())
      err += fmt::format("{}: decode step {} logits max|d| {} (max {}, tol {})\n", where, s, d, mx,
                         tol);
  }
  if (hybrid && agree < k_steps - 3)
    err += fmt::format("{}: {} of {} greedy tokens agree with the CPU\n", where, agree, k_steps);
  const CudaRuntimeStats st = tf.runtime_stats();
  std::fprintf(stderr, "  %s: worst max|d|/max %.2e, greedy %lld/%lld, fetched %lld, cpu %lld\n",
               where.c_str(), worst, (long long)agree, (long long)k_steps,
               (long long)st.fetched_experts, (long long)st.cpu_experts);
  if (mode == Mode::OFFLOAD_SLOTS && st.fetched_experts == 0)
    err += where + ": no expert was fetched (the slot pool was not exercised)\n";
  if (hybrid && st.cpu_experts == 0) err += where + ": no expert ran on the CPU\n";
  return err;
}

// Every mode on m vs its f32 twin (written as a fast-load checkpoint in f32: each matrix
// dequantized; the embedding as loaded). expect: a description of m's expert formats, checked
// against the first MoE layers (fails when the fixture did not produce the intended mix).
std::string check_model(const Model& m, const std::string& src, const std::string& tag,
                        const fs::path& dir) {
  const std::string twin_dir = (dir / "f32").string();
  write_ft_checkpoint(m, src, twin_dir, {.type = "f32"});
  auto twin = Model::load(twin_dir);
  const CpuRun ref = cpu_run(*twin);
  // The CPU on the quantized file itself (int8 activations): reported beside the twin's.
  const CpuRun own = cpu_run(m);
  int64_t same = 0;
  for (int64_t s = 0; s < k_steps; ++s) same += own.ids[s] == ref.ids[s];
  std::fprintf(stderr, "  %s: CPU on the quantized file agrees with its f32 twin on %lld/%lld "
               "greedy tokens\n", tag.c_str(), (long long)same, (long long)k_steps);
  std::string err;
  for (Mode mode : {Mode::RESIDENT, Mode::OFFLOAD_ALL, Mode::OFFLOAD_SLOTS, Mode::HYBRID})
    err += run_mode(m, ref, mode, tag);
  return err;
}

std::string formats_of(const Model& m) {
  std::string s;
  for (const auto& L : m.weights().layers)
    if (!L.experts.empty())
      s += fmt::format("[{} {} {}]", dtype_name(L.experts[0].gate.dtype),
                       dtype_name(L.experts[0].up.dtype), dtype_name(L.experts[0].down.dtype));
  return s;
}

std::string demo_dir(const std::string& fixtures) { return fixtures + "/../../models/demo"; }

std::string check_gguf_mix(const std::string& fixtures, bool three_types) {
  const std::string tag = three_types ? "three_types" : "q4_k_m";
  const fs::path dir = scratch_dir(tag);
  auto base = Model::load(demo_dir(fixtures));
  GgufExportOptions o{.type = gguf_mix_base(GgufMix::Q4_K_M), .name = "demo",
                      .mix = GgufMix::Q4_K_M};
  if (three_types)
    o.type_of = [](const std::string& n) -> std::optional<uint32_t> {
      if (n == "blk.0.ffn_up_exps.weight") return static_cast<uint32_t>(QuantType::Q5_K);
      if (n == "blk.1.ffn_down_exps.weight") return static_cast<uint32_t>(QuantType::Q4_0);
      if (n == "blk.3.ffn_gate_exps.weight") return k_ggml_bf16;
      if (n == "blk.4.ffn_up_exps.weight") return static_cast<uint32_t>(QuantType::Q8_0);
      return std::nullopt;
    };
  GgufWriter w;
  gguf_add_model(w, *base, o);
  const std::string path = w.write((dir / "m.gguf").string()).front();
  auto m = Model::load(path);
  const std::string f = formats_of(*m);
  std::fprintf(stderr, "  %s experts: %s\n", tag.c_str(), f.c_str());
  std::string err;
  const auto& Ls = m->weights().layers;
  if (Ls[0].experts[0].down.dtype == Ls[2].experts[0].down.dtype)
    err += tag + ": layers 0 and 2 have the same down type (no mix): " + f + "\n";
  if (three_types && (Ls[0].experts[0].up.dtype == Ls[0].experts[0].gate.dtype ||
                      Ls[3].experts[0].gate.dtype != DType::BF16))
    err += tag + ": the forced types did not apply: " + f + "\n";
  if (err.empty()) err = check_model(*m, path, tag, dir);
  fs::remove_all(dir);
  return err;
}

std::string check_scaled(const std::string& fixtures, const std::string& type) {
  const fs::path dir = scratch_dir(type);
  auto base = Model::load(demo_dir(fixtures));
  const std::string q = (dir / "q").string();
  write_ft_checkpoint(*base, demo_dir(fixtures), q, {.type = type});
  auto m = Model::load(q);
  const std::string f = formats_of(*m);
  std::fprintf(stderr, "  %s experts: %s\n", type.c_str(), f.c_str());
  const DType want = type == "fp8" ? DType::F8_E4M3_B128 : DType::NVFP4;
  std::string err;
  if (m->weights().layers[0].experts[0].down.dtype != want)
    err = type + ": experts are not " + std::string(dtype_name(want)) + ": " + f + "\n";
  if (err.empty()) err = check_model(*m, q, type, dir);
  fs::remove_all(dir);
  return err;
}
}  // namespace

std::vector<Check> mixed_checks(const std::string& fixtures_dir) {
  return {{"mixed_gguf_q4_k_m", [fixtures_dir] { return check_gguf_mix(fixtures_dir, false); }},
          {"mixed_gguf_three_types", [fixtures_dir] { return check_gguf_mix(fixtures_dir, true); }},
          {"mixed_fp8_experts", [fixtures_dir] { return check_scaled(fixtures_dir, "fp8"); }},
          {"mixed_nvfp4_experts", [fixtures_dir] { return check_scaled(fixtures_dir, "nvfp4"); }}};
}

}  // namespace ft::cuda_checks
