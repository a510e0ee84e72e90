// Tensor-parallel benchmark on the multi-GPU machine: the synthetic Qwen3-30B-A3B-shaped model
// (ft bench offload's: random bf16 experts in pinned host memory, one copy per rank's slice)
// at TP = 1, 2, ... with every expert resident and with a per-GPU VRAM budget (offload):
// decode tok/s (batch 1, greedy, graphs) and prefill tok/s, and the scaling efficiency
// (tok/s at TP=N / (N * tok/s at TP=1)), with the experts split in column slices or as whole
// experts per GPU (--tp-experts; TP=1 runs once). Each figure beside its bound: decode, the
// bytes a GPU reads per token (its resident weights' share, its share of the routed experts,
// misses over PCIe) at the measured HBM / concurrent host->GPU bandwidth; offloaded prefill,
// streaming the GPU's experts once per pass at the concurrent host->GPU bandwidth.
//   tp_bench [--worlds 1 2] [--budgets all 16GiB] [--tp-experts slice whole] [--layers 48]
//            [--decode 32] [--prompts 512 4096] [--chunk 4096] [--threads 0] [--vocab-split]
//            [--hybrid]
// --vocab-split: TP > 1 runs split the lm_head's rows over the GPUs (logits all-gathered).
// --hybrid: each offloaded budget also runs HYBRID (every rank's misses split between its
// fetches and its CPU workers as ft serve splits them: the concurrent host->GPU rate vs the
// measured CPU expert rate / TP, threads / TP each); its decode bound adds the CPU's rate to
// the PCIe one for the misses.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "backend/cuda/cuda_ops.h"
#include "base/error.h"
#include "base/timer.h"
#include "cache/memory_plan.h"
#include "experts/bw_devices.h"
#include "experts/gpu_expert_store.h"
#include "ops/ops.h"
#include "parallel/cuda/tp_transformer.h"

using namespace ft;

namespace {
struct Opts {
  std::vector<int> worlds = {1, 2};
  std::vector<std::string> budgets = {"all", "16GiB"};
  std::vector<TpExperts> modes = {TpExperts::SLICE, TpExperts::WHOLE};
  std::vector<int64_t> prompts = {512, 4096};
  int64_t layers = 48, decode = 32, chunk = 4096;
  int threads = 0;
  bool vocab_split = false, hybrid = false;
};

struct Row {
  int world;
  TpExperts mode = TpExperts::SLICE;
  bool hybrid = false;
  std::string budget, note;
  int64_t slots = 0, all = 0;
  double decode_tps = 0, hit = 1;
  std::vector<double> prefill_tps;
  double decode_bound = 0;                // tok/s
  std::vector<double> prefill_bound;      // tok/s (offload: the PCIe stream; resident: 0)
};

// Measured once: HBM (device 0, read + write) and each GPU's host->GPU with `world` at once.
struct Bandwidths {
  double hbm = 0;
  std::map<int, double> h2d;  // world -> the slowest GPU's figure, bytes/s
  double cpu = 0;             // the CPU expert kernel on every thread, bytes/s (--hybrid)
};

// HYBRID's CPU job (model/cuda_transformer.cpp moe_hybrid) on 1-token calls of top_k experts
// of a rotating layer for `seconds`, on `threads` threads: expert bytes read per second.
double cpu_expert_Bps(const HostExperts& h, int64_t top_k, int threads, double seconds) {
  ThreadPool pool(threads, false);
  const int64_t H = h.hidden, I = h.inter;
  std::vector<float> x(H, 0.01f), g(top_k * I), u(top_k * I), d(top_k * H);
  std::vector<TensorView> v(3 * top_k);
  std::vector<int64_t> moe;
  for (int64_t l = 0; l < h.n_layers; ++l)
    if (h.has_layer(l)) moe.push_back(l);
  int64_t calls = 0, next = 0;
  size_t bytes = 0;
  Timer t;
  for (; t.seconds() < seconds; ++calls) {
    const int64_t l = moe[calls % moe.size()];
    std::vector<ops::GemmProblem> gu, dn;
    for (int64_t j = 0; j < top_k; ++j, ++next) {
      for (int m = 0; m < 3; ++m) v[3 * j + m] = h.expert_view(l, next % h.n_experts, m);
      gu.push_back({x.data(), 1, &v[3 * j], g.data() + j * I});
      gu.push_back({x.data(), 1, &v[3 * j + 1], u.data() + j * I});
      dn.push_back({g.data() + j * I, 1, &v[3 * j + 2], d.data() + j * H});
    }
    ops::matmul_grouped(pool, gu);
    ops::silu_mul(pool, g.data(), u.data(), top_k * I, g.data());
    ops::matmul_grouped(pool, dn);
    bytes += top_k * h.layer_expert_bytes(l);
  }
  return bytes / t.seconds();
}

// Bytes GPU 0 of a rank reads per decode token outside the routed experts: every matrix of
// its shard but the experts (attention, router, dense MLP, lm_head; the embedding: one row).
size_t resident_token_bytes(const Model& shard) {
  const ModelWeights& w = shard.weights();
  size_t b = w.lm_head.nbytes() + w.embed.nbytes() / std::max<int64_t>(1, w.embed.shape[0]);
  for (const LayerWeights& L : w.layers)
    for (const TensorView* t : {&L.q.w, &L.k.w, &L.v.w, &L.o.w, &L.gate, &L.up, &L.down,
                                &L.router})
      b += t->nbytes();
  return b;
}

int32_t argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

Row run(const Opts& o, const Model& model, const ModelConfig& real, int world, TpExperts mode,
        const std::string& budget, std::map<int, std::shared_ptr<HostExperts>>& hosts,
        std::mutex& hm, int threads, const Bandwidths& bw, bool hybrid) {
  Row row;
  row.world = world, row.budget = budget, row.mode = mode, row.hybrid = hybrid;
  // HYBRID: each rank's pair, as tp_hybrid_split makes it from a profile (parallel/tp_moe.h):
  // the concurrent host->GPU figure, the CPU's rate and threads divided among the ranks.
  const double h2d_w = bw.h2d.count(world) ? bw.h2d.at(world) : 0;
  const double cpu_rank = bw.cpu / world;
  // The real widths' plan: the stand-in model's own experts are 8 wide.
  const TpPlan plan = plan_tensor_parallel(real, world, mode);
  const int64_t longest = *std::max_element(o.prompts.begin(), o.prompts.end());
  const int64_t cap = longest + o.decode + 16;
  int64_t slots = 0, all = 0;
  size_t resident = 0, expert = 0;  // rank 0: bytes per token outside the experts; one expert
  int64_t local_experts = 0, moe_layers = 0;
  TpSetupFn setup = [&](int rank, const Model& shard) {
    std::shared_ptr<HostExperts> h;
    {
      std::lock_guard<std::mutex> lock(hm);
      h = hosts[rank];
    }
    if (!h) {  // this rank's slice of every expert (real width / world) or its whole experts
      const ModelConfig rc = shard_config(real, plan.ranks[rank]);
      h = std::make_shared<HostExperts>(HostExperts::synthetic(rc, 43 + rank, threads));
      std::lock_guard<std::mutex> lock(hm);
      hosts[rank] = h;
    }
    size_t free_b = 0, total = 0;
    cuda::memory_info(&free_b, &total);
    MemoryRequest req = cuda_offload_request(shard, *h, cap, o.chunk,
                                             budget == "all" ? free_b : parse_size(budget));
    const int64_t n_all = h->moe_layers * h->n_experts;
    if (budget == "all") req.slots_override = n_all;
    const MemoryPlan p = plan_memory(req);
    if (rank == 0) {
      std::lock_guard<std::mutex> lock(hm);
      slots = p.expert_slots, all = n_all;
      resident = resident_token_bytes(shard), expert = h->expert_bytes();
      local_experts = h->n_experts, moe_layers = h->moe_layers;
    }
    TpRankSetup s;
    s.offload = {.experts = h.get(), .slots = p.expert_slots};
    if (hybrid && h2d_w > 0 && cpu_rank > 0) {
      s.offload.mode = MoeMode::HYBRID;
      s.offload.pcie_Bps = h2d_w, s.offload.cpu_Bps = cpu_rank;
      s.offload.cpu_threads = threads;  // the caller's threads / world
    }
    s.keep = h;
    return s;
  };
  TpOptions to;
  to.world = world, to.experts = mode, to.vocab_split = o.vocab_split;
  TpTransformer tp(model, to, cap, o.chunk, 1, setup);
  row.slots = slots, row.all = all;
  const int64_t V = model.config().vocab_size;
  std::mt19937 rng(7);
  std::vector<float> logits(V);
  std::vector<int32_t> prompt(16);
  for (auto& id : prompt) id = static_cast<int32_t>(rng() % V);
  tp.forward(prompt.data(), 16, 0, logits.data(), false);
  int32_t next = argmax(logits);
  int64_t pos = 16;
  for (int i = 0; i < 4; ++i, ++pos) {  // warm-up: the first step captures the graph
    tp.forward(&next, 1, pos, logits.data(), false);
    next = argmax(logits);
  }
  const CudaRuntimeStats s0 = tp.rank(0).runtime_stats();
  Timer t;
  for (int64_t i = 0; i < o.decode; ++i, ++pos) {
    tp.forward(&next, 1, pos, logits.data(), false);
    next = argmax(logits);
  }
  row.decode_tps = o.decode / t.seconds();
  const CudaRuntimeStats s1 = tp.rank(0).runtime_stats();
  const int64_t lookups = (s1.hits - s0.hits) + (s1.misses - s0.misses);
  if (slots < all && lookups > 0) row.hit = double(s1.hits - s0.hits) / lookups;
  // Decode bound: rank 0's routed experts per token are top_k (slices) or on average
  // top_k / world (whole experts; the busiest rank of a token has more), misses over PCIe.
  const double h2d = bw.h2d.count(world) ? bw.h2d.at(world) : 0;
  const double per_tok = double(real.top_k) * moe_layers /
                         (mode == TpExperts::WHOLE ? double(world) : 1.0);
  double t_tok = (resident + per_tok * expert) / bw.hbm;
  // Misses: over PCIe, or HYBRID split so that fetches and the CPU share finish together.
  const double miss_Bps = h2d + (hybrid ? cpu_rank : 0);
  if (miss_Bps > 0) t_tok += (1 - row.hit) * per_tok * expert / miss_Bps;
  row.decode_bound = bw.hbm > 0 ? 1 / t_tok : 0;
  for (int64_t p : o.prompts) {
    std::vector<int32_t> ids(p);
    for (auto& id : ids) id = static_cast<int32_t>(rng() % V);
    double best = 0;
    for (int rep = 0; rep < (p > o.chunk ? 1 : 2); ++rep) {
      Timer tp_t;
      tp.forward(ids.data(), p, 0, logits.data(), false);
      best = std::max(best, p / tp_t.seconds());
    }
    row.prefill_tps.push_back(best);
    // Offloaded prefill streams the rank's experts once per pass (chunk tokens).
    const double passes = double((p + o.chunk - 1) / o.chunk);
    row.prefill_bound.push_back(slots < all && h2d > 0
                                    ? p / (passes * moe_layers * local_experts * expert / h2d)
                                    : 0);
  }
  return row;
}
}  // namespace

int main(int argc, char** argv) {
  Opts o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto list = [&](auto& out, auto conv) {
      out.clear();
      while (i + 1 < argc && argv[i + 1][0] != '-') out.push_back(conv(argv[++i]));
    };
    auto num = [&] { return std::atoll(argv[++i]); };
    if (a == "--worlds") list(o.worlds, [](const char* s) { return std::atoi(s); });
    else if (a == "--budgets") list(o.budgets, [](const char* s) { return std::string(s); });
    else if (a == "--tp-experts") list(o.modes, [](const char* s) { return parse_tp_experts(s); });
    else if (a == "--prompts") list(o.prompts, [](const char* s) { return int64_t(std::atoll(s)); });
    else if (a == "--layers") o.layers = num();
    else if (a == "--decode") o.decode = num();
    else if (a == "--chunk") o.chunk = num();
    else if (a == "--threads") o.threads = static_cast<int>(num());
    else if (a == "--vocab-split") o.vocab_split = true;
    else if (a == "--hybrid") o.hybrid = true;
    else { std::fprintf(stderr, "tp_bench: unknown argument %s\n", a.c_str()); return 2; }
  }
  const int threads = o.threads > 0 ? o.threads
                                    : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::printf("device: %s; %d GPUs visible\n", cuda::device_summary().c_str(), cuda::device_count());
  const ModelConfig real = synthetic_moe_config({.layers = o.layers, .experts = 128, .top_k = 8,
                                                 .hidden = 2048, .expert_dim = 768, .heads = 32,
                                                 .kv_heads = 4, .head_dim = 128, .vocab = 151936});
  ModelConfig stand_in = real;  // resident weights; its experts are stand-ins never read
  stand_in.expert_dim = 8;
  auto model = Model::synthetic(stand_in, 42);
  Bandwidths bw;
  {
    cuda::set_device(0);
    bw.hbm = measure_hbm();
    std::vector<int> devs;
    for (int world : o.worlds) {
      if (world > cuda::device_count()) continue;
      devs.clear();
      for (int d = 0; d < world; ++d) devs.push_back(d);
      const H2dBandwidth h = measure_h2d(devs);
      bw.h2d[world] = *std::min_element(h.concurrent.begin(), h.concurrent.end());
      std::printf("host->GPU with %d GPUs at once: %.1f GB/s per GPU (alone: %.1f)\n", world,
                  bw.h2d[world] / 1e9, *std::min_element(h.alone.begin(), h.alone.end()) / 1e9);
    }
    std::printf("HBM (GPU 0, device copy read + write): %.0f GB/s\n", bw.hbm / 1e9);
    if (o.hybrid) {  // the CPU expert kernel on a few layers of real-width experts
      ModelConfig few = real;
      few.n_layers = 2;  // 2.4 GB of experts: far past the caches
      few.layer_is_moe.assign(2, true);
      const HostExperts h = HostExperts::synthetic(few, 44, threads);
      bw.cpu = cpu_expert_Bps(h, real.top_k, threads, 1.5);
      std::printf("CPU expert kernel (%d threads, 1 token x top-%lld): %.1f GB/s\n", threads,
                  (long long)real.top_k, bw.cpu / 1e9);
    }
    std::fflush(stdout);
  }
  std::vector<Row> rows;
  for (int world : o.worlds) {
    if (world > cuda::device_count()) {
      std::printf("TP=%d: skipped, %d GPUs visible\n", world, cuda::device_count());
      continue;
    }
    for (TpExperts mode : o.modes) {
      if (world == 1 && mode != o.modes[0]) continue;  // one GPU: the modes are the same
      std::map<int, std::shared_ptr<HostExperts>> hosts;  // per world and mode: each rank's
      std::mutex hm;
      for (const std::string& b : o.budgets)
        for (bool hybrid : {false, true}) {
          if (hybrid && (!o.hybrid || b == "all")) continue;
          Timer t;
          try {
            rows.push_back(run(o, *model, real, world, mode, b, hosts, hm,
                               std::max(1, threads / world), bw, hybrid));
          } catch (const std::exception& e) {
            Row r;
            r.world = world, r.budget = b, r.mode = mode, r.hybrid = hybrid, r.note = e.what();
            rows.push_back(r);
          }
          std::printf("TP=%d %s%s budget %s done in %.1f s\n", world, tp_experts_name(mode),
                      hybrid ? " hybrid" : "", b.c_str(), t.seconds());
          std::fflush(stdout);
        }
    }
  }
  auto base = [&](const Row& of) -> const Row* {  // TP=1 at the same budget and backend
    for (const Row& r : rows)
      if (r.world == 1 && r.budget == of.budget && r.hybrid == of.hybrid && r.note.empty())
        return &r;
    return nullptr;
  };
  std::string s = "\n| TP | experts | budget per GPU | expert slots per GPU | decode tok/s | "
                  "of bound | hit rate | decode speedup | efficiency |";
  for (int64_t p : o.prompts) s += fmt::format(" prefill {} tok/s | of bound | speedup |", p);
  s += "\n|---|---|---|---|---|---|---|---|---|";
  for (size_t i = 0; i < o.prompts.size(); ++i) s += "---|---|---|";
  auto of = [](double v, double bound) {
    return bound > 0 ? fmt::format("{:.0f}% of {:.0f}", 100 * v / bound, bound) : std::string("-");
  };
  s += "\n";
  for (const Row& r : rows) {
    if (!r.note.empty()) {
      s += fmt::format("| {} | {}{} | {} | failed: {} |\n", r.world, tp_experts_name(r.mode),
                       r.hybrid ? " hybrid" : "", r.budget, r.note);
      continue;
    }
    const Row* b = base(r);
    const double sp = b ? r.decode_tps / b->decode_tps : 0;
    s += fmt::format("| {} | {} | {} | {} of {} | {:.1f} | {} | {:.1f}% | {:.2f}x | {:.0f}% |",
                     r.world,
                     r.world == 1 ? std::string(r.hybrid ? "- hybrid" : "-")
                                  : fmt::format("{}{}{}", tp_experts_name(r.mode),
                                                o.vocab_split ? " + vocab split" : "",
                                                r.hybrid ? " hybrid" : ""),
                     r.budget, r.slots,
                     r.all, r.decode_tps, of(r.decode_tps, r.decode_bound), 100 * r.hit, sp,
                     100 * sp / r.world);
    for (size_t i = 0; i < r.prefill_tps.size(); ++i)
      s += fmt::format(" {:.0f} | {} | {:.2f}x |", r.prefill_tps[i],
                       of(r.prefill_tps[i], r.prefill_bound[i]),
                       b ? r.prefill_tps[i] / b->prefill_tps[i] : 0.0);
    s += "\n";
  }
  std::printf("%s", s.c_str());
  return 0;
}
