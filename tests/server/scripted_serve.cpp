// ft_scripted_serve: the real HTTP server, engine and CPU runner for the server tests, with the
// model's output scripted. A random-weight model never writes a format by itself, so a prompt
// containing [[script:NAME]] (the last one, in a conversation) gets the script's tokens forced
// through its logits (the forward still runs; sampling, stop tokens, detokenizing and the output
// parsers are the real ones).
// Test-only: built with the tests, never part of `ft`.
// usage: ft_scripted_serve serve --model DIR --scripts FILE.json [--host H] [--port P]
//        [--served-model-name N] [--threads T] [--ctx-size C] [--max-running-requests M]
//   FILE.json: {"NAME": "output text, special tokens written out", ...}; after a script's last
//   token the model is made to emit its eos.
#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <map>
#include <thread>

#include "engine/engine.h"
#include "engine/runner.h"
#include "io/mmap.h"
#include "model/model.h"
#include "server/server.h"
#include "tokenizer/chat_template.h"

using namespace ft;

namespace {

class ScriptedRunner final : public Runner {
 public:
  ScriptedRunner(std::unique_ptr<Runner> inner, const Tokenizer& tok,
                 std::map<std::string, std::vector<int32_t>> scripts, int32_t eos, int64_t vocab)
      : inner_(std::move(inner)),
        tok_(tok),
        scripts_(std::move(scripts)),
        eos_(eos),
        vocab_(vocab) {}
  int max_seqs() const override { return inner_->max_seqs(); }
  int64_t capacity() const override { return inner_->capacity(); }
  int64_t max_chunk() const override { return inner_->max_chunk(); }
  void open(int seq) override {
    inner_->open(seq);
    seqs_[seq] = {};
  }
  void close(int seq) override {
    inner_->close(seq);
    seqs_.erase(seq);
  }
  void forward_batch(std::span<const RunnerStep> steps) override {
    inner_->forward_batch(steps);
    for (const RunnerStep& st : steps) {
      Seq& s = seqs_[st.seq];
      s.ids.insert(s.ids.end(), st.ids, st.ids + st.n);
      if (!st.logits && !st.argmax) continue;
      if (s.k == 0) {  // the prompt is complete: its last marker picks the script
        const std::string prompt = tok_.decode(s.ids, false);
        size_t last = 0;
        for (const auto& [name, ids] : scripts_)
          if (size_t p = prompt.rfind("[[script:" + name + "]]");
              p != std::string::npos && (!s.script || p > last))
            s.script = &ids, last = p;
      }
      if (s.script) {
        const int32_t want = s.k < s.script->size() ? (*s.script)[s.k] : eos_;
        if (st.logits) {
          std::fill(st.logits, st.logits + vocab_, -INFINITY);
          st.logits[want] = 0.f;
        }
        if (st.argmax) *st.argmax = want;
      }
      ++s.k;
    }
  }
  RunnerStats stats() const override { return inner_->stats(); }
  size_t weight_bytes() const override { return inner_->weight_bytes(); }
  size_t kv_bytes() const override { return inner_->kv_bytes(); }

 private:
  struct Seq {
    std::vector<int32_t> ids;  // every token this slot has run
    const std::vector<int32_t>* script = nullptr;
    size_t k = 0;  // logits steps so far (= tokens generated)
  };
  std::unique_ptr<Runner> inner_;
  const Tokenizer& tok_;
  std::map<std::string, std::vector<int32_t>> scripts_;
  int32_t eos_;
  int64_t vocab_;
  std::map<int, Seq> seqs_;
};

httplib::Server* g_http = nullptr;
void on_signal(int) {
  if (g_http) g_http->stop();
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> a;
  for (int i = 2; i + 1 < argc; i += 2) a[argv[i]] = argv[i + 1];
  if (argc < 2 || std::string(argv[1]) != "serve" || !a.count("--model") || !a.count("--scripts")) {
    std::fprintf(stderr, "usage: ft_scripted_serve serve --model DIR --scripts FILE [...]\n");
    return 2;
  }
  try {
    auto get = [&](const char* k, const std::string& d) { return a.count(k) ? a[k] : d; };
    const std::string dir = a["--model"];
    auto tok = std::make_unique<Tokenizer>(Tokenizer::load(dir));
    auto chat = std::make_unique<ChatTemplate>(ChatTemplate::load(dir));
    std::map<std::string, std::vector<int32_t>> scripts;
    const nlohmann::json script_file = nlohmann::json::parse(read_file(a["--scripts"]));
    for (const auto& [name, text] : script_file.items())
      scripts[name] = tok->encode(text.get<std::string>(), false);
    auto model = Model::load(dir);
    EngineOptions eo;
    eo.threads = std::stoi(get("--threads", "2"));
    eo.ctx_size = std::stoll(get("--ctx-size", "2048"));
    eo.max_running = std::stoi(get("--max-running-requests", "4"));
    eo.prefix_cache_tokens = 0;  // the runner must see every prompt token to find its script
    eo.stats_log_s = 0;
    auto inner = make_cpu_runner(*model, eo.threads, eo.chunk, eo.max_running, eo.ctx_size);
    const int32_t eos = tok->eos_id() >= 0 ? tok->eos_id() : 0;
    auto runner = std::make_unique<ScriptedRunner>(std::move(inner), *tok, std::move(scripts), eos,
                                                   model->config().vocab_size);
    Engine engine(std::move(model), std::move(tok), eo, std::move(runner));
    server::ServerOptions so;
    so.host = get("--host", "127.0.0.1");
    so.port = std::stoi(get("--port", "1919"));
    so.served_model_name = get("--served-model-name", std::filesystem::path(dir).filename());
    server::ServerContext ctx{engine, chat.get(), so};
    httplib::Server http;
    http.Get("/health", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"status":"ok"})", "application/json");
    });
    server::register_control_routes(http, ctx);
    server::register_openai_routes(http, ctx);
    server::register_anthropic_routes(http, ctx);
    g_http = &http;
    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);
    if (!http.listen(so.host, so.port)) fail("cannot listen on {}:{}", so.host, so.port);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ft_scripted_serve: %s\n", e.what());
    return 1;
  }
  return 0;
}
