// ft bench agent: a coding-agent session replayed through the engine (CPU or CUDA runner) with
// and without semantic anchors; per turn new / recomputed tokens and TTFT, then worst and mean.
#include "cli/bench_agent.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>

#include "base/error.h"
#include "base/timer.h"
#include "cli/commands.h"
#include "engine/backend.h"
#include "model/model.h"

namespace ft::cli {

namespace {
nlohmann::ordered_json read_ordered_json(const std::string& path) {
  std::ifstream f(path);
  if (!f) fail("cannot open {}", path);
  try {
    return nlohmann::ordered_json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON ({})", path, e.what());
  }
}
}  // namespace

void AgentRun::summarize() {
  int64_t fresh = 0, recomputed = 0;
  double sum = 0;
  worst_ttft_s = max_ratio = 0;
  for (size_t i = 1; i < turns.size(); ++i) {
    const AgentTurn& t = turns[i];
    worst_ttft_s = std::max(worst_ttft_s, t.ttft_s);
    sum += t.ttft_s;
    max_ratio = std::max(max_ratio, double(t.recomputed) / double(std::max<int64_t>(1, t.fresh)));
    fresh += t.fresh;
    recomputed += t.recomputed;
  }
  mean_ttft_s = turns.size() > 1 ? sum / double(turns.size() - 1) : 0;
  total_ratio = fresh ? double(recomputed) / double(fresh) : 0;
}

Tokenizer agent_tokenizer(const std::string& dir) {
  const std::string path = dir + "/tokenizer.json";
  std::ifstream f(path);
  if (!f) fail("cannot open {}; pass --tokenizer DIR holding a tokenizer.json", path);
  nlohmann::json j = nlohmann::json::parse(f);
  const Tokenizer base = Tokenizer::from_json(j, path);
  int32_t next = static_cast<int32_t>(base.vocab_size());
  for (const char* t : {"<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>",
                        "</tool_response>"})
    if (base.token_id(t) < 0)
      j["added_tokens"].push_back({{"id", next++}, {"content", t}, {"special", false},
                                   {"normalized", false}});
  return Tokenizer::from_json(j, path);
}

std::vector<std::vector<int32_t>> render_agent_trace(const nlohmann::ordered_json& trace,
                                                     const ChatTemplate& tpl,
                                                     const Tokenizer& tok) {
  if (!trace.contains("messages") || !trace.contains("requests"))
    fail("agent trace: needs \"messages\" and \"requests\" (see tools/agent_trace)");
  const auto& msgs = trace["messages"];
  std::vector<std::vector<int32_t>> out;
  for (const auto& r : trace["requests"]) {
    const size_t k = r.at("messages").get<size_t>();
    if (k == 0 || k > msgs.size()) fail("agent trace: a request takes {} messages of {}", k, msgs.size());
    nlohmann::ordered_json req;
    req["messages"] = nlohmann::ordered_json::array();
    for (size_t i = 0; i < k; ++i) req["messages"].push_back(msgs[i]);
    if (r.contains("overrides"))
      for (const auto& [i, content] : r["overrides"].items())
        req["messages"].at(std::stoul(i))["content"] = content;
    if (trace.contains("tools")) req["tools"] = trace["tools"];
    req["add_generation_prompt"] = true;
    out.push_back(tok.encode(tpl.render(req), false));
  }
  return out;
}

ModelConfig agent_model_config(const std::string& shape, int64_t vocab) {
  ModelConfig c;
  c.model_type = "qwen3_5_moe";
  c.rms_eps = 1e-6f;
  c.qk_norm = QkNorm::PER_HEAD;
  c.attn_output_gate = true;
  c.norm_offset = true;
  c.rope.partial_rotary_factor = 0.25;
  c.norm_topk_prob = true;
  if (shape == "qwen3.6-35b-a3b") {  // Qwen/Qwen3.6-35B-A3B config.json (text_config)
    c.hidden = 2048;
    c.n_layers = 40;
    c.n_heads = 16;
    c.n_kv_heads = 2;
    c.head_dim = 256;
    c.rope.theta = 1e7;
    c.delta = {.n_k_heads = 16, .n_v_heads = 32, .k_head_dim = 128, .v_head_dim = 128,
               .conv_kernel = 4};
    c.n_experts = 256;
    c.top_k = 8;
    c.expert_dim = 512;
    c.shared_expert_dim = 512;
    c.vocab_size = std::max<int64_t>(vocab, 248320);
    c.max_position = 262144;
  } else if (shape == "tiny" || shape == "tiny-attn") {
    c.hidden = 64;
    c.n_layers = 4;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.head_dim = 32;
    c.rope.theta = 1e6;
    c.delta = {.n_k_heads = 2, .n_v_heads = 4, .k_head_dim = 16, .v_head_dim = 16,
               .conv_kernel = 4};
    c.n_experts = 8;
    c.top_k = 2;
    c.expert_dim = 32;
    c.shared_expert_dim = 32;
    c.vocab_size = vocab;
    c.max_position = 262144;
  } else {
    fail("--shape '{}' is not known (known: qwen3.6-35b-a3b, tiny, tiny-attn)", shape);
  }
  c.layer_is_moe.assign(c.n_layers, true);
  if (shape == "tiny-attn") {  // attention-only (Qwen3-MoE-like): every layer attention
    c.model_type = "qwen3_moe";
    c.attn_output_gate = c.norm_offset = false;
    c.rope.partial_rotary_factor = 1.0;
    c.shared_expert_dim = 0;
    c.delta = {};
    return c;
  }
  c.layer_mixer.assign(c.n_layers, Mixer::DELTA_NET);
  for (int64_t l = 3; l < c.n_layers; l += 4) c.layer_mixer[l] = Mixer::ATTENTION;
  return c;
}

AgentRun replay_agent(Engine& e, const std::vector<std::vector<int32_t>>& prompts,
                      const std::string& mode, double max_seconds, bool cold) {
  AgentRun run{.mode = mode};
  Timer total;
  const std::vector<int32_t>* prev = nullptr;
  for (const auto& prompt : prompts) {
    if (max_seconds > 0 && total.seconds() > max_seconds) break;
    size_t common = 0;
    if (prev)
      while (common < prompt.size() && common < prev->size() && prompt[common] == (*prev)[common])
        ++common;
    if (cold) e.reset_prefix_cache(true);
    auto r = std::make_shared<Request>();
    r->prompt = prompt;
    r->max_tokens = 1;
    r->ignore_eos = true;
    const int64_t steps0 = e.stats().steps_total;
    Timer t;
    e.submit(r);
    AgentTurn turn{.prompt = static_cast<int64_t>(prompt.size()),
                   .fresh = static_cast<int64_t>(prompt.size() - common)};
    for (Event ev; r->events.pop(ev, 3600 * 1000);) {
      if (!ev.ids.empty() && turn.first_id < 0) {
        turn.ttft_s = t.seconds();
        turn.first_id = ev.ids[0];
      }
      if (ev.kind != Event::Kind::DONE) continue;
      if (ev.finish == FinishReason::ERROR) fail("agent replay: the engine failed: {}", ev.error);
      turn.recomputed = ev.usage.prompt_tokens - ev.usage.cached_tokens;
      break;
    }
    turn.passes = e.stats().steps_total - steps0;
    run.turns.push_back(turn);
    prev = &prompt;
  }
  run.summarize();
  return run;
}

namespace {
struct AgentBenchOptions {
  std::string trace = "bench/traces/agent_session.json";
  std::string chat_template = "bench/traces/qwen3_agent.jinja";
  std::string tokenizer = "models/demo";
  std::string shape = "qwen3.6-35b-a3b";
  std::string modes = "both";
  int turns = 0;
  int64_t chunk = 4096, anchor_every = 512, anchor_gap = 0;
  size_t snapshot_gib = 8;       // host tier
  size_t snapshot_vram_mib = 2048;  // VRAM tier (CUDA runner, hybrid)
  double max_seconds = 0;
  int threads = 0;
  std::string json_out;
  BackendOptions backend;
};

void print_run(const AgentRun& r) {
  std::printf("\n%s\n| turn | prompt | new | recomputed | ratio | passes | TTFT ms |\n"
              "|---|---|---|---|---|---|---|\n", r.mode.c_str());
  for (size_t i = 0; i < r.turns.size(); ++i) {
    const AgentTurn& t = r.turns[i];
    std::printf("| %zu | %lld | %lld | %lld | %.2f | %lld | %.1f |\n", i, (long long)t.prompt,
                (long long)t.fresh, (long long)t.recomputed,
                double(t.recomputed) / double(std::max<int64_t>(1, t.fresh)),
                (long long)t.passes, t.ttft_s * 1e3);
  }
  std::printf("%s, turns 1..%zu: TTFT worst %.1f ms, mean %.1f ms; recomputed/new max %.2fx, "
              "overall %.2fx\n", r.mode.c_str(), r.turns.size() - 1, r.worst_ttft_s * 1e3,
              r.mean_ttft_s * 1e3, r.max_ratio, r.total_ratio);
}

nlohmann::json run_json(const AgentRun& r) {
  nlohmann::json turns = nlohmann::json::array();
  for (const AgentTurn& t : r.turns)
    turns.push_back({{"prompt", t.prompt}, {"new", t.fresh}, {"recomputed", t.recomputed},
                     {"passes", t.passes},
                     {"ttft_s", t.ttft_s}, {"first_id", t.first_id}});
  return {{"mode", r.mode}, {"turns", turns}, {"worst_ttft_s", r.worst_ttft_s},
          {"mean_ttft_s", r.mean_ttft_s}, {"max_ratio", r.max_ratio},
          {"total_ratio", r.total_ratio}};
}

void run_bench_agent(AgentBenchOptions o) {
  auto tok_owned = std::make_unique<Tokenizer>(agent_tokenizer(o.tokenizer));
  const Tokenizer& tok = *tok_owned;  // the engine owns it later
  const ChatTemplate tpl = ChatTemplate::load(o.chat_template);
  std::vector<std::vector<int32_t>> prompts = render_agent_trace(read_ordered_json(o.trace), tpl, tok);
  if (o.turns > 0 && static_cast<size_t>(o.turns) < prompts.size()) prompts.resize(o.turns);
  size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.size());
  const ModelConfig c = agent_model_config(o.shape, static_cast<int64_t>(tok.vocab_size()));
  std::printf("trace %s: %zu requests, last prompt %zu tokens (template %s, tokenizer %s)\n",
              o.trace.c_str(), prompts.size(), prompts.back().size(), o.chat_template.c_str(),
              o.tokenizer.c_str());
  std::printf("model: synthetic %s (%lld layers, %lld experts top-%lld, hidden %lld), "
              "random bf16 weights\n", o.shape.c_str(), (long long)c.n_layers,
              (long long)c.n_experts, (long long)c.top_k, (long long)c.hidden);
  auto model = Model::synthetic(c, 7, /*one_expert=*/o.shape == "qwen3.6-35b-a3b");
  EngineOptions eo{.max_running = 1, .ctx_size = static_cast<int64_t>(longest) + 64,
                   .chunk = o.chunk, .threads = o.threads, .stats_log_s = 0};
  eo.prefix_cache_tokens = 2 * eo.ctx_size;
  eo.prefix_snapshot_bytes = o.snapshot_gib << 30;
  eo.anchor_every = o.anchor_every;
  eo.anchor_gap = o.anchor_gap;
  o.backend.ctx_size_given = true;
  o.backend.state_snapshot_vram = o.snapshot_vram_mib << 20;
  o.backend.kv_reserve_tokens = eo.ctx_size;
  std::unique_ptr<Runner> runner = make_runner(*model, eo, o.backend);
  const std::string device = runner->stats().device, backend = runner->stats().backend;
  Engine engine(std::move(model), std::move(tok_owned), eo, std::move(runner));
  const PrefixCacheStats ps = engine.stats().prefix;
  std::printf("runner: %s (%s); prefix cache %lld tokens, snapshots: %lld in VRAM, %zu GiB "
              "host; anchor every %lld, gap %lld\n", backend.c_str(), device.c_str(),
              (long long)eo.prefix_cache_tokens, (long long)ps.device_slots, o.snapshot_gib,
              (long long)o.anchor_every, (long long)o.anchor_gap);
  std::vector<AgentRun> runs;
  const std::string every = "every " + std::to_string(o.anchor_every);
  for (const std::string mode : {"anchors", "every", "off"}) {
    if (o.modes != "all" && o.modes != mode && !(o.modes == "both" && mode != "off")) continue;
    engine.reset_prefix_cache(mode == "anchors");
    const std::string name = mode == "anchors" ? "semantic anchors + " + every
                             : mode == "every" ? every + " only"
                                               : "no prefix cache";
    runs.push_back(replay_agent(engine, prompts, name, o.max_seconds, mode == "off"));
    print_run(runs.back());
  }
  for (size_t r = 1; r < runs.size(); ++r) {  // greedy first tokens agree whatever was cached
    size_t same = 0, n = std::min(runs[0].turns.size(), runs[r].turns.size());
    for (size_t i = 0; i < n; ++i) same += runs[0].turns[i].first_id == runs[r].turns[i].first_id;
    std::printf("first tokens: %s vs %s: %zu of %zu identical\n", runs[0].mode.c_str(),
                runs[r].mode.c_str(), same, n);
  }
  if (!o.json_out.empty()) {
    nlohmann::json j = {{"shape", o.shape}, {"backend", backend}, {"device", device},
                        {"runs", nlohmann::json::array()}};
    for (const AgentRun& r : runs) j["runs"].push_back(run_json(r));
    std::ofstream(o.json_out) << j.dump(1) << "\n";
  }
}
}  // namespace

void add_bench_agent_command(CLI::App& bench) {
  auto o = std::make_shared<AgentBenchOptions>();
  o->backend.gpu_memory = "16GiB";
  auto* cmd = bench.add_subcommand(
      "agent", "Replay a coding-agent session through the engine: recomputed tokens and TTFT "
               "per turn, with and without semantic anchors");
  cmd->add_option("--trace", o->trace, "Session trace (tools/agent_trace/make_agent_trace.py)");
  cmd->add_option("--chat-template", o->chat_template, "Chat template to render requests");
  cmd->add_option("--tokenizer", o->tokenizer, "Directory with the tokenizer.json");
  cmd->add_option("--shape", o->shape, "Synthetic model: qwen3.6-35b-a3b | tiny | tiny-attn");
  cmd->add_option("--modes", o->modes,
                  "anchors | every | off (no cache) | both (anchors, every) | all");
  cmd->add_option("--turns", o->turns, "Replay only the first N requests (0: all)");
  cmd->add_option("--chunk", o->chunk, "Tokens per engine step")->check(CLI::PositiveNumber);
  cmd->add_option("--anchor-every", o->anchor_every, "Checkpoint interval of long prefills");
  cmd->add_option("--anchor-gap", o->anchor_gap,
                  "Drop anchors closer than this many tokens (fewer prefill chunks)");
  cmd->add_option("--snapshot-gib", o->snapshot_gib, "Host snapshot budget (GiB)");
  cmd->add_option("--snapshot-vram-mib", o->snapshot_vram_mib,
                  "VRAM for recurrent-state snapshots (MiB, from the --gpu-memory budget)");
  cmd->add_option("--max-seconds", o->max_seconds, "Stop a run after this long (0: never)");
  cmd->add_option("--threads", o->threads, "CPU threads (0: one per core)");
  cmd->add_option("--json", o->json_out, "Write the per-turn results here");
  cmd->add_option("--moe-backend", o->backend.moe_backend, "auto | fused | offload | cpu | hybrid");
  cmd->add_option("--gpu-memory", o->backend.gpu_memory, "VRAM budget");
  cmd->callback([o] { run_bench_agent(*o); });
}

}  // namespace ft::cli
