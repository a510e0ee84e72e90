// ft bench elastic: a synthetic model with Qwen3-30B-A3B's shapes (random bf16 experts in
// pinned host memory) decoded by the offloaded CUDA transformer while the expert slot pool is
// resized every --every decode steps across --sizes (GiB of expert slots), --cycles times:
// per size the time to apply the resize (allocate, drop the cached experts, rebuild the decode
// workspace; p50/p99), the first step after it (graph re-capture, cold cache) and the decode
// tokens/s and hit rate over the rest. Then the KV of a live sequence is resized back and forth
// between --kv-tokens and twice that (copying its cached tokens); its apply time p50/p99.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <thread>

#include "backend/cuda/cuda_ops.h"
#include "base/error.h"
#include "base/timer.h"
#include "cli/bench_elastic.h"
#include "engine/sampler.h"
#include "experts/gpu_expert_store.h"
#include "model/cuda_transformer.h"

namespace ft::cli {

namespace {
struct ElasticBenchOptions {
  std::vector<double> sizes = {8, 16, 24};  // GiB of expert slots
  int64_t layers = 48, experts = 128, top_k = 8, hidden = 2048, expert_dim = 768, heads = 32,
          kv_heads = 4, head_dim = 128, vocab = 151936;
  int64_t every = 48, cycles = 3, kv_tokens = 8192, kv_resizes = 10;
  int threads = 0;
};

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

void run_bench_elastic(const ElasticBenchOptions& o) {
  const int threads = o.threads > 0 ? o.threads
                                    : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const ModelConfig c =
      synthetic_moe_config({.layers = o.layers, .experts = o.experts, .top_k = o.top_k,
                            .hidden = o.hidden, .expert_dim = o.expert_dim, .heads = o.heads,
                            .kv_heads = o.kv_heads, .head_dim = o.head_dim, .vocab = o.vocab});
  ModelConfig stand_in = c;  // resident weights; the real-width experts are the pinned ones
  stand_in.expert_dim = 8;
  Timer tb;
  auto model = Model::synthetic(stand_in, 42);
  const HostExperts host = HostExperts::synthetic(c, 43, threads);
  const int64_t all = host.moe_layers * host.n_experts;
  std::printf("device: %s\nsynthetic qwen3_moe: %lld layers x %lld experts, %.2f MB each, %.1f GB "
              "pinned, built in %.1f s\n",
              cuda::device_summary().c_str(), (long long)c.n_layers, (long long)c.n_experts,
              host.expert_bytes() / 1e6, host.total_bytes() / 1e9, tb.seconds());
  std::vector<int64_t> slots;
  for (double g : o.sizes)
    slots.push_back(std::clamp<int64_t>(
        static_cast<int64_t>(g * double(size_t{1} << 30) / double(host.expert_bytes())),
        host.n_experts, all));
  const int64_t capacity = o.kv_tokens;
  CudaTransformer tf(*model, capacity, 256, CudaOffload{.experts = &host, .slots = slots[0]});
  std::mt19937 rng(7);
  std::vector<float> logits(c.vocab_size);
  std::vector<int32_t> prompt(16);
  for (auto& id : prompt) id = static_cast<int32_t>(rng() % c.vocab_size);
  tf.forward(prompt.data(), 16, 0, logits.data(), false);
  int32_t next = argmax(logits.data(), c.vocab_size);
  int64_t pos = 16;
  auto step = [&] {
    if (pos + 1 >= tf.capacity()) pos = 16;  // wrap inside the context: same cost per step
    tf.forward(&next, 1, pos++, logits.data(), false);
    next = argmax(logits.data(), c.vocab_size);
  };
  for (int i = 0; i < 8; ++i) step();
  struct Per {
    std::vector<double> apply, first, tps, hit;
  };
  std::vector<Per> per(slots.size());
  std::vector<double> apply_all;
  for (int64_t cycle = 0; cycle < o.cycles; ++cycle)
    for (size_t k = 0; k < slots.size(); ++k) {
      if (cycle == 0 && k == 0) {  // already this size
        for (int i = 0; i < 8; ++i) step();
      } else {
        Timer ta;
        tf.resize_expert_slots(slots[k]);
        per[k].apply.push_back(ta.seconds());
        apply_all.push_back(per[k].apply.back());
      }
      Timer tf1;
      step();  // re-captures the graph over the new pool
      per[k].first.push_back(tf1.seconds());
      const CudaRuntimeStats s0 = tf.runtime_stats();
      Timer td;
      for (int64_t i = 1; i < o.every; ++i) step();
      per[k].tps.push_back((o.every - 1) / td.seconds());
      const CudaRuntimeStats s1 = tf.runtime_stats();
      const double h = double(s1.hits - s0.hits), m = double(s1.misses - s0.misses);
      per[k].hit.push_back(h + m > 0 ? h / (h + m) : 0);
    }
  std::printf("\nexpert-pool resizes every %lld decode steps, %lld cycles over the sizes:\n\n",
              (long long)o.every, (long long)o.cycles);
  std::printf("| size | expert slots | apply p50 ms | apply p99 ms | first step ms | decode tok/s "
              "| hit rate |\n|---|---|---|---|---|---|---|\n");
  for (size_t k = 0; k < slots.size(); ++k) {
    double tps = 0, hit = 0;
    for (double v : per[k].tps) tps += v / per[k].tps.size();
    for (double v : per[k].hit) hit += v / per[k].hit.size();
    std::printf("| %.0f GiB | %lld/%lld | %.1f | %.1f | %.1f | %.1f | %.3f |\n", o.sizes[k],
                (long long)slots[k], (long long)all, 1e3 * percentile(per[k].apply, 0.5),
                1e3 * percentile(per[k].apply, 0.99), 1e3 * percentile(per[k].first, 0.5), tps,
                hit);
  }
  std::printf("\nexpert-pool apply over all %zu resizes: p50 %.1f ms, p99 %.1f ms\n",
              apply_all.size(), 1e3 * percentile(apply_all, 0.5), 1e3 * percentile(apply_all, 0.99));
  // KV: a live sequence of `pos` tokens; capacity toggles between kv_tokens and twice that.
  std::vector<double> kv;
  const std::vector<bool> open{true};
  for (int64_t i = 0; i < o.kv_resizes; ++i) {
    Timer tk;
    tf.resize_kv(i % 2 == 0 ? 2 * capacity : capacity, open);
    kv.push_back(tk.seconds());
    step();
  }
  std::printf("KV resize (%lld <-> %lld tokens, %.1f MB per token-layer set, live sequence of "
              "%lld tokens kept): p50 %.1f ms, p99 %.1f ms\n",
              (long long)capacity, (long long)(2 * capacity), tf.kv_token_bytes() / 1e6,
              (long long)pos, 1e3 * percentile(kv, 0.5), 1e3 * percentile(kv, 0.99));
}
}  // namespace

void declare_bench_elastic(CLI::App& cmd_ref) {
  auto o = std::make_shared<ElasticBenchOptions>();
  CLI::App* cmd = &cmd_ref;
  cmd->add_option("--sizes", o->sizes, "Expert-pool sizes in GiB, visited in order each cycle")
      ->capture_default_str();
  cmd->add_option("--every", o->every, "Decode steps between resizes")
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 20))->capture_default_str();
  cmd->add_option("--cycles", o->cycles, "Passes over the sizes")
      ->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--kv-tokens", o->kv_tokens, "KV capacity (toggled with twice it)")
      ->check(CLI::Range(int64_t{64}, int64_t{1} << 22))->capture_default_str();
  cmd->add_option("--kv-resizes", o->kv_resizes, "KV resizes timed")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  cmd->add_option("--layers", o->layers, "Layers")->check(CLI::PositiveNumber);
  cmd->add_option("--experts", o->experts, "Experts per layer")->check(CLI::PositiveNumber);
  cmd->add_option("--threads", o->threads, "Host threads building the experts (0: all cores)");
  cmd->callback([o] { run_bench_elastic(*o); });
}

void add_bench_elastic_command(CLI::App& bench) {
  declare_bench_elastic(*bench.add_subcommand(
      "elastic", "Live expert-cache and KV resize timings and decode tok/s per size (CUDA)"));
}

}  // namespace ft::cli
