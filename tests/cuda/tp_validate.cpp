// Tensor-parallel parity on the GPU machine: TP=N (TpTransformer over NCCL) against TP=1
// (CudaTransformer on the whole model) on every fixture the plan accepts and on a synthetic
// model of Qwen3-30B-A3B's layer shapes: prefill logits of every position, greedy decode
// (graph-captured and eager), offloaded experts (one layer of slots per GPU), a two-sequence
// forward_batch; HYBRID offload per rank (check names "hybrid ...": one layer of slots per GPU,
// each rank's misses split between its fetches and its CPU workers, which must have computed
// experts). Greedy ids must match exactly (the synthetic model: wherever TP=1's top-2 gap
// exceeds the tolerance), logits within max|d| <= 1e-3 * max|ref| per row (the fixtures' bound).
//   tp_validate [fixtures_dir] [--world N] [--only PREFIX|PREFIX...]   (checks of those models)
//   tp_validate --world 2 --nnodes 2 --node-rank R --master 127.0.0.1:29555   (one process per
//   "node", each with world / nnodes GPUs from GPU R * world / nnodes; node 0 checks qwen3_moe)
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "backend/cuda/cuda_ops.h"
#include "base/error.h"
#include "experts/gpu_expert_store.h"
#include "model/cuda_transformer.h"
#include "parallel/cuda/tp_transformer.h"

#include "../parallel/fp8_model.h"

using namespace ft;

namespace {

int32_t argmax(const float* v, int64_t n) {
  return static_cast<int32_t>(std::max_element(v, v + n) - v);
}

// "" when max|got - ref| <= tol * max|ref| on every row of V.
std::string rows_close(const float* got, const float* ref, int64_t rows, int64_t V,
                       const std::string& what, float tol = 1e-3f) {
  for (int64_t r = 0; r < rows; ++r) {
    float max_ref = 0, max_d = 0;
    int64_t at = 0;
    for (int64_t i = 0; i < V; ++i) {
      max_ref = std::max(max_ref, std::fabs(ref[r * V + i]));
      const float d = std::fabs(got[r * V + i] - ref[r * V + i]);
      if (!(d <= max_d)) max_d = d, at = i;
    }
    if (!(max_d <= tol * max_ref))
      return fmt::format("{} row {}: max|d| {} at {} (got {}, ref {}, bound {})\n", what, r,
                         max_d, at, got[r * V + at], ref[r * V + at], tol * max_ref);
  }
  return "";
}

// Top-2 gap of a row (how far the greedy choice is from a tie).
float top2_gap(const float* v, int64_t n) {
  float a = -INFINITY, b = -INFINITY;
  for (int64_t i = 0; i < n; ++i) {
    if (v[i] > a) b = a, a = v[i];
    else if (v[i] > b) b = v[i];
  }
  return a - b;
}

// A run's outputs: prefill logits of every prompt position, then decode logits per step.
struct Trace {
  std::vector<float> prefill, decode;
  std::vector<int32_t> greedy;
};

// Runs prompt (all logits) then `steps` greedy decode steps through forward. fwd: the
// transformer's forward. teacher: feed these ids instead of the own argmax (same inputs for
// both sides when the model has near-ties).
using ForwardFn = std::function<void(const int32_t*, int64_t, int64_t, float*, bool)>;
Trace run_trace(const ForwardFn& fwd, const std::vector<int32_t>& prompt, int64_t steps,
                int64_t V, const std::vector<int32_t>* teacher = nullptr) {
  Trace t;
  const int64_t T = static_cast<int64_t>(prompt.size());
  t.prefill.resize(T * V);
  fwd(prompt.data(), T, 0, t.prefill.data(), true);
  int32_t next = argmax(t.prefill.data() + (T - 1) * V, V);
  std::vector<float> lg(V);
  for (int64_t i = 0; i < steps; ++i) {
    if (teacher) next = (*teacher)[i];
    t.greedy.push_back(next);
    fwd(&next, 1, T + i, lg.data(), false);
    t.decode.insert(t.decode.end(), lg.begin(), lg.end());
    next = argmax(lg.data(), V);
  }
  return t;
}

std::string compare(const Trace& got, const Trace& ref, int64_t V, const std::string& what,
                    bool exact_greedy) {
  std::string err = rows_close(got.prefill.data(), ref.prefill.data(),
                               static_cast<int64_t>(ref.prefill.size()) / V, V, what + " prefill");
  err += rows_close(got.decode.data(), ref.decode.data(),
                    static_cast<int64_t>(ref.decode.size()) / V, V, what + " decode");
  for (size_t i = 0; i < ref.greedy.size(); ++i) {
    if (got.greedy[i] == ref.greedy[i]) continue;
    const float* prev = i == 0 ? ref.prefill.data() + ref.prefill.size() - V
                               : ref.decode.data() + (i - 1) * V;
    float max_ref = 0;
    for (int64_t j = 0; j < V; ++j) max_ref = std::max(max_ref, std::fabs(prev[j]));
    if (exact_greedy || top2_gap(prev, V) > 2e-3f * max_ref)
      err += fmt::format("{}: greedy id {} is {}, TP=1 {}\n", what, i, got.greedy[i],
                         ref.greedy[i]);
  }
  return err;
}

std::vector<int32_t> prompt_ids(int64_t n, int64_t V, uint32_t seed) {
  std::vector<int32_t> p(n);
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<int32_t>((seed * 2654435761u + i * 40503u) % V);
  return p;
}

struct Ctx {
  TpOptions tp;
  int failed = 0, total = 0;
  std::vector<std::string> only;  // --only A|B: models whose check name starts with one of them
};

void report(Ctx& ctx, const std::string& name, const std::function<std::string()>& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  std::string err;
  try {
    err = fn();
  } catch (const std::exception& e) {
    err = std::string("exception: ") + e.what() + "\n";
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ++ctx.total;
  if (!err.empty()) ++ctx.failed;
  std::printf("%s %-44s %8.1f ms\n", err.empty() ? "PASS" : "FAIL", name.c_str(), ms);
  if (!err.empty()) std::printf("%.3000s", err.c_str());
  std::fflush(stdout);
}

// Offload per rank: the shard's experts pinned, `layers` layers' worth of slots.
TpSetupFn offload_setup(int64_t layers) {
  return [layers](int, const Model& shard) {
    auto host = std::make_shared<HostExperts>(HostExperts::copy_of(shard));
    TpRankSetup s;
    s.offload = {.experts = host.get(), .slots = layers * shard.config().n_experts};
    s.keep = host;
    return s;
  };
}

// HYBRID per rank: `layers` layers' worth of slots, the host's threads divided among the
// `world` ranks (engine/tp_runner.cpp via parallel/tp_moe.h), and an even split (fetch
// fraction 1/2: a layer's single miss goes to the CPU, two go one each way), so the small
// fixtures' top-2 decode exercises both sides.
TpSetupFn hybrid_setup(int64_t layers, int world) {
  return [layers, world](int, const Model& shard) {
    auto host = std::make_shared<HostExperts>(HostExperts::copy_of(shard));
    TpRankSetup s;
    s.offload = {.experts = host.get(), .slots = layers * shard.config().n_experts,
                 .mode = MoeMode::HYBRID, .pcie_Bps = 12.5e9, .cpu_Bps = 12.5e9};
    const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    s.offload.cpu_threads = std::max(1, threads / world);
    s.keep = host;
    return s;
  };
}

bool selected(const Ctx& ctx, const std::string& name) {
  return ctx.only.empty() || std::any_of(ctx.only.begin(), ctx.only.end(), [&](const auto& p) {
           return name.rfind(p, 0) == 0;
         });
}

// Every rank's CPU workers computed experts (whole experts: the ranks together; a rank may own
// none of a short run's CPU misses).
std::string cpu_share(const TpTransformer& tp, bool whole) {
  std::string counts;
  int64_t total = 0, idle = 0;
  for (int r = 0; r < tp.local_ranks(); ++r) {
    const int64_t c = tp.rank(r).runtime_stats().cpu_experts;
    counts += fmt::format("{}{}", r ? " / " : "", c);
    total += c, idle += c == 0;
  }
  std::printf("     cpu experts per rank: %s\n", counts.c_str());
  if (total == 0 || (!whole && idle > 0))
    return fmt::format("hybrid: CPU-computed experts per rank {} (want > 0)\n", counts);
  return "";
}

// The TP=1 reference of check `name` on m: its prompt (prompt_len ids) and trace (then `steps`
// greedy ids); nullopt when the check is not selected or the plan refuses m at this world with
// ctx's expert layout (a SKIP line says why).
struct Reference {
  std::vector<int32_t> prompt;
  Trace trace;
};
std::optional<Reference> reference(Ctx& ctx, const Model& m, const std::string& name,
                                   int64_t prompt_len, int64_t steps) {
  if (!selected(ctx, name)) return std::nullopt;
  const int64_t V = m.config().vocab_size;
  try {
    plan_tensor_parallel(m, ctx.tp.world,
                         choose_tp_experts(ctx.tp.experts, m.config(), ctx.tp.world, false));
  } catch (const Error& e) {
    std::printf("SKIP %-44s %s\n", name.c_str(), e.what());
    return std::nullopt;
  }
  Reference r{.prompt = prompt_ids(prompt_len, V, 7)};
  CudaTransformer one(m, prompt_len + steps + 8, 64);
  r.trace = run_trace([&](auto... a) { one.forward(a...); }, r.prompt, steps, V);
  return r;
}

// TP=N HYBRID (one layer of slots per GPU) vs TP=1 resident: greedy decode (teacher-forced
// where the model has near-ties), then two sequences in one forward_batch.
void check_hybrid(Ctx& ctx, const Model& m, const std::string& name, int64_t prompt_len,
                  int64_t steps, bool exact) {
  const auto r = reference(ctx, m, name, prompt_len, steps);
  if (!r) return;
  const int64_t V = m.config().vocab_size, cap = prompt_len + steps + 8;
  const bool whole = ctx.tp.experts == TpExperts::WHOLE;
  const auto& prompt = r->prompt;
  const Trace& ref = r->trace;
  report(ctx, fmt::format("{} tp{} 1 layer of slots", name, ctx.tp.world), [&] {
    TpTransformer tp(m, ctx.tp, cap, 64, 1, hybrid_setup(1, ctx.tp.world));
    const Trace got = run_trace([&](auto... a) { tp.forward(a...); }, prompt, steps, V,
                                exact ? nullptr : &ref.greedy);
    return compare(got, ref, V, name, exact) + cpu_share(tp, whole);
  });
  // Both sides feed TP=1's greedy ids (teacher), so every pass's rows compare.
  report(ctx, fmt::format("{} tp{} forward_batch x2", name, ctx.tp.world), [&] {
    const auto p2 = prompt_ids(prompt_len / 2 + 1, V, 9);
    const int64_t n2 = static_cast<int64_t>(p2.size()), passes = 5;
    std::vector<int32_t> teacher;  // [passes - 1, 2]
    auto drive = [&](auto& tf, std::vector<float>& out) {
      out.assign(passes * 2 * V, 0.f);
      const CudaSeqStep pre[2] = {
          {.seq = 0, .ids = prompt.data(), .n = prompt_len, .pos0 = 0, .logits = out.data()},
          {.seq = 1, .ids = p2.data(), .n = n2, .pos0 = 0, .logits = out.data() + V}};
      tf.forward_batch(pre);
      for (int64_t i = 1; i < passes; ++i) {  // decode-sized passes of both: the CPU share
        const float* prev = out.data() + (i - 1) * 2 * V;
        if (static_cast<int64_t>(teacher.size()) < 2 * i)
          teacher.insert(teacher.end(), {argmax(prev, V), argmax(prev + V, V)});
        float* o = out.data() + i * 2 * V;
        const CudaSeqStep dec[2] = {
            {.seq = 0, .ids = &teacher[2 * (i - 1)], .n = 1, .pos0 = prompt_len + i - 1,
             .logits = o},
            {.seq = 1, .ids = &teacher[2 * (i - 1) + 1], .n = 1, .pos0 = n2 + i - 1,
             .logits = o + V}};
        tf.forward_batch(dec);
      }
    };
    std::vector<float> a, b;
    {
      CudaTransformer one(m, cap, 64 + prompt_len + 1, {}, 2);
      drive(one, a);
    }
    TpTransformer tp(m, ctx.tp, cap, 64 + prompt_len + 1, 2, hybrid_setup(1, ctx.tp.world));
    drive(tp, b);
    return rows_close(b.data(), a.data(), passes * 2, V, name + " batch") + cpu_share(tp, whole);
  });
}

// HYBRID with slices and with whole experts on the fixtures HYBRID runs (gpt-oss's experts are
// refused: checked), the 30B-shaped synthetic model and FP8 tiles.
void check_hybrids(Ctx& ctx, const std::string& fixtures, const Model& syn, const Model& f8) {
  for (TpExperts e : {TpExperts::SLICE, TpExperts::WHOLE}) {
    Ctx h = ctx;
    h.tp.experts = e;
    h.failed = h.total = 0;
    const std::string tag = e == TpExperts::WHOLE ? "hybrid whole" : "hybrid";
    for (const char* f : {"qwen3_moe", "qwen3_moe_yarn", "mixtral", "olmoe", "qwen3_5_moe"}) {
      if (!selected(h, fmt::format("{} {}", tag, f))) continue;
      auto m = Model::load(fixtures + "/" + f);
      check_hybrid(h, *m, fmt::format("{} {}", tag, f), 12, 16, true);
    }
    check_hybrid(h, syn, tag + " synthetic 30B-A3B", 40, 8, false);
    check_hybrid(h, f8, tag + " fp8 synthetic", 12, 16, false);
    ctx.failed += h.failed, ctx.total += h.total;
  }
  const std::string name = fmt::format("hybrid gpt_oss tp{} refused", ctx.tp.world);
  if (!selected(ctx, name)) return;
  report(ctx, name, [&]() -> std::string {
    auto m = Model::load(fixtures + "/gpt_oss");
    try {
      TpTransformer tp(*m, ctx.tp, 32, 64, 1, hybrid_setup(1, ctx.tp.world));
    } catch (const Error& e) {
      const std::string w = e.what();
      return w.find("use --moe-backend offload") != std::string::npos ? "" : w + "\n";
    }
    return "gpt_oss HYBRID was not refused\n";
  });
}

// TP=1 vs TP=N on one model: resident (graphs, eager), offloaded, and a batch of two sequences.
void check_model(Ctx& ctx, const Model& m, const std::string& name, int64_t prompt_len,
                 int64_t steps, bool exact) {
  const auto r = reference(ctx, m, name, prompt_len, steps);
  if (!r) return;
  const int64_t V = m.config().vocab_size, cap = prompt_len + steps + 8;
  const auto& prompt = r->prompt;
  const Trace& ref = r->trace;
  const std::vector<int32_t>* teach = exact ? nullptr : &ref.greedy;
  for (int mode = 0; mode < 3; ++mode) {
    const char* label[] = {"resident graphs", "resident eager", "offload 1 layer of slots"};
    report(ctx, fmt::format("{} tp{} {}", name, ctx.tp.world, label[mode]), [&] {
      TpTransformer tp(m, ctx.tp, cap, 64, 1, mode == 2 ? offload_setup(1) : TpSetupFn{});
      tp.set_graphs(mode != 1);
      const Trace got = run_trace([&](auto... a) { tp.forward(a...); }, prompt, steps, V, teach);
      return compare(got, ref, V, name, exact);
    });
  }
  // Two sequences in one forward_batch (decode-sized and prefill-sized passes) vs TP=1's.
  report(ctx, fmt::format("{} tp{} forward_batch x2", name, ctx.tp.world), [&] {
    const auto p2 = prompt_ids(prompt_len / 2 + 1, V, 9);
    std::vector<float> a(2 * V), b(2 * V);
    auto drive = [&](auto& tf, float* out) {
      const CudaSeqStep pre[2] = {
          {.seq = 0, .ids = prompt.data(), .n = prompt_len, .pos0 = 0, .logits = out},
          {.seq = 1, .ids = p2.data(), .n = static_cast<int64_t>(p2.size()), .pos0 = 0,
           .logits = out + V}};
      tf.forward_batch(pre);
      const int32_t n0 = argmax(out, V), n1 = argmax(out + V, V);
      const CudaSeqStep dec[2] = {
          {.seq = 0, .ids = &n0, .n = 1, .pos0 = prompt_len, .logits = out},
          {.seq = 1, .ids = &n1, .n = 1, .pos0 = static_cast<int64_t>(p2.size()),
           .logits = out + V}};
      tf.forward_batch(dec);
    };
    {
      CudaTransformer one(m, cap, 64 + prompt_len + 1, {}, 2);
      drive(one, a.data());
    }
    TpTransformer tp(m, ctx.tp, cap, 64 + prompt_len + 1, 2);
    drive(tp, b.data());
    return rows_close(b.data(), a.data(), 2, V, name + " batch");
  });
}

// Whole-expert ownership (--tp-experts whole): the same checks with each rank owning whole
// experts at full width (its routing skips the other ranks' ids; the FFN all-reduce sums).
void check_whole_experts(Ctx& ctx, const std::string& fixtures, const Model& syn) {
  Ctx w = ctx;
  w.tp.experts = TpExperts::WHOLE;
  w.failed = w.total = 0;
  for (const char* f : {"qwen3_moe", "mixtral", "olmoe", "qwen3_moe_yarn", "gpt_oss",
                        "gpt_oss_mxfp4", "qwen3_5_moe"}) {
    auto m = Model::load(fixtures + "/" + f);
    check_model(w, *m, fmt::format("whole {}", f), 12, 16, true);
  }
  check_model(w, syn, "whole synthetic 30B-A3B", 40, 8, false);
  ctx.failed += w.failed, ctx.total += w.total;
}

// Vocab-split lm_head (TpOptions::vocab_split): each rank's lm_head rows, logits all-gathered
// (prefill rows in pieces, decode inside the graphs); with slices and with whole experts.
void check_vocab_split(Ctx& ctx, const std::string& fixtures, const Model& syn) {
  for (TpExperts e : {TpExperts::SLICE, TpExperts::WHOLE}) {
    Ctx v = ctx;
    v.tp.vocab_split = true, v.tp.experts = e;
    v.failed = v.total = 0;
    const std::string tag = e == TpExperts::WHOLE ? "vocab+whole" : "vocab";
    for (const char* f : {"qwen3_moe", "mixtral"}) {
      auto m = Model::load(fixtures + "/" + f);
      check_model(v, *m, fmt::format("{} {}", tag, f), 12, 16, true);
    }
    check_model(v, syn, tag + " synthetic 30B-A3B", 40, 8, false);
    ctx.failed += v.failed, ctx.total += v.total;
  }
}

// Several "nodes" on one host: node 0 checks qwen3_moe, the others serve the passes.
int multi_node(Ctx& ctx, const std::string& fixtures) {
  auto m = Model::load(fixtures + "/qwen3_moe");
  const int64_t V = m->config().vocab_size, T = 12, N = 8;
  const auto prompt = prompt_ids(T, V, 7);
  const int local = ctx.tp.world / ctx.tp.nnodes;
  ctx.tp.first_device = ctx.tp.node_rank * local;
  if (ctx.tp.node_rank > 0) {
    TpTransformer tp(*m, ctx.tp, T + N + 8, 64);
    tp.serve_worker();
    std::printf("node %d: served until node 0 stopped\n", ctx.tp.node_rank);
    return 0;
  }
  Trace ref;
  {
    CudaTransformer one(*m, T + N + 8, 64);
    ref = run_trace([&](auto... a) { one.forward(a...); }, prompt, N, V);
  }
  report(ctx, fmt::format("qwen3_moe tp{} over {} nodes", ctx.tp.world, ctx.tp.nnodes), [&] {
    TpTransformer tp(*m, ctx.tp, T + N + 8, 64);
    const Trace got = run_trace([&](auto... a) { tp.forward(a...); }, prompt, N, V);
    return compare(got, ref, V, "qwen3_moe multi-node", true);
  });
  std::printf("%s: %d/%d tp checks passed\n", ctx.failed ? "FAIL" : "PASS",
              ctx.total - ctx.failed, ctx.total);
  return ctx.failed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  Ctx ctx;
  ctx.tp.world = 2;
  std::string fixtures = FT_FIXTURES;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--world") ctx.tp.world = std::atoi(next().c_str());
    else if (a == "--nnodes") ctx.tp.nnodes = std::atoi(next().c_str());
    else if (a == "--node-rank") ctx.tp.node_rank = std::atoi(next().c_str());
    else if (a == "--master") ctx.tp.master = next();
    else if (a == "--only") {
      const std::string list = next();
      for (size_t b = 0, e; b <= list.size(); b = e + 1) {
        e = std::min(list.find('|', b), list.size());
        if (e > b) ctx.only.push_back(list.substr(b, e - b));
      }
    }
    else fixtures = a;
  }
  const int local = ctx.tp.world / std::max(1, ctx.tp.nnodes);
  const int need = ctx.tp.nnodes > 1 ? (ctx.tp.node_rank + 1) * local : ctx.tp.world;
  if (cuda::device_count() < need) {
    std::printf("SKIP: tensor parallel %d needs %d GPUs, %d visible\n", ctx.tp.world, need,
                cuda::device_count());
    return 0;
  }
  std::printf("device: %s; %d GPUs; NCCL %s\n", cuda::device_summary().c_str(),
              cuda::device_count(), cuda::nccl_built() ? "built" : "not built");
  try {
    if (ctx.tp.nnodes > 1) return multi_node(ctx, fixtures);
    for (const char* f : {"qwen3_moe", "qwen3_moe_yarn", "mixtral", "olmoe", "qwen3_next",
                          "qwen3_5_moe", "gpt_oss", "gpt_oss_mxfp4"}) {
      const std::string dir = fixtures + "/" + f;
      auto m = Model::load(dir);
      check_model(ctx, *m, f, 12, 16, true);
      // Hybrid: a prompt over two 64-token chunks takes the chunked delta rule (and carries the
      // conv/ssm state across chunks) on each rank's heads; gpt-oss: windows and sinks over it.
      if (m->config().has_delta() || m->config().attn_sinks)
        check_model(ctx, *m, std::string(f) + " 100-token prompt", 100, 8, false);
    }
    // Qwen3-30B-A3B's layer shapes (4 of its 48 layers, bf16, experts resident in the Model).
    const ModelConfig c = synthetic_moe_config({.layers = 4, .experts = 128, .top_k = 8,
                                                .hidden = 2048, .expert_dim = 768, .heads = 32,
                                                .kv_heads = 4, .head_dim = 128, .vocab = 151936});
    auto syn = Model::synthetic(c, 42);
    check_model(ctx, *syn, "synthetic 30B-A3B shapes", 40, 8, false);
    // FP8 128x128 tiles (tests/parallel/fp8_model.h): 384-wide experts go out as 128 + 256.
    auto f8base = Model::synthetic(test::fp8_test_config(), 5);
    auto f8 = test::fp8_copy(*f8base);
    check_model(ctx, *f8, "fp8 synthetic", 12, 16, false);
    check_whole_experts(ctx, fixtures, *syn);
    check_vocab_split(ctx, fixtures, *syn);
    check_hybrids(ctx, fixtures, *syn, *f8);
  } catch (const std::exception& e) {
    std::printf("FAIL: %s\n", e.what());
    return 1;
  }
  std::printf("%s: %d/%d tp checks passed\n", ctx.failed ? "FAIL" : "PASS", ctx.total - ctx.failed,
              ctx.total);
  return ctx.failed ? 1 : 0;
}
