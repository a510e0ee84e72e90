// ft bench bw: the bandwidths that decide between offload and hybrid, measured with the real
// code paths on synthetic Qwen3-MoE-shaped experts in pinned host memory:
//   PCIe linear  pinned host -> device, 256 MiB copies;
//   PCIe gather  GpuExpertStore::ensure (hybrid's decode fetch path: host bookkeeping, copy
//                stream) on random misses;
//   CPU experts  CpuExperts::apply (the CPU expert kernel), 1-token decode calls over
//                rotating experts (working set >> last-level cache);
//   concurrent   both loops at the same time (they share DRAM);
//   A/B          end-to-end decode of the offloaded CudaTransformer, offload vs hybrid, at the
//                same slot count;
//   per GPU      with several GPUs (--devices): pinned H2D of each GPU alone and of all of them
//                at once (tensor parallelism's per-GPU figure: their links share the host).
// Writes the profile (experts/bw_profile.h) keyed by GPU name and expert format; `ft serve
// --moe-backend auto` reads it.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <random>
#include <thread>

#include <unistd.h>

#include "backend/cpu/kernels.h"
#include "backend/cuda/cuda_ops.h"
#include "base/error.h"
#include "base/timer.h"
#include "cli/bench_bw.h"
#include "cli/bench_offload.h"
#include "engine/sampler.h"
#include "experts/bw_devices.h"
#include "experts/bw_profile.h"
#include "experts/experts.h"
#include "experts/gpu_expert_store.h"
#include "model/cuda_transformer.h"

namespace ft::cli {

namespace {
struct BwOptions {
  int64_t layers = 8, experts = 128, top_k = 8, hidden = 2048, expert_dim = 768;
  double seconds = 2;        // per measurement
  double cache_rate = 0.25;  // A/B: expert slots as a fraction of all experts
  int64_t decode = 32;       // A/B: measured decode tokens per backend
  int threads = 0;
  std::string out;           // profile path (default: bw_profile_path())
  bool no_ab = false;
  std::string devices = "auto";  // auto (every GPU when several) | all | 0,1,...
  bool devices_only = false;     // only the per-GPU H2D figures, merged into the profile
};

constexpr double GB = 1e9;

// --devices: the GPUs whose host->GPU bandwidth is measured alone and together.
std::vector<int> parse_devices(const std::string& s) {
  const int n = cuda::device_count();
  std::vector<int> d;
  if (s == "auto" || s == "all") {
    if (s == "all" || n > 1)
      for (int i = 0; i < n; ++i) d.push_back(i);
    return d;
  }
  size_t at = 0;
  while (at <= s.size()) {
    const size_t comma = std::min(s.find(',', at), s.size());
    const std::string item = s.substr(at, comma - at);
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end || v < 0 || v >= n)
      fail("--devices '{}': expected auto, all or GPU indices below {} (e.g. 0,1)", s, n);
    if (std::find(d.begin(), d.end(), int(v)) == d.end()) d.push_back(static_cast<int>(v));
    at = comma + 1;
  }
  return d;
}

// Each GPU alone, then all at once; prints the table and fills the entry.
void measure_devices(const std::vector<int>& devices, BwEntry& e) {
  if (devices.empty()) return;
  const H2dBandwidth b = measure_h2d(devices);
  e.pcie_gpu_alone_gbs.clear(), e.pcie_gpu_concurrent_gbs.clear();
  double alone = 0, together = 0;
  std::printf("| GPU | H2D alone GB/s | H2D all %zu at once GB/s |\n|---|---|---|\n",
              devices.size());
  for (size_t i = 0; i < devices.size(); ++i) {
    e.pcie_gpu_alone_gbs.push_back(b.alone[i] / GB);
    e.pcie_gpu_concurrent_gbs.push_back(b.concurrent[i] / GB);
    alone += b.alone[i] / GB, together += b.concurrent[i] / GB;
    std::printf("| %d | %.1f | %.1f |\n", devices[i], b.alone[i] / GB, b.concurrent[i] / GB);
  }
  std::printf("| sum | %.1f | %.1f (%.0f%% of the sum alone) |\n", alone, together,
              100 * together / alone);
  std::printf("per-GPU host->GPU under tensor parallelism %zu: %.1f GB/s\n", devices.size(),
              e.pcie_per_gpu_gbs(static_cast<int>(devices.size())));
  std::fflush(stdout);
}


// Pinned -> device, 256 MiB copies on the copy stream, best of 8 (bytes/s).
double pcie_linear(const HostExperts& host) {
  const size_t bytes = std::min<size_t>(size_t{256} << 20, host.matrix_bytes());
  cuda::DeviceBuffer dst(bytes);
  cuda::CopyStream s;
  double best = 0;
  for (int rep = 0; rep < 8; ++rep) {
    Timer t;
    s.copy_to_device(dst.data(), host.gate(0), bytes);
    s.synchronize();
    best = std::max(best, bytes / t.seconds());
  }
  return best;
}

// Hybrid's decode fetch path: a one-layer slot pool, each call asks for top_k random experts of a
// rotating layer (almost all misses), waits for the copies. Runs until `stop` or `seconds`.
double pcie_gather(const HostExperts& host, int64_t top_k, double seconds,
                   const std::atomic<bool>* stop = nullptr) {
  GpuExpertStore store(host, host.n_experts);
  std::mt19937 rng(3);
  std::vector<int32_t> ids(top_k), slots(top_k), all(host.n_experts);
  for (int64_t e = 0; e < host.n_experts; ++e) all[e] = static_cast<int32_t>(e);
  std::vector<int64_t> moe;
  for (int64_t l = 0; l < host.n_layers; ++l)
    if (host.has_layer(l)) moe.push_back(l);
  const size_t b0 = store.stats().fetched_bytes;
  Timer t;
  for (size_t i = 0; stop ? !stop->load() : t.seconds() < seconds; ++i) {
    std::shuffle(all.begin(), all.end(), rng);
    std::copy(all.begin(), all.begin() + top_k, ids.begin());
    store.ensure(moe[i % moe.size()], ids.data(), top_k, slots.data());
    cuda::synchronize();
  }
  return (store.stats().fetched_bytes - b0) / t.seconds();
}

// ModelWeights whose experts are views of the pinned stacks (what the CPU kernel reads).
ModelWeights host_expert_views(const HostExperts& host) {
  ModelWeights w;
  w.layers.resize(host.n_layers);
  const size_t each = host.expert_matrix_bytes();
  for (int64_t l = 0; l < host.n_layers; ++l) {
    if (!host.has_layer(l)) continue;
    for (int64_t e = 0; e < host.n_experts; ++e) {
      auto view = [&](const char* base, int64_t rows, int64_t cols) {
        TensorView v;
        v.dtype = host.dtype;
        v.ndim = 2;
        v.shape = {rows, cols, 1, 1};
        v.data = base + e * each;
        return v;
      };
      w.layers[l].experts.push_back({view(host.gate(l), host.inter, host.hidden),
                                     view(host.up(l), host.inter, host.hidden),
                                     view(host.down(l), host.hidden, host.inter)});
    }
  }
  return w;
}

// The CPU expert kernel on 1-token decode calls, top_k distinct experts of a rotating layer
// each (expert bytes read per second).
double cpu_experts(const HostExperts& host, ThreadPool& pool, int64_t top_k, double seconds,
                   const std::atomic<bool>* stop = nullptr) {
  const ModelWeights w = host_expert_views(host);
  CpuExperts ex(w, host.hidden, host.inter, pool);
  std::vector<float> x(host.hidden, 0.01f), out(host.hidden), weights(top_k, 1.f / top_k);
  std::vector<int32_t> ids(top_k);
  std::vector<int64_t> moe;
  for (int64_t l = 0; l < host.n_layers; ++l)
    if (host.has_layer(l)) moe.push_back(l);
  int64_t calls = 0, next = 0;
  Timer t;
  for (; stop ? !stop->load() : t.seconds() < seconds; ++calls) {
    for (auto& id : ids) id = static_cast<int32_t>(next++ % host.n_experts);
    ex.apply({.layer = moe[calls % moe.size()], .x = x.data(), .n_tokens = 1, .ids = ids.data(),
              .weights = weights.data(), .top_k = top_k, .out = out.data()});
  }
  return double(calls) * top_k * host.expert_bytes() / t.seconds();
}

// Decode tokens/s of the offloaded transformer (resident part: `model`; experts: offload's),
// after a 16-token prompt and 4 warm-up steps.
double decode_tps(const Model& model, const CudaOffload& offload, int64_t decode) {
  const ModelConfig& c = model.config();
  CudaTransformer tf(model, 16 + decode + 8, 256, offload);
  std::mt19937 rng(7);
  std::vector<int32_t> prompt(16);
  for (auto& id : prompt) id = static_cast<int32_t>(rng() % c.vocab_size);
  std::vector<float> logits(c.vocab_size);
  tf.forward(prompt.data(), 16, 0, logits.data(), false);
  int32_t next = argmax(logits.data(), c.vocab_size);
  int64_t pos = 16;
  for (int i = 0; i < 4; ++i, ++pos) next = greedy_step(tf, next, pos, logits);
  Timer t;
  for (int64_t i = 0; i < decode; ++i, ++pos) next = greedy_step(tf, next, pos, logits);
  return decode / t.seconds();
}

// The end-to-end A/B: the same synthetic model and slot count, offload then hybrid.
void decode_ab(const BwOptions& o, const ModelConfig& c, const HostExperts& host, BwEntry& e) {
  ModelConfig stand_in = c;  // resident weights; its experts are width-8 stand-ins never read
  stand_in.expert_dim = 8;
  auto model = Model::synthetic(stand_in, 42);
  const int64_t all = host.moe_layers * host.n_experts;
  const int64_t slots =
      std::clamp<int64_t>(static_cast<int64_t>(o.cache_rate * all), host.n_experts, all);
  e.offload_tokens_per_s =
      decode_tps(*model, {.experts = &host, .slots = slots}, o.decode);
  std::printf("A/B decode at %lld of %lld slots: offload %.2f tok/s", (long long)slots,
              (long long)all, e.offload_tokens_per_s);
  std::fflush(stdout);
  // Hybrid splits misses with the concurrent bandwidths, as ft serve would from this profile.
  const bool ov = e.pcie_overlap_gbs > 0 && e.cpu_overlap_gbs > 0;
  e.hybrid_tokens_per_s = decode_tps(
      *model,
      {.experts = &host, .slots = slots, .mode = MoeMode::HYBRID,
       .pcie_Bps = GB * (ov ? e.pcie_overlap_gbs : e.pcie_gather_gbs),
       .cpu_Bps = GB * (ov ? e.cpu_overlap_gbs : e.cpu_expert_gbs), .cpu_threads = o.threads},
      o.decode);
  std::printf(", hybrid %.2f tok/s\n", e.hybrid_tokens_per_s);
  std::fflush(stdout);
}

std::string utc_now() {
  std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return buf;
}

// The profile at `path` (or a new one), other GPUs' entries kept.
BwProfile load_profile(const std::string& path) {
  BwProfile p;
  try {
    if (auto old = read_bw_profile(path)) p = *old;
  } catch (const Error& err) {
    std::printf("replacing %s (%s)\n", path.c_str(), err.what());
  }
  return p;
}

void run_bench_bw(const BwOptions& o) {
  if (cuda::device_count() == 0) fail("ft bench bw needs a CUDA device: {}", cuda::device_summary());
  const std::vector<int> devices = parse_devices(o.devices);
  if (o.devices_only) {  // merged into this GPU's existing entry
    if (devices.empty()) fail("--devices-only: one GPU visible; pass --devices 0 to measure it");
    const std::string path = o.out.empty() ? bw_profile_path() : o.out;
    const std::string summary = cuda::device_summary();
    const std::string gpu = summary.substr(0, summary.find(','));
    std::printf("device: %s; %d GPUs visible\n", summary.c_str(), cuda::device_count());
    BwProfile p = load_profile(path);
    BwEntry& e = p.gpus[gpu]["bf16"];
    measure_devices(devices, e);
    p.timestamp = utc_now();
    write_bw_profile(p, path);
    std::printf("profile written to %s (GPU '%s', format bf16)\n", path.c_str(), gpu.c_str());
    return;
  }
  const int threads = o.threads > 0
                          ? o.threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const ModelConfig c =
      synthetic_moe_config({.layers = o.layers, .experts = o.experts, .top_k = o.top_k,
                            .hidden = o.hidden, .expert_dim = o.expert_dim, .heads = 32,
                            .kv_heads = 4, .head_dim = 128, .vocab = 151936});
  Timer tb;
  const HostExperts host = HostExperts::synthetic(c, 43, threads);
  const std::string summary = cuda::device_summary();
  const std::string gpu = summary.substr(0, summary.find(','));
  std::printf("device: %s; cpu kernels %s\n", summary.c_str(), cpu::kernels().isa);
  std::printf("synthetic experts: %lld layers x %lld experts top-%lld, hidden %lld, width %lld, "
              "bf16, %.2f GB pinned (%.1f s)\n",
              (long long)o.layers, (long long)o.experts, (long long)o.top_k,
              (long long)o.hidden, (long long)o.expert_dim, host.total_bytes() / GB, tb.seconds());
  std::fflush(stdout);
  BwEntry e;
  ThreadPool pool(o.threads);
  e.pcie_linear_gbs = pcie_linear(host) / GB;
  e.pcie_gather_gbs = pcie_gather(host, o.top_k, o.seconds) / GB;
  e.cpu_expert_gbs = cpu_experts(host, pool, o.top_k, o.seconds) / GB;
  {  // concurrently: the CPU loop on a thread, the GPU gathers here
    std::atomic<bool> stop{false};
    double cpu_bps = 0;
    std::thread cpu_loop([&] { cpu_bps = cpu_experts(host, pool, o.top_k, 0, &stop); });
    std::thread timer([&] {
      std::this_thread::sleep_for(std::chrono::duration<double>(o.seconds));
      stop = true;
    });
    e.pcie_overlap_gbs = pcie_gather(host, o.top_k, 0, &stop) / GB;
    timer.join();
    cpu_loop.join();
    e.cpu_overlap_gbs = cpu_bps / GB;
  }
  std::printf("| measure | GB/s |\n|---|---|\n");
  std::printf("| PCIe linear (pinned H2D, 256 MiB) | %.1f |\n", e.pcie_linear_gbs);
  std::printf("| PCIe gather (hybrid decode fetch path), alone | %.1f |\n", e.pcie_gather_gbs);
  std::printf("| CPU experts (1-token decode, %d threads), alone | %.1f |\n", pool.size(),
              e.cpu_expert_gbs);
  std::printf("| PCIe gather, concurrent | %.1f |\n", e.pcie_overlap_gbs);
  std::printf("| CPU experts, concurrent | %.1f |\n", e.cpu_overlap_gbs);
  std::printf("hybrid fetch fraction (concurrent pair): %.3f\n", e.hybrid_fetch_fraction());
  std::fflush(stdout);
  measure_devices(devices, e);
  e.model = fmt::format("synthetic {}x{} top-{} hidden {} width {} bf16, {:.0f}% slots",
                        o.layers, o.experts, o.top_k, o.hidden, o.expert_dim, 100 * o.cache_rate);
  if (!o.no_ab) decode_ab(o, c, host, e);
  e.recommended = recommend_backend(e);
  std::printf("recommended: %s\n", e.recommended.c_str());
  const std::string path = o.out.empty() ? bw_profile_path() : o.out;
  BwProfile p = load_profile(path);  // keep other GPUs' entries
  char host_name[256] = {};
  ::gethostname(host_name, sizeof host_name - 1);
  p.host = host_name;
  p.cpu = cpu::kernels().isa;
  p.timestamp = utc_now();
  p.gpus[gpu]["bf16"] = e;
  write_bw_profile(p, path);
  std::printf("profile written to %s (GPU '%s', format bf16)\n", path.c_str(), gpu.c_str());
}
}  // namespace

void add_bench_bw_command(CLI::App& bench) {
  auto o = std::make_shared<BwOptions>();
  auto* cmd = bench.add_subcommand(
      "bw", "PCIe and CPU expert-kernel bandwidth, alone and concurrent, offload vs hybrid "
            "decode A/B; writes the profile --moe-backend auto reads");
  cmd->add_option("--layers", o->layers, "MoE layers of synthetic experts")
      ->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--experts", o->experts, "Experts per layer")->check(CLI::PositiveNumber);
  cmd->add_option("--top-k", o->top_k, "Experts per token")->check(CLI::PositiveNumber);
  cmd->add_option("--hidden", o->hidden, "Hidden size")->check(CLI::PositiveNumber);
  cmd->add_option("--expert-dim", o->expert_dim, "Expert width")->check(CLI::PositiveNumber);
  cmd->add_option("--seconds", o->seconds, "Seconds per bandwidth measurement")
      ->check(CLI::Range(0.1, 60.0))->capture_default_str();
  cmd->add_option("--cache-rate", o->cache_rate, "A/B: expert slots as a fraction of all")
      ->check(CLI::Range(0.0, 1.0))->capture_default_str();
  cmd->add_option("--decode", o->decode, "A/B: measured decode tokens per backend")
      ->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--threads", o->threads, "CPU threads (0: one per core)");
  cmd->add_option("--out", o->out, "Profile path (default: $XDG_CACHE_HOME/ft/bw_profile.json)");
  cmd->add_flag("--no-ab", o->no_ab, "Skip the end-to-end decode A/B");
  cmd->add_option("--devices", o->devices,
                  "GPUs whose host->GPU bandwidth is measured alone and all at once: auto "
                  "(every GPU when several are visible), all, or indices (0,1)")
      ->capture_default_str();
  cmd->add_flag("--devices-only", o->devices_only,
                "Measure only the per-GPU host->GPU figures and merge them into the profile");
  cmd->callback([o] {
    if (o->top_k > o->experts) fail("--top-k must not exceed --experts");
    run_bench_bw(*o);
  });
}

}  // namespace ft::cli
