// ft serve: loads the model behind a /health endpoint that reports progress, then serves the
// OpenAI and Anthropic APIs from one engine thread.
#include <csignal>
#include <filesystem>

#include "base/error.h"
#include "base/log.h"
#include "cache/memory_plan.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "engine/backend.h"
#include "experts/bw_profile.h"
#include "server/server.h"

namespace ft::cli {

namespace {
struct ServeOptions {
  std::string model;
  server::ServerOptions http;
  EngineOptions engine;
  BackendOptions backend;
};

httplib::Server* g_http = nullptr;
void on_signal(int) {
  if (g_http) g_http->stop();
}

void run_serve(ServeOptions o) {
  validate_backend_options(o.backend);  // flag mistakes before the port or the model
  if (o.backend.node_rank > 0) {  // tensor parallel, another host: ranks only, no HTTP
    if (o.model.empty()) o.model = default_model_dir();
    auto model = load_model(o.model);
    serve_tp_worker(*model, o.engine, o.backend);
    return;
  }
  if (o.model.empty()) {
    o.model = default_model_dir();
    FT_LOG_INFO("no --model given: serving the embedded demo model ({}), a 22 MB Qwen3-MoE "
                "trained on WordNet dialogues. For real work download a checkpoint, e.g. "
                "`hf download Qwen/Qwen3-30B-A3B --local-dir ~/models/qwen3-30b-a3b`, and run "
                "`ft serve --model ~/models/qwen3-30b-a3b`", o.model);
  }
  if (o.http.served_model_name.empty())
    o.http.served_model_name = std::filesystem::path(o.model).filename().string();
  httplib::Server http;
  http.new_task_queue = [] { return new httplib::ThreadPool(64); };
  http.set_payload_max_length(64u << 20);
  std::atomic<bool> ready{false};
  std::atomic<const char*> phase{"starting"};
  http.set_pre_routing_handler([&](const httplib::Request& req, httplib::Response& res) {
    if (req.path == "/health") {
      const bool ok = ready.load(std::memory_order_acquire);
      res.status = ok ? 200 : 503;
      res.set_content(nlohmann::json{{"status", ok ? "ok" : "loading"}, {"phase", phase.load()}}.dump(),
                      "application/json");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (ready.load(std::memory_order_acquire)) return httplib::Server::HandlerResponse::Unhandled;
    res.status = 503;
    const bool anthropic = req.path.rfind("/v1/messages", 0) == 0;
    res.set_content(server::error_body(anthropic ? server::Dialect::ANTHROPIC
                                                 : server::Dialect::OPENAI,
                                       503, anthropic ? "overloaded_error" : "server_error",
                                       "the model is still loading; poll /health").dump(),
                    "application/json");
    return httplib::Server::HandlerResponse::Handled;
  });
  if (!http.bind_to_port(o.http.host.c_str(), o.http.port))
    fail("cannot listen on {}:{} (in use? try --port)", o.http.host, o.http.port);
  std::thread listener([&] { http.listen_after_bind(); });
  g_http = &http;
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  FT_LOG_INFO("listening on http://{}:{} (loading {})", o.http.host, o.http.port, o.model);
  std::unique_ptr<Engine> engine;
  std::unique_ptr<ChatTemplate> chat;
  std::unique_ptr<server::ServerContext> ctx;
  try {
    phase = "weights";
    auto model = load_model(o.model);
    phase = "tokenizer";
    auto tok = std::make_unique<Tokenizer>(Tokenizer::load(o.model));
    try {
      chat = std::make_unique<ChatTemplate>(ChatTemplate::load(o.model));
    } catch (const Error& e) {
      FT_LOG_WARN("no chat template ({}); chat endpoints will answer 400", e.what());
    }
    phase = "engine";
    auto runner = make_runner(*model, o.engine, o.backend);  // refuses a budget that cannot work
    engine = std::make_unique<Engine>(std::move(model), std::move(tok), o.engine,
                                      std::move(runner));
  } catch (...) {
    http.stop();
    listener.join();
    throw;
  }
  ctx.reset(new server::ServerContext{*engine, chat.get(), o.http});
  server::register_control_routes(http, *ctx);
  server::register_openai_routes(http, *ctx);
  server::register_anthropic_routes(http, *ctx);
  phase = "ready";
  ready.store(true, std::memory_order_release);
  FT_LOG_INFO("serving {} as '{}' on http://{}:{} (max {} running, context {}, {})", o.model,
              o.http.served_model_name, o.http.host, o.http.port,
              engine->options().max_running, engine->options().ctx_size,
              engine->stats().runner.device);
  listener.join();
  g_http = nullptr;
  FT_LOG_INFO("stopped");
}
}  // namespace

void add_serve_command(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  auto* cmd = app.add_subcommand("serve", "Serve OpenAI- and Anthropic-compatible APIs");
  cmd->add_option("--model", o->model,
                  "Model directory (HF checkpoint with tokenizer; default: the embedded demo model)");
  cmd->add_option("--host", o->http.host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", o->http.port, "Port")->check(CLI::Range(1, 65535))->capture_default_str();
  cmd->add_option("--api-key", o->http.api_key, "Require this key (Bearer or x-api-key)");
  cmd->add_option("--served-model-name", o->http.served_model_name,
                  "Model id reported by /v1/models (default: the directory name)");
  cmd->add_option("--max-running-requests", o->engine.max_running, "Sequences decoded together")
      ->check(CLI::Range(1, 256))->capture_default_str();
  cmd->add_option("--max-queue", o->engine.max_queue, "Waiting requests before 429")
      ->check(CLI::Range(0, 100000))->capture_default_str();
  cmd->add_option("--ctx-size", o->engine.ctx_size, "Tokens per sequence (prompt + output)")
      ->check(CLI::Range(16, 1 << 22))->capture_default_str();
  cmd->add_option("--chunk", o->engine.chunk, "Tokens per engine step (prefill chunk size)")
      ->check(CLI::Range(8, 1 << 16))->capture_default_str();
  cmd->add_option("--threads", o->engine.threads, "CPU threads (0: one per core)");
  cmd->add_option("--prefix-cache-tokens", o->engine.prefix_cache_tokens,
                  "KV tokens kept for prefix reuse across requests, CPU engine (-1: one "
                  "context, 0: off)")
      ->check(CLI::Range(int64_t(-1), int64_t(1) << 26))->capture_default_str();
  cmd->add_option("--prefix-anchor-every", o->engine.anchor_every,
                  "Recurrent-state checkpoint interval of long prefills, in tokens (0: none)")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 26))->capture_default_str();
  cmd->add_option("--stats-log-interval", o->engine.stats_log_s,
                  "Seconds between stats log lines (0: never)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  // Where the model runs and how much GPU memory it may use (issue #5).
  auto checked = [](auto parse) {
    return CLI::Validator(
        [parse](std::string& v) -> std::string {
          try {
            parse(v);
          } catch (const Error& e) {
            return e.what();
          }
          return {};
        },
        "", "");
  };
  cmd->add_option("--moe-backend", o->backend.moe_backend,
                  "auto|fused|offload|cpu|hybrid: experts all on the GPU (fused), a VRAM cache "
                  "fed over PCIe (offload), misses split between PCIe and CPU (hybrid), all on "
                  "the CPU (cpu); auto: fused if it fits, else by the `ft bench bw` profile")
      ->check(checked([](const std::string& v) { parse_moe_backend(v); }))
      ->capture_default_str();
  auto* gpu_memory = cmd->add_option(
      "--gpu-memory", o->backend.gpu_memory,
      "GPU memory the engine may use in all (weights, KV, expert slots, scratch), e.g. 8GiB");
  gpu_memory->check(checked([](const std::string& v) { parse_size(v); }));
  cmd->add_option("--memory-ratio", o->backend.memory_ratio,
                  "Fraction of free VRAM to use when --gpu-memory is not given")
      ->check(CLI::Range(0.01, 1.0))->excludes(gpu_memory)->capture_default_str();
  cmd->add_option("--kv-reserve-tokens", o->backend.kv_reserve_tokens,
                  "GPU: KV tokens reserved before the expert cache takes the rest (also the "
                  "context when --ctx-size is not given)")
      ->check(CLI::Range(int64_t{16}, int64_t{1} << 24))->capture_default_str();
  cmd->add_option("--kv-dtype", o->backend.kv_dtype,
                  "GPU KV cache: bf16 (half the bytes, flash attention), f32 (the CPU's "
                  "arithmetic) or auto (bf16)")
      ->check(CLI::IsMember({"auto", "bf16", "f32"}))->capture_default_str();
  auto* cache_size = cmd->add_option("--moe-cache-size", o->backend.moe_cache_size,
                                     "GPU expert slots (default: what the budget holds)");
  cache_size->check(CLI::NonNegativeNumber);
  cmd->add_option("--moe-cache-rate", o->backend.moe_cache_rate,
                  "GPU expert slots as a fraction of all experts")
      ->check(CLI::Range(0.0, 1.0))->excludes(cache_size);
  // Tensor parallelism over NCCL (issue #10): one model split across GPUs and hosts.
  cmd->add_option("--tensor-parallel", o->backend.tensor_parallel,
                  "GPUs the model is split across (heads, MLP and expert widths), all nodes "
                  "together; --gpu-memory / --memory-ratio are then per GPU")
      ->check(CLI::Range(1, 64))->capture_default_str();
  cmd->add_option("--nnodes", o->backend.nnodes,
                  "Hosts taking part, each running ft serve with the same flags")
      ->check(CLI::Range(1, 64))->capture_default_str();
  cmd->add_option("--node-rank", o->backend.node_rank,
                  "This host's index: 0 serves HTTP, the others run their GPUs' ranks")
      ->check(CLI::Range(0, 63))->capture_default_str();
  cmd->add_option("--master", o->backend.master,
                  "ADDR:PORT where node 0 runs NCCL's bootstrap (several nodes)");
  cmd->add_option("--tp-experts", o->backend.tp_experts,
                  "Routed experts under --tensor-parallel: slice (every GPU a column slice of "
                  "each expert), whole (each GPU whole experts), auto (the faster for decode)")
      ->check(CLI::IsMember({"auto", "slice", "whole"}))->capture_default_str();
  // Elastic memory (issue #9): the free-VRAM watcher that shrinks and grows the expert cache.
  auto elastic_on = std::make_shared<std::string>("on");
  auto elastic_floor = std::make_shared<std::string>(), elastic_margin = std::make_shared<std::string>();
  cmd->add_option("--elastic", *elastic_on,
                  "on|off: shrink the expert cache (then the prefix cache) when free VRAM falls "
                  "below --elastic-floor, grow it back when memory returns")
      ->check(checked([](const std::string& v) { parse_on_off("--elastic", v); }))
      ->capture_default_str();
  cmd->add_option("--elastic-floor", *elastic_floor,
                  "Free VRAM to keep for other processes, e.g. 2GiB (default: 5% of the GPU)")
      ->check(checked([](const std::string& v) { parse_size(v); }));
  cmd->add_option("--elastic-margin", *elastic_margin,
                  "Free VRAM above the floor before growing back (default: max(floor/2, 256MiB))")
      ->check(checked([](const std::string& v) { parse_size(v); }));
  cmd->add_option("--elastic-interval-ms", o->engine.elastic.interval_ms,
                  "Milliseconds between free-VRAM readings")
      ->check(CLI::Range(10, 60000))->capture_default_str();
  cmd->add_option("--elastic-grow-cooldown", o->engine.elastic.grow_cooldown_s,
                  "Seconds after a resize before the watcher grows a pool")
      ->check(CLI::Range(0.0, 3600.0))->capture_default_str();
  // The prefix cache's VRAM tier of recurrent-state snapshots (issue #7, hybrid models on CUDA).
  auto snapshot_vram = std::make_shared<std::string>("auto");
  cmd->add_option("--snapshot-vram", *snapshot_vram,
                  "GPU memory for recurrent-state snapshots of the prefix cache (hybrid models), "
                  "from the --gpu-memory budget, e.g. 1GiB; auto: an eighth of the budget, at "
                  "most 64 snapshots; 0: host RAM only")
      ->check(checked([](const std::string& v) { if (v != "auto") parse_size(v); }))
      ->capture_default_str();
  auto* ctx = cmd->get_option("--ctx-size");
  cmd->callback([o, ctx, elastic_on, elastic_floor, elastic_margin, snapshot_vram] {
    o->backend.ctx_size_given = ctx->count() > 0;
    o->backend.state_snapshot_vram = *snapshot_vram == "auto"
                                         ? BackendOptions::k_snapshot_vram_auto
                                         : parse_size(*snapshot_vram);
    o->engine.elastic.on = parse_on_off("--elastic", *elastic_on);
    if (!elastic_floor->empty()) o->engine.elastic.floor_bytes = parse_size(*elastic_floor);
    if (!elastic_margin->empty()) o->engine.elastic.grow_margin_bytes = parse_size(*elastic_margin);
    run_serve(*o);
  });
}

}  // namespace ft::cli
