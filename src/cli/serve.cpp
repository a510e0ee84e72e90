// ft serve: loads the model behind a /health endpoint that reports progress, then serves the
// OpenAI and Anthropic APIs from one engine thread.
#include <csignal>
#include <filesystem>

#include "base/error.h"
#include "base/log.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "server/server.h"

namespace ft::cli {

namespace {
struct ServeOptions {
  std::string model;
  server::ServerOptions http;
  EngineOptions engine;
};

httplib::Server* g_http = nullptr;
void on_signal(int) {
  if (g_http) g_http->stop();
}

void run_serve(ServeOptions o) {
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
    engine = std::make_unique<Engine>(std::move(model), std::move(tok), o.engine);
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
  FT_LOG_INFO("serving {} as '{}' on http://{}:{} (max {} running, context {})", o.model,
              o.http.served_model_name, o.http.host, o.http.port, o.engine.max_running,
              o.engine.ctx_size);
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
  cmd->callback([o] { run_serve(*o); });
}

}  // namespace ft::cli
