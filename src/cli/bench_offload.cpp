// ft bench offload: a synthetic model with Qwen3-30B-A3B's shapes (random experts in pinned
// host memory, no file; bf16 or quantized once with --expert-format, moved as they are) run by the offloaded CUDA transformer at VRAM budgets (e.g. 8,
// 16, 24 GiB and all-resident): decode and prefill tokens/s, hit rate and bytes fetched, beside
// the bound from the bandwidths measured in the same run:
//   decode  t >= bytes read from VRAM / B_vram + bytes fetched / B_pcie
//           (HYBRID rows: + max(fetched / B_pcie, CPU expert bytes / B_cpu) instead)
//   prefill tok/s <= prompt * B_pcie / bytes streamed over PCIe (every chunk streams every
//           layer: chunk * B_pcie / bytes of all experts, less the experts already cached,
//           which are copied within VRAM).
// Then an agent's next turn on the same cache: decode right after the last prefill (the cache
// outside the streaming buffers survives it), and small extends (--extends tokens appended, as a
// short tool result) timed against their PCIe bytes (streamed or fetched) / B_pcie.
// Prompts whose KV cache does not fit a budget beside the minimum expert pool are marked so.
#include "cli/bench_offload.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <thread>

#include "backend/cpu/thread_pool.h"
#include "backend/cuda/cuda_ops.h"
#include "base/env.h"
#include "base/error.h"
#include "ops/ops.h"
#include "engine/sampler.h"
#include "base/timer.h"
#include "cache/memory_plan.h"
#include "experts/gpu_expert_store.h"
#include "model/cuda_transformer.h"
#include "quant/quant.h"

namespace ft::cli {

int32_t greedy_step(CudaTransformer& tf, int32_t id, int64_t pos, std::vector<float>& logits) {
  static const bool device = env_on("FT_DEVICE_ARGMAX");
  if (device) return tf.forward_argmax(&id, 1, pos);
  tf.forward(&id, 1, pos, logits.data(), false);
  return argmax(logits.data(), static_cast<int64_t>(logits.size()));
}

namespace {
struct OffloadBenchOptions {
  std::vector<std::string> budgets = {"8GiB", "16GiB", "24GiB", "all"};
  int64_t layers = 48, experts = 128, top_k = 8, hidden = 2048, expert_dim = 768, heads = 32,
          kv_heads = 4, head_dim = 128, vocab = 151936;
  std::vector<int64_t> prompts = {512, 4096, 16384};
  std::vector<int64_t> extends = {8, 16};
  std::vector<std::string> hybrid_budgets = {"8GiB"};
  int64_t decode = 64, decode_prompt = 16, chunk = 4096, warmup = 4;
  int threads = 0;
  bool graphs = true;
  std::string out;
  std::string expert_format = "bf16";  // bf16 or a block format (q4_k, mxfp4, q8_0, ...)
  std::string kv = "bf16";             // KV cache element type: bf16 or f32
  DType kv_dtype = DType::BF16;
};

DType expert_dtype(const std::string& f) {
  if (f == "bf16" || f == "BF16") return DType::BF16;
  return quant::to_dtype(quant::parse(f));
}

ModelConfig offload_config(const OffloadBenchOptions& o) {
  return synthetic_moe_config({.layers = o.layers, .experts = o.experts, .top_k = o.top_k,
                               .hidden = o.hidden, .expert_dim = o.expert_dim, .heads = o.heads,
                               .kv_heads = o.kv_heads, .head_dim = o.head_dim, .vocab = o.vocab});
}

// Pinned host -> device, 1 GiB copies on the copy stream, best of 5 (bytes/s).
double pcie_bandwidth(const void* pinned, size_t bytes) {
  cuda::DeviceBuffer dst(bytes);
  cuda::CopyStream s;
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    Timer t;
    s.copy_to_device(dst.data(), pinned, bytes);
    s.synchronize();
    best = std::max(best, bytes / t.seconds());
  }
  return best;
}

// Device-to-device copy of 2 GiB, best of 5; counts read + write bytes (bytes/s).
double vram_bandwidth() {
  const size_t bytes = size_t{2} << 30;
  cuda::DeviceBuffer a(bytes), b(bytes);
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    Timer t;
    cuda::copy_on_device(b.data(), a.data(), bytes);
    cuda::synchronize();
    best = std::max(best, 2.0 * bytes / t.seconds());
  }
  return best;
}

// CPU expert bandwidth: ops::matmul of one token through 16 different expert matrices on a
// thread pool of all cores, best of 3 rounds on 3 different layers (bytes/s), as the HYBRID
// split's B_cpu.
double cpu_bandwidth(const HostExperts& host, int threads) {
  ThreadPool pool(threads, false);
  const int64_t I = host.inter, H = host.hidden;
  std::vector<int64_t> moe;
  for (int64_t l = 0; l < host.n_layers; ++l)
    if (host.has_layer(l)) moe.push_back(l);
  std::vector<float> x(H, 0.01f), y(16 * I);
  std::vector<TensorView> views(16);
  double best = 0;
  // Each round reads 16 gate matrices of another MoE layer: a round that re-read the last one's
  // (tens of MB) found them in the last-level cache and reported ~4x the DRAM rate (281.7 vs
  // 74.8 GB/s on the same 2xH200 host), which skewed HYBRID's split.
  for (int rep = 0; rep < 3; ++rep) {
    const int64_t l = moe[(rep * moe.size()) / 3];
    std::vector<ops::GemmProblem> problems;
    for (int j = 0; j < 16; ++j) {
      TensorView& t = views[j];
      t.dtype = host.dtype, t.ndim = 2, t.shape = {I, H, 1, 1}, t.name = "expert";
      t.data = host.gate(l) + (j % host.n_experts) * host.expert_matrix_bytes();
      problems.push_back({x.data(), 1, &views[j], y.data() + j * I});
    }
    Timer t;
    ops::matmul_grouped(pool, problems);
    best = std::max(best, 16.0 * host.expert_matrix_bytes() / t.seconds());
  }
  return best;
}

// Attention alone at the model's shapes (zeroed q/k/v; the kernels' time does not depend on the
// values): every chunk of a prompt at its offset, one layer; the seconds for every layer and
// the rate in TFLOP/s (4 * head_dim * heads FLOP per causal (query, key) pair).
std::string attention_line(const ModelConfig& c, DType kv, int64_t prompt, int64_t chunk) {
  const int64_t hd = c.head_dim, heads = c.n_heads, kvd = c.n_kv_heads * hd;
  const size_t es = kv == DType::BF16 ? 2 : 4;
  const int64_t rows = std::min(chunk, prompt);
  cuda::DeviceBuffer q(rows * heads * hd * 4), out(rows * heads * hd * 4), k(prompt * kvd * es),
      v(prompt * kvd * es);
  for (auto* b : {&q, &k, &v}) cuda::memset_async(b->data(), 0, b->bytes());
  double secs = 0, pairs = 0;
  for (int64_t pos0 = 0; pos0 < prompt; pos0 += chunk) {
    const int64_t n = std::min(chunk, prompt - pos0);
    const cuda::AttentionArgs a{.q = q.as<float>(),
                                .n_tokens = n,
                                .pos0 = pos0,
                                .k_cache = k.data(),
                                .v_cache = v.data(),
                                .n_heads = heads,
                                .n_kv_heads = c.n_kv_heads,
                                .head_dim = hd,
                                .scale = 1.f / std::sqrt(static_cast<float>(hd)),
                                .out = out.as<float>(),
                                .kv_dtype = kv};
    cuda::attention(a);  // warm-up (first launch, shared-memory carve-out)
    cuda::synchronize();
    Timer t;
    cuda::attention(a);
    cuda::synchronize();
    secs += t.seconds();
    pairs += double(n) * pos0 + n * (n + 1) / 2.0;
  }
  return fmt::format(
      "attention ({} KV): prompt {} in chunks of {}: {} layers x {:.1f} ms = {:.2f} s, {:.1f} "
      "TFLOP/s\n",
      kv == DType::BF16 ? "bf16" : "f32", prompt, chunk, c.n_layers, secs * 1e3,
      secs * c.n_layers, 4.0 * hd * heads * pairs / secs / 1e12);
}

struct Row {
  std::string budget, refused, mode = "offload";
  int64_t slots = 0;
  double used_gib = 0, decode_tps = 0, decode_bound = 0, hit_rate = 0, fetched_mb = 0,
         cpu_mb = 0;
  double split_ms[4] = {};  // decode time split per token: attention, routing, hits, fetch
  // Per prompt: tok/s (< 0: KV does not fit), bound (0: all resident), streamed GB.
  std::vector<double> prefill_tps, prefill_bound, prefill_gb;
  // The next turn: decode tok/s right after the last prefill; per extend its ms and PCIe GB.
  double turn_tps = 0, turn_bound = 0, turn_hit_rate = 0, turn_fetched_mb = 0;
  std::vector<double> extend_ms, extend_gb;
};

Row run_budget(const OffloadBenchOptions& o, const Model& model, const HostExperts& host,
               const std::string& budget, double b_pcie, double b_vram, double b_cpu,
               MoeMode mode) {
  const ModelConfig& c = model.config();
  Row row;
  row.budget = budget;
  row.mode = mode == MoeMode::HYBRID ? "hybrid" : "offload";
  size_t free0 = 0, total = 0;
  cuda::memory_info(&free0, &total);
  const int64_t all = host.moe_layers * host.n_experts;
  const bool decode_only = mode == MoeMode::HYBRID;
  // The largest prompt whose KV fits beside the minimum expert pool decides the capacity.
  std::vector<int64_t> prompts = decode_only ? std::vector<int64_t>{} : o.prompts;
  std::sort(prompts.rbegin(), prompts.rend());
  MemoryPlan plan;
  int64_t capacity = 0, fit = 0;
  for (size_t i = 0; i <= prompts.size(); ++i) {
    const int64_t longest = i < prompts.size() ? prompts[i] : 0;
    capacity = longest + o.decode_prompt + o.warmup + 2 * o.decode + 8;
    for (int64_t e : o.extends) capacity += e;
    MemoryRequest req = cuda_offload_request(model, host, capacity, o.chunk,
                                             budget == "all" ? free0 : parse_size(budget), 1,
                                             o.kv_dtype);
    if (budget == "all") req.slots_override = all;
    try {
      plan = plan_memory(req);
      fit = longest;
      row.refused.clear();
      break;
    } catch (const Error& e) {
      row.refused = e.what();
    }
  }
  if (!row.refused.empty()) return row;
  row.slots = plan.expert_slots;
  CudaOffload off{.experts = &host, .slots = plan.expert_slots, .mode = mode};
  if (mode == MoeMode::HYBRID) off.pcie_Bps = b_pcie, off.cpu_Bps = b_cpu;
  CudaTransformer tf(model, capacity, o.chunk, off, 1, o.kv_dtype);
  tf.set_graphs(o.graphs);
  std::mt19937 rng(7);
  auto random_ids = [&](int64_t n) {
    std::vector<int32_t> ids(n);
    for (auto& id : ids) id = static_cast<int32_t>(rng() % c.vocab_size);
    return ids;
  };
  std::vector<float> logits(c.vocab_size);
  // Decode: a short prompt, o.warmup warm-up steps (the first captures the graph; more let the
  // expert cache reach its steady state), then the measured steps.
  const auto prompt = random_ids(o.decode_prompt);
  tf.forward(prompt.data(), o.decode_prompt, 0, logits.data(), false);
  int32_t next = argmax(logits.data(), static_cast<int64_t>(logits.size()));
  int64_t pos = o.decode_prompt;
  for (int64_t i = 0; i < o.warmup; ++i, ++pos) next = greedy_step(tf, next, pos, logits);
  const CudaRuntimeStats s0 = tf.runtime_stats();
  Timer t;
  for (int64_t i = 0; i < o.decode; ++i, ++pos) next = greedy_step(tf, next, pos, logits);
  const double decode_s = t.seconds();
  const CudaRuntimeStats s1 = tf.runtime_stats();
  // Between two stats: the hit rate and the bytes fetched per decode step.
  auto hit_rate = [&](const CudaRuntimeStats& a, const CudaRuntimeStats& b) {
    const int64_t lookups = (b.hits - a.hits) + (b.misses - a.misses);
    return tf.expert_store()->all_resident() ? 1.0
           : lookups > 0                     ? static_cast<double>(b.hits - a.hits) / lookups
                                             : 0.0;
  };
  auto fetched_per_step = [&](const CudaRuntimeStats& a, const CudaRuntimeStats& b) {
    return static_cast<double>(b.fetched_bytes - a.fetched_bytes) / o.decode;
  };
  const double fetched = fetched_per_step(s0, s1);
  const double cpu_bytes =
      static_cast<double>(s1.cpu_experts - s0.cpu_experts) * host.expert_bytes() / o.decode;
  row.decode_tps = o.decode / decode_s;
  row.hit_rate = hit_rate(s0, s1);
  row.fetched_mb = fetched / 1e6;
  row.cpu_mb = cpu_bytes / 1e6;
  const double per = 1e3 / o.decode;  // sampled decode passes (graphs replay the rest)
  row.split_ms[0] = (s1.t_attention - s0.t_attention) * per;
  row.split_ms[1] = (s1.t_routing - s0.t_routing) * per;
  row.split_ms[2] = (s1.t_hits - s0.t_hits) * per;
  row.split_ms[3] = (s1.t_fetch - s0.t_fetch) * per;
  // Bytes one decode token reads from VRAM: attention and router of every layer, top_k experts
  // per MoE layer, the lm_head (bf16 matrices), and every layer's K and V rows at the measured
  // steps' mean KV length; the bound adds the misses' bytes over their wire.
  const double attn = 2.0 * (2 * c.q_dim() * c.hidden + 2 * c.kv_dim() * c.hidden);
  auto bound = [&](double kv_len, double fetched_b, double cpu_b) {
    const double kv_bytes =
        c.n_layers * 2.0 * c.kv_dim() * kv_len * (o.kv_dtype == DType::BF16 ? 2.0 : 4.0);
    const double vram_bytes = c.n_layers * (attn + 2.0 * c.n_experts * c.hidden) +
                              host.moe_layers * c.top_k * double(host.expert_bytes()) +
                              2.0 * c.vocab_size * c.hidden + kv_bytes;
    const double miss_s = mode == MoeMode::HYBRID
                              ? std::max(fetched_b / b_pcie, cpu_b / b_cpu)
                              : fetched_b / b_pcie;
    return 1.0 / (vram_bytes / b_vram + miss_s);
  };
  row.decode_bound =
      bound(static_cast<double>(o.decode_prompt + o.warmup) + (o.decode + 1) / 2.0, fetched,
            cpu_bytes);
  // Prefill: fresh prompts at position 0 (the KV cache is overwritten). With experts streamed,
  // compute and copy overlap, so the rate is also capped by the all-resident rate.
  const double pool = static_cast<double>(all) * host.expert_bytes();
  for (int64_t p : o.prompts) {
    if (decode_only) break;
    if (p > fit) {
      row.prefill_tps.push_back(-1), row.prefill_bound.push_back(0), row.prefill_gb.push_back(0);
      continue;
    }
    const auto ids = random_ids(p);
    double best = 0, gb = 0;
    // Best of 2 for prompts of one chunk (the first pays cuBLAS's shape heuristics); longer
    // prompts reuse the chunk's shapes.
    for (int rep = 0; rep < (p > o.chunk ? 1 : 2); ++rep) {
      const size_t st0 = tf.runtime_stats().streamed_bytes;
      Timer tp;
      tf.forward(ids.data(), p, 0, logits.data(), false);
      best = std::max(best, p / tp.seconds());
      gb = (tf.runtime_stats().streamed_bytes - st0) / 1e9;
    }
    row.prefill_tps.push_back(best);
    // Every chunk streams every layer; experts already cached come from VRAM, so the PCIe
    // bound is the prompt over the bytes that did cross it.
    row.prefill_bound.push_back(tf.expert_store()->all_resident() ? 0.0
                                : gb > 0 ? p * b_pcie / (gb * 1e9)
                                         : std::min(p, o.chunk) * b_pcie / pool);
    row.prefill_gb.push_back(gb);
    pos = p;
  }
  // The next turn: decode continues after the last prompt, then small extends, each followed by
  // one decode step (as an agent's tool result and the model's answer).
  if (!decode_only && !o.prompts.empty() && o.prompts.back() <= fit) {
    next = argmax(logits.data(), static_cast<int64_t>(logits.size()));
    const CudaRuntimeStats u0 = tf.runtime_stats();
    const double kv_len = static_cast<double>(pos) + (o.decode + 1) / 2.0;
    Timer tt;
    for (int64_t i = 0; i < o.decode; ++i, ++pos) next = greedy_step(tf, next, pos, logits);
    row.turn_tps = o.decode / tt.seconds();
    const CudaRuntimeStats u1 = tf.runtime_stats();
    row.turn_hit_rate = hit_rate(u0, u1);
    row.turn_fetched_mb = fetched_per_step(u0, u1) / 1e6;
    row.turn_bound = bound(kv_len, fetched_per_step(u0, u1), 0.0);
    for (int64_t e : o.extends) {
      const auto ids = random_ids(e);
      const CudaRuntimeStats a = tf.runtime_stats();
      Timer te;
      tf.forward(ids.data(), e, pos, logits.data(), false);
      row.extend_ms.push_back(te.seconds() * 1e3);
      const CudaRuntimeStats b = tf.runtime_stats();
      row.extend_gb.push_back(double(b.streamed_bytes - a.streamed_bytes + b.fetched_bytes -
                                     a.fetched_bytes) / 1e9);
      pos += e;
      next = argmax(logits.data(), static_cast<int64_t>(logits.size()));
      tf.forward(&next, 1, pos++, logits.data(), false);
    }
  }
  size_t free1 = 0;
  cuda::memory_info(&free1, &total);
  row.used_gib = (free0 - free1) / double(size_t{1} << 30);
  return row;
}

std::string table(const OffloadBenchOptions& o, const std::vector<Row>& rows, int64_t all,
                  double b_pcie) {
  std::string s =
      "| budget | mode | expert slots | VRAM used | decode tok/s | decode bound | ratio | "
      "hit rate | fetched MB/token | CPU MB/token | split ms/token attn/route/hits/fetch |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const Row& r : rows) {
    if (!r.refused.empty()) {
      s += fmt::format("| {} | {} | refused: {} |\n", r.budget, r.mode, r.refused);
      continue;
    }
    s += fmt::format(
        "| {} | {} | {} of {} | {:.2f} GiB | {:.2f} | {:.2f} | {:.0f}% | {:.1f}% | {:.1f} | "
        "{:.1f} | {:.2f}/{:.2f}/{:.2f}/{:.2f} |\n",
        r.budget, r.mode, r.slots, all, r.used_gib, r.decode_tps, r.decode_bound,
        100 * r.decode_tps / r.decode_bound, 100 * r.hit_rate, r.fetched_mb, r.cpu_mb,
        r.split_ms[0], r.split_ms[1], r.split_ms[2], r.split_ms[3]);
  }
  s += "\n| budget | prompt | prefill tok/s | bound (PCIe) | ratio | streamed GB |\n"
       "|---|---|---|---|---|---|\n";
  for (const Row& r : rows) {
    if (!r.refused.empty() || r.prefill_tps.empty()) continue;
    for (size_t i = 0; i < r.prefill_tps.size(); ++i) {
      const int64_t p = o.prompts[i];
      if (r.prefill_tps[i] < 0)
        s += fmt::format("| {} | {} | KV does not fit | - | - | - |\n", r.budget, p);
      else if (r.prefill_bound[i] > 0)
        s += fmt::format("| {} | {} | {:.0f} | {:.0f} | {:.0f}% | {:.1f} |\n", r.budget, p,
                         r.prefill_tps[i], r.prefill_bound[i],
                         100 * r.prefill_tps[i] / r.prefill_bound[i], r.prefill_gb[i]);
      else
        s += fmt::format("| {} | {} | {:.0f} | (no PCIe) | - | 0 |\n", r.budget, p,
                         r.prefill_tps[i]);
    }
  }
  s += "\n| budget | decode tok/s (steady) | decode tok/s right after a prefill (bound, ratio, "
       "hit rate, fetched MB/token) | extends: tokens ms (PCIe GB, bound ms) |\n|---|---|---|---|\n";
  for (const Row& r : rows) {
    if (!r.refused.empty() || r.turn_tps <= 0) continue;
    std::string ext;
    for (size_t i = 0; i < r.extend_ms.size(); ++i)
      ext += fmt::format("{}{}: {:.1f} ms ({:.2f} GB, {:.1f})", i ? "; " : "", o.extends[i],
                         r.extend_ms[i], r.extend_gb[i], r.extend_gb[i] / b_pcie * 1e12);
    s += fmt::format("| {} | {:.2f} | {:.2f} ({:.2f}, {:.0f}%, {:.1f}%, {:.1f}) | {} |\n", r.budget,
                     r.decode_tps, r.turn_tps, r.turn_bound, 100 * r.turn_tps / r.turn_bound,
                     100 * r.turn_hit_rate, r.turn_fetched_mb, ext);
  }
  return s;
}

void run_bench_offload(const OffloadBenchOptions& o) {
  if (cuda::device_count() == 0)
    fail("ft bench offload needs a CUDA device: {}", cuda::device_summary());
  const int threads = o.threads > 0
                          ? o.threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const ModelConfig c = offload_config(o);
  // The Model holds the resident weights; its experts are width-8 stand-ins never read (the
  // real-width experts are the pinned HostExperts).
  ModelConfig stand_in = c;
  stand_in.expert_dim = 8;
  Timer tb;
  auto model = Model::synthetic(stand_in, 42);
  const double model_s = tb.seconds();
  tb.reset();
  const HostExperts host = HostExperts::synthetic(c, 43, threads, expert_dtype(o.expert_format));
  const double host_s = tb.seconds();
  std::printf("device: %s\n", cuda::device_summary().c_str());
  std::printf(
      "synthetic qwen3_moe: %lld layers, %lld experts top-%lld, hidden %lld, expert width "
      "%lld, vocab %lld; experts %s, %.2f MB each, %.2f GB pinned (%.1f s), resident part "
      "built in %.1f s\n",
      (long long)c.n_layers, (long long)c.n_experts, (long long)c.top_k, (long long)c.hidden,
      (long long)c.expert_dim, (long long)c.vocab_size, std::string(dtype_name(host.dtype)).c_str(),
      host.expert_bytes() / 1e6, host.total_bytes() / 1e9, host_s, model_s);
  const double b_pcie =
      pcie_bandwidth(host.gate(0), std::min<size_t>(host.matrix_bytes() * 3, size_t{1} << 30));
  const double b_vram = vram_bandwidth();
  const bool hybrid = std::any_of(o.hybrid_budgets.begin(), o.hybrid_budgets.end(),
                                  [](const std::string& b) { return b != "none"; });
  const double b_cpu = hybrid ? cpu_bandwidth(host, threads) : 0.0;
  std::printf(
      "B_pcie (pinned H2D, 1 GiB copies) %.1f GB/s; B_vram (D2D copy, read+write) %.0f "
      "GB/s; B_cpu (expert GEMV, %d threads) %.1f GB/s; prefill chunk %lld tokens; decode from "
      "KV length %lld\n",
      b_pcie / 1e9, b_vram / 1e9, threads, b_cpu / 1e9, (long long)o.chunk,
      (long long)o.decode_prompt);
  std::string attn;
  for (int64_t p : o.prompts)  // f32 caches (TF32 tensor-core kernel) beside bf16 (flash)
    for (DType kv : {DType::F32, DType::BF16}) attn += attention_line(c, kv, p, o.chunk);
  std::printf("%s", attn.c_str());
  std::vector<Row> rows;
  auto run = [&](const std::string& b, MoeMode mode) {
    Timer tr;
    rows.push_back(run_budget(o, *model, host, b, b_pcie, b_vram, b_cpu, mode));
    std::printf("budget %s %s done in %.1f s%s\n", b.c_str(), rows.back().mode.c_str(),
                tr.seconds(), rows.back().refused.empty() ? "" : " (refused)");
    std::fflush(stdout);
  };
  for (const std::string& b : o.budgets)
    if (b != "none") run(b, MoeMode::OFFLOAD);
  for (const std::string& b : o.hybrid_budgets)
    if (b != "none") run(b, MoeMode::HYBRID);
  const std::string t = table(o, rows, host.moe_layers * host.n_experts, b_pcie);
  std::printf("\n%s", t.c_str());
  if (!o.out.empty()) {
    std::ofstream f(o.out);
    f << fmt::format("B_pcie {:.1f} GB/s, B_vram {:.0f} GB/s, B_cpu {:.1f} GB/s, chunk {}\n\n",
                     b_pcie / 1e9, b_vram / 1e9, b_cpu / 1e9, o.chunk)
      << attn << "\n" << t;
  }
}
}  // namespace

void declare_bench_offload(CLI::App& cmd) {
  auto o = std::make_shared<OffloadBenchOptions>();
  cmd.add_option("--budgets", o->budgets, "VRAM budgets (8GiB, 24g, ... or all)");
  cmd.add_option("--layers", o->layers, "Layers")->check(CLI::PositiveNumber);
  cmd.add_option("--experts", o->experts, "Experts per layer")->check(CLI::PositiveNumber);
  cmd.add_option("--top-k", o->top_k, "Experts per token")->check(CLI::PositiveNumber);
  cmd.add_option("--expert-dim", o->expert_dim, "Expert width")->check(CLI::PositiveNumber);
  cmd.add_option("--vocab", o->vocab, "Vocabulary size")->check(CLI::PositiveNumber);
  cmd.add_option("--prompts", o->prompts, "Prefill prompt lengths");
  cmd.add_option("--extends", o->extends,
                 "Tokens appended after the last prompt's decode (an agent's next turn)");
  cmd.add_option("--hybrid-budgets", o->hybrid_budgets,
                 "Budgets also run in HYBRID mode (decode; misses split PCIe/CPU; none: no rows)");
  cmd.add_option("--decode", o->decode, "Measured decode steps")->check(CLI::PositiveNumber);
  cmd.add_option("--decode-context", o->decode_prompt,
                 "Tokens prefilled before the decode steps (the KV length decode starts at)")
      ->check(CLI::PositiveNumber);
  cmd.add_option("--warmup", o->warmup,
                 "Decode steps before the measured ones (the expert cache warms up)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd.add_option("--chunk", o->chunk, "Prefill chunk (tokens per pass)")
      ->check(CLI::PositiveNumber);
  cmd.add_option("--graphs", o->graphs, "Replay decode steps as CUDA graphs (false: launch ops)");
  cmd.add_option("--threads", o->threads, "Host threads building the experts (0: all cores)");
  cmd.add_option("--out", o->out, "Also write the markdown table to this file");
  cmd.add_option("--expert-format", o->expert_format,
                 "Expert weights: bf16 or a block format (q4_k, mxfp4, q8_0, q6_k, ...)");
  cmd.add_option("--kv", o->kv, "KV cache element type: bf16 or f32")
      ->check(CLI::IsMember({"bf16", "f32"}));
  cmd.callback([o] {
    if (o->top_k > o->experts) fail("--top-k must not exceed --experts");
    o->kv_dtype = o->kv == "f32" ? DType::F32 : DType::BF16;
    run_bench_offload(*o);
  });
}

void add_bench_offload_command(CLI::App& bench) {
  declare_bench_offload(*bench.add_subcommand(
      "offload", "Expert offload on the GPU at VRAM budgets: decode/prefill tok/s vs bounds"));
}

}  // namespace ft::cli
