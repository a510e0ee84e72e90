// ft bench cpu: prefill and decode speed of a synthetic Qwen3-MoE-shaped model made in memory,
// with the achieved weight-read bandwidth beside the machine's measured read bandwidth.
#include <algorithm>
#include <cstdio>
#include <random>

#include "backend/cpu/kernels.h"
#include "base/error.h"
#include "base/timer.h"
#include "cli/bench_agent.h"
#include "cli/bench_bw.h"
#include "cli/bench_elastic.h"
#include "cli/bench_offload.h"
#include "cli/commands.h"
#include "engine/sampler.h"
#include "model/transformer.h"

namespace ft::cli {

namespace {
struct BenchOptions {
  int64_t layers = 8, experts = 32, top_k = 8, hidden = 2048, expert_dim = 768, heads = 32,
          kv_heads = 4, head_dim = 128, vocab = 32000;
  int64_t prompt = 256, decode = 32;
  int threads = 0;
};

// Best-of-5 parallel streaming read of a buffer much larger than the caches.
double read_bandwidth(ThreadPool& pool, size_t bytes) {
  std::vector<float> buf(bytes / sizeof(float), 1.f);
  const auto& k = cpu::kernels();
  const int64_t n = static_cast<int64_t>(buf.size()), chunk = 1 << 20;
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    std::vector<float> sink(pool.size(), 0.f);
    Timer t;
    pool.run((n + chunk - 1) / chunk, 4, [&](int64_t b0, int64_t b1) {
      float s = 0;
      for (int64_t b = b0; b < b1; ++b) {
        int64_t s0 = b * chunk, len = std::min(chunk, n - s0);
        s += k.dot(buf.data() + s0, buf.data() + s0, len);
      }
      sink[0] += s * 0.f;
    });
    best = std::max(best, static_cast<double>(bytes) / t.seconds());
  }
  return best;
}

ModelConfig synthetic_config(const BenchOptions& o) {
  return synthetic_moe_config({.layers = o.layers, .experts = o.experts, .top_k = o.top_k,
                               .hidden = o.hidden, .expert_dim = o.expert_dim, .heads = o.heads,
                               .kv_heads = o.kv_heads, .head_dim = o.head_dim, .vocab = o.vocab});
}

void run_bench_cpu(const BenchOptions& o) {
  ThreadPool pool(o.threads);
  const ModelConfig c = synthetic_config(o);
  std::printf("building a synthetic qwen3_moe: %lld layers, %lld experts top-%lld, hidden %lld, "
              "expert width %lld, vocab %lld (bf16, in memory)\n",
              (long long)c.n_layers, (long long)c.n_experts, (long long)c.top_k,
              (long long)c.hidden, (long long)c.expert_dim, (long long)c.vocab_size);
  auto model = Model::synthetic(c, 42);
  const double gb = 1e9;
  const double bw = read_bandwidth(pool, size_t{1} << 30);
  // Bytes one decode token reads: attention + router per layer, top_k distinct experts per
  // layer, the lm_head, and one embedding row.
  const double attn = 2.0 * (2 * c.q_dim() * c.hidden + 2 * c.kv_dim() * c.hidden);
  const double expert = 2.0 * 3 * c.expert_dim * c.hidden;
  const double decode_bytes = c.n_layers * (attn + 2.0 * c.n_experts * c.hidden +
                                            c.top_k * expert) + 2.0 * c.vocab_size * c.hidden;
  Transformer tf(*model, pool, 256);
  KVCache kv(c, o.prompt + o.decode + 1);
  std::mt19937 rng(1);
  std::vector<int32_t> ids(o.prompt);
  for (auto& id : ids) id = static_cast<int32_t>(rng() % c.vocab_size);
  std::vector<float> logits(c.vocab_size);
  Timer t;
  tf.forward(ids.data(), o.prompt, 0, kv, logits.data(), false);
  const double prefill_s = t.seconds();
  int32_t next = argmax(logits.data(), c.vocab_size);
  t.reset();
  for (int64_t i = 0; i < o.decode; ++i) {
    tf.forward(&next, 1, o.prompt + i, kv, logits.data(), false);
    next = argmax(logits.data(), c.vocab_size);
  }
  const double decode_s = t.seconds();
  const double tps = o.decode / decode_s;
  std::printf("kernels %s, %d threads, weights %.2f GB\n", cpu::kernels().isa, pool.size(),
              model->matrix_bytes() / gb);
  std::printf("| measure | value |\n|---|---|\n");
  std::printf("| machine read bandwidth (streaming, %d threads) | %.1f GB/s |\n", pool.size(), bw / gb);
  std::printf("| prefill %lld tokens | %.1f tok/s |\n", (long long)o.prompt, o.prompt / prefill_s);
  std::printf("| decode %lld tokens | %.2f tok/s |\n", (long long)o.decode, tps);
  std::printf("| decode bytes read per token | %.1f MB |\n", decode_bytes / 1e6);
  std::printf("| decode achieved weight-read bandwidth | %.1f GB/s |\n", decode_bytes * tps / gb);
  std::printf("| decode / machine bandwidth | %.0f%% |\n", 100.0 * decode_bytes * tps / bw);
  std::printf("| decode bound (bytes / bandwidth) | %.2f tok/s |\n", bw / decode_bytes);
}
}  // namespace

void add_bench_command(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  auto o = std::make_shared<BenchOptions>();
  auto* cpu = bench->add_subcommand(
      "cpu", "CPU prefill/decode of a synthetic Qwen3-MoE-shaped model vs memory bandwidth");
  cpu->add_option("--layers", o->layers, "Layers")->check(CLI::PositiveNumber);
  cpu->add_option("--experts", o->experts, "Experts per layer")->check(CLI::PositiveNumber);
  cpu->add_option("--top-k", o->top_k, "Experts per token")->check(CLI::PositiveNumber);
  cpu->add_option("--hidden", o->hidden, "Hidden size")->check(CLI::PositiveNumber);
  cpu->add_option("--expert-dim", o->expert_dim, "Expert intermediate size")->check(CLI::PositiveNumber);
  cpu->add_option("--vocab", o->vocab, "Vocabulary size")->check(CLI::PositiveNumber);
  cpu->add_option("--prompt", o->prompt, "Prompt tokens for prefill")->check(CLI::PositiveNumber);
  cpu->add_option("--decode", o->decode, "Decode steps")->check(CLI::PositiveNumber);
  cpu->add_option("--threads", o->threads, "CPU threads (0: one per core)");
  cpu->callback([o] {
    if (o->top_k > o->experts) fail("--top-k must not exceed --experts");
    run_bench_cpu(*o);
  });
  add_bench_offload_command(*bench);
  add_bench_agent_command(*bench);
  add_bench_bw_command(*bench);
  add_bench_elastic_command(*bench);
}

}  // namespace ft::cli
