// Tensor-parallel benchmark on the multi-GPU machine: the synthetic Qwen3-30B-A3B-shaped model
// (ft bench offload's: random bf16 experts in pinned host memory, one copy per rank's slice)
// at TP = 1, 2, ... with every expert resident and with a per-GPU VRAM budget (offload):
// decode tok/s (batch 1, greedy, graphs) and prefill tok/s, and the scaling efficiency
// (tok/s at TP=N / (N * tok/s at TP=1)).
//   tp_bench [--worlds 1 2] [--budgets all 16GiB] [--layers 48] [--decode 32]
//            [--prompts 512 4096] [--chunk 4096] [--threads 0]
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
#include "experts/gpu_expert_store.h"
#include "parallel/cuda/tp_transformer.h"

using namespace ft;

namespace {
struct Opts {
  std::vector<int> worlds = {1, 2};
  std::vector<std::string> budgets = {"all", "16GiB"};
  std::vector<int64_t> prompts = {512, 4096};
  int64_t layers = 48, decode = 32, chunk = 4096;
  int threads = 0;
};

struct Row {
  int world;
  std::string budget, note;
  int64_t slots = 0, all = 0;
  double decode_tps = 0, hit = 1;
  std::vector<double> prefill_tps;
};

int32_t argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

Row run(const Opts& o, const Model& model, const ModelConfig& real, int world,
        const std::string& budget, std::map<int, std::shared_ptr<HostExperts>>& hosts,
        std::mutex& hm, int threads) {
  Row row;
  row.world = world, row.budget = budget;
  // The real widths' plan: the stand-in model's own experts are 8 wide.
  const TpPlan plan = plan_tensor_parallel(real, world);
  const int64_t longest = *std::max_element(o.prompts.begin(), o.prompts.end());
  const int64_t cap = longest + o.decode + 16;
  int64_t slots = 0, all = 0;
  TpSetupFn setup = [&](int rank, const Model& shard) {
    std::shared_ptr<HostExperts> h;
    {
      std::lock_guard<std::mutex> lock(hm);
      h = hosts[rank];
    }
    if (!h) {  // this rank's slice of every expert: real width / world
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
    {
      std::lock_guard<std::mutex> lock(hm);
      slots = p.expert_slots, all = n_all;
    }
    TpRankSetup s;
    s.offload = {.experts = h.get(), .slots = p.expert_slots};
    s.keep = h;
    return s;
  };
  TpOptions to;
  to.world = world;
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
    else if (a == "--prompts") list(o.prompts, [](const char* s) { return int64_t(std::atoll(s)); });
    else if (a == "--layers") o.layers = num();
    else if (a == "--decode") o.decode = num();
    else if (a == "--chunk") o.chunk = num();
    else if (a == "--threads") o.threads = static_cast<int>(num());
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
  std::vector<Row> rows;
  for (int world : o.worlds) {
    if (world > cuda::device_count()) {
      std::printf("TP=%d: skipped, %d GPUs visible\n", world, cuda::device_count());
      continue;
    }
    std::map<int, std::shared_ptr<HostExperts>> hosts;  // per world: each rank's slices
    std::mutex hm;
    for (const std::string& b : o.budgets) {
      Timer t;
      try {
        rows.push_back(run(o, *model, real, world, b, hosts, hm, std::max(1, threads / world)));
      } catch (const std::exception& e) {
        Row r;
        r.world = world, r.budget = b, r.note = e.what();
        rows.push_back(r);
      }
      std::printf("TP=%d budget %s done in %.1f s\n", world, b.c_str(), t.seconds());
      std::fflush(stdout);
    }
  }
  auto base = [&](const std::string& b) -> const Row* {
    for (const Row& r : rows)
      if (r.world == 1 && r.budget == b && r.note.empty()) return &r;
    return nullptr;
  };
  std::string s = "\n| TP | budget per GPU | expert slots per GPU | decode tok/s | hit rate | "
                  "decode speedup | efficiency |";
  for (int64_t p : o.prompts) s += fmt::format(" prefill {} tok/s | speedup |", p);
  s += "\n|---|---|---|---|---|---|---|";
  for (size_t i = 0; i < o.prompts.size(); ++i) s += "---|---|";
  s += "\n";
  for (const Row& r : rows) {
    if (!r.note.empty()) {
      s += fmt::format("| {} | {} | failed: {} |\n", r.world, r.budget, r.note);
      continue;
    }
    const Row* b = base(r.budget);
    const double sp = b ? r.decode_tps / b->decode_tps : 0;
    s += fmt::format("| {} | {} | {} of {} | {:.1f} | {:.1f}% | {:.2f}x | {:.0f}% |", r.world,
                     r.budget, r.slots, r.all, r.decode_tps, 100 * r.hit, sp,
                     100 * sp / r.world);
    for (size_t i = 0; i < r.prefill_tps.size(); ++i)
      s += fmt::format(" {:.0f} | {:.2f}x |", r.prefill_tps[i],
                       b ? r.prefill_tps[i] / b->prefill_tps[i] : 0.0);
    s += "\n";
  }
  std::printf("%s", s.c_str());
  return 0;
}
