// Control routes: health, models, stats, recent requests, Prometheus metrics, raw /generate.
#include <fmt/format.h>

#include "base/error.h"
#include "server/server.h"

namespace ft::server {

namespace {
nlohmann::json stats_json(const Engine& e) {
  const EngineStats s = e.stats();
  return {{"running", s.running},
          {"waiting", s.waiting},
          {"requests_total", s.requests_total},
          {"requests_finished", s.requests_finished},
          {"requests_cancelled", s.requests_cancelled},
          {"prompt_tokens_total", s.prompt_tokens_total},
          {"generated_tokens_total", s.generated_tokens_total},
          {"steps_total", s.steps_total},
          {"decode_tokens_per_s", s.decode_tokens_per_s},
          {"prefill_tokens_per_s", s.prefill_tokens_per_s},
          {"memory", {{"weight_bytes", s.weight_bytes}, {"kv_bytes", s.kv_bytes}}},
          {"max_running_requests", e.options().max_running},
          {"ctx_size", e.options().ctx_size}};
}
}  // namespace

void register_control_routes(httplib::Server& http, ServerContext& ctx) {
  http.Get("/v1/models", [&ctx](const httplib::Request&, httplib::Response& res) {
    nlohmann::json m = {{"id", ctx.options.served_model_name}, {"object", "model"},
                        {"created", 0}, {"owned_by", "ft"},
                        {"max_model_len", ctx.engine.options().ctx_size}};
    res.set_content(nlohmann::json{{"object", "list"}, {"data", {m}}}.dump(), "application/json");
  });
  http.Get("/v1/stats", [&ctx](const httplib::Request&, httplib::Response& res) {
    res.set_content(stats_json(ctx.engine).dump(), "application/json");
  });
  http.Get("/v1/requests", [&ctx](const httplib::Request&, httplib::Response& res) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& r : ctx.engine.recent_requests())
      out.push_back({{"id", r.id}, {"api", r.label}, {"prompt_tokens", r.prompt_tokens},
                     {"completion_tokens", r.completion_tokens}, {"finish_reason", r.finish},
                     {"ttft_s", r.ttft_s}, {"total_s", r.total_s}});
    res.set_content(nlohmann::json{{"data", out}}.dump(), "application/json");
  });
  http.Get("/metrics", [&ctx](const httplib::Request&, httplib::Response& res) {
    const EngineStats s = ctx.engine.stats();
    std::string m;
    auto metric = [&](const char* name, const char* type, const char* help, double v) {
      m += fmt::format("# HELP ft_{0} {1}\n# TYPE ft_{0} {2}\nft_{0} {3}\n", name, help, type, v);
    };
    metric("requests_running", "gauge", "Requests being generated", s.running);
    metric("requests_waiting", "gauge", "Requests waiting for a slot", s.waiting);
    metric("requests_total", "counter", "Requests accepted", s.requests_total);
    metric("requests_cancelled_total", "counter", "Requests cancelled", s.requests_cancelled);
    metric("prompt_tokens_total", "counter", "Prompt tokens prefilled", s.prompt_tokens_total);
    metric("generation_tokens_total", "counter", "Tokens generated", s.generated_tokens_total);
    metric("decode_tokens_per_second", "gauge", "Recent decode throughput", s.decode_tokens_per_s);
    metric("prefill_tokens_per_second", "gauge", "Recent prefill throughput", s.prefill_tokens_per_s);
    res.set_content(m, "text/plain; version=0.0.4");
  });
  // Raw generation without a chat template: {"text": "..."} or {"input_ids": [...]}.
  post_json(http, ctx, "/generate", Dialect::OPENAI,
            [&ctx](const nlohmann::json& b, const httplib::Request&, httplib::Response& res) {
    auto req = std::make_shared<Request>();
    req->label = "generate";
    if (b.contains("input_ids")) {
      if (!b["input_ids"].is_array()) throw HttpError(400, "", "input_ids must be a list", "input_ids");
      for (const auto& v : b["input_ids"]) {
        if (!v.is_number_integer()) throw HttpError(400, "", "input_ids must be integers", "input_ids");
        req->prompt.push_back(v.get<int32_t>());
      }
    } else if (b.contains("text") && b["text"].is_string()) {
      req->prompt = ctx.engine.tokenizer().encode(b["text"].get<std::string>(), true);
    } else {
      throw HttpError(400, "", "give \"text\" (a string) or \"input_ids\"", "text");
    }
    const auto& sp = b.value("sampling_params", nlohmann::json::object());
    if (!sp.is_object()) throw HttpError(400, "", "sampling_params must be an object", "sampling_params");
    req->max_tokens = sp.value("max_new_tokens", int64_t{128});
    req->sampling.temperature = sp.value("temperature", 0.f);
    req->sampling.top_p = sp.value("top_p", 1.f);
    req->sampling.top_k = sp.value("top_k", int64_t{0});
    req->sampling.seed = sp.value("seed", uint64_t{0});
    req->ignore_eos = sp.value("ignore_eos", false);
    ctx.engine.submit(req);
    std::string text;
    std::vector<int32_t> ids;
    Event done = pump_events(*req, [&](const Event& e) {
      text += e.text;
      ids.insert(ids.end(), e.ids.begin(), e.ids.end());
      return true;
    });
    res.set_content(nlohmann::json{{"text", text}, {"output_ids", ids},
                                   {"meta_info", {{"finish_reason", finish_reason_name(done.finish)},
                                                  {"prompt_tokens", done.usage.prompt_tokens},
                                                  {"completion_tokens", done.usage.completion_tokens}}}}
                        .dump(), "application/json");
  });
}

}  // namespace ft::server
