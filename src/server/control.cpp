// Control routes: health, models, stats, recent requests, Prometheus metrics, raw /generate.
#include <fmt/format.h>

#include "base/error.h"
#include "server/server.h"

namespace ft::server {

namespace {
// The backend's expert-offload counters and per-part time (zeros on the CPU backend).
nlohmann::json moe_json(const RunnerStats& r) {
  return {{"hits", r.hits},
          {"misses", r.misses},
          {"hit_rate", r.hit_rate()},
          {"fetched_experts", r.fetched_experts},
          {"probation_fetches", r.probation_fetches},
          {"fetched_bytes", r.fetched_bytes},
          {"streamed_bytes", r.streamed_bytes},
          {"cpu_experts", r.cpu_experts},
          {"expert_slots", r.expert_slots},
          {"experts_total", r.experts_total},
          {"steps", r.steps},
          {"time_s",
           {{"attention", r.t_attention},
            {"routing", r.t_routing},
            {"hits", r.t_hits},
            {"fetch", r.t_fetch},
            {"cpu", r.t_cpu}}}};
}

// Live resizes and the pressure watcher (issue #9).
nlohmann::json elastic_json(const ElasticStats& x) {
  return {{"watching", x.watching},
          {"resizes", x.resizes},
          {"resize_failures", x.resize_failures},
          {"pending", x.pending},
          {"shrinks", x.shrinks},
          {"grows", x.grows},
          {"oom_events", x.oom_events},
          {"last_resize_s", x.last_resize_s},
          {"resize_p50_s", x.resize_p50_s},
          {"resize_p99_s", x.resize_p99_s},
          {"last_error", x.last_error},
          {"free_bytes", x.free_bytes},
          {"total_bytes", x.total_bytes},
          {"floor_bytes", x.floor_bytes}};
}

// GET /v1/cache/status: every pool, the budget, free device memory and the pending resizes.
nlohmann::json cache_status_json(const Engine& e) {
  const EngineStats s = e.stats();
  nlohmann::json pools = nlohmann::json::array();
  size_t pool_bytes = 0;
  for (const PoolInfo& p : e.pools()) {
    pools.push_back({{"name", p.name}, {"unit", p.unit}, {"size", p.size}, {"used", p.used},
                     {"min", p.min}, {"max", p.max}, {"bytes", p.bytes},
                     {"unit_bytes", p.unit_bytes}});
    pool_bytes += p.bytes;
  }
  return {{"pools", pools},
          {"budget_bytes", s.runner.memory_budget},
          {"used_bytes", s.runner.memory_budget > 0 ? s.runner.memory_planned : pool_bytes},
          {"free_vram_bytes", s.elastic.total_bytes > 0 ? nlohmann::json(s.elastic.free_bytes)
                                                        : nlohmann::json()},
          {"pending", s.elastic.pending},
          {"ctx_size", e.ctx_size()},
          {"elastic", elastic_json(s.elastic)}};
}

nlohmann::json stats_json(const Engine& e) {
  const EngineStats s = e.stats();
  return {{"backend", s.runner.backend},
          {"device", s.runner.device},
          {"uptime_s", s.uptime_s},
          {"running", s.running},
          {"waiting", s.waiting},
          {"requests_total", s.requests_total},
          {"requests_finished", s.requests_finished},
          {"requests_cancelled", s.requests_cancelled},
          {"prompt_tokens_total", s.prompt_tokens_total},
          {"generated_tokens_total", s.generated_tokens_total},
          {"steps_total", s.steps_total},
          {"decode_tokens_per_s", s.decode_tokens_per_s},
          {"prefill_tokens_per_s", s.prefill_tokens_per_s},
          {"memory",
           {{"weight_bytes", s.weight_bytes},
            {"kv_bytes", s.kv_bytes},
            {"kv_tokens", s.runner.kv_tokens},
            {"budget_bytes", s.runner.memory_budget},
            {"planned_bytes", s.runner.memory_planned}}},
          {"moe", moe_json(s.runner)},
          {"prefix_cache",
           {{"enabled", s.prefix.pages_total > 0},
            {"cached_tokens_total", s.cached_tokens_total},
            {"page_tokens", s.prefix.page_tokens},
            {"pages_total", s.prefix.pages_total},
            {"pages_used", s.prefix.pages_used},
            {"tree_nodes", s.prefix.tree_nodes},
            {"evicted_pages", s.prefix.evicted_pages},
            {"kv_bytes", s.prefix.kv_bytes},
            {"snapshots", s.prefix.snapshots},
            {"snapshot_bytes", s.prefix.snapshot_bytes},
            {"snapshot_budget_bytes", s.prefix.snapshot_budget},
            {"snapshot_evictions", s.prefix.snapshot_evictions},
            {"snapshot_hits", s.prefix.snapshot_hits},
            {"snapshot_spills", s.prefix.snapshot_spills},
            {"snapshot_vram_slots", s.prefix.device_slots},
            {"snapshot_vram_used", s.prefix.device_snapshots},
            {"lookups", s.prefix.lookups}}},
          {"elastic", elastic_json(s.elastic)},
          {"max_running_requests", e.options().max_running},
          {"ctx_size", e.ctx_size()}};
}
}  // namespace

void register_control_routes(httplib::Server& http, ServerContext& ctx) {
  http.Get("/v1/models", [&ctx](const httplib::Request&, httplib::Response& res) {
    nlohmann::json m = {{"id", ctx.options.served_model_name}, {"object", "model"},
                        {"created", 0}, {"owned_by", "ft"},
                        {"max_model_len", ctx.engine.ctx_size()}};
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
    const RunnerStats& r = s.runner;
    metric("moe_expert_hits_total", "counter", "Decode expert-cache hits", r.hits);
    metric("moe_expert_misses_total", "counter", "Decode expert-cache misses", r.misses);
    metric("moe_expert_hit_rate", "gauge", "Decode expert-cache hit rate since start", r.hit_rate());
    metric("moe_fetched_experts_total", "counter", "Experts copied host to GPU in decode",
           r.fetched_experts);
    metric("moe_fetched_bytes_total", "counter", "Bytes copied host to GPU in decode",
           r.fetched_bytes);
    metric("moe_probation_fetches_total", "counter",
           "Decode fetches inserted on probation (a pass's experts outnumber the slots)",
           r.probation_fetches);
    metric("moe_streamed_bytes_total", "counter", "Bytes streamed host to GPU in prefill",
           r.streamed_bytes);
    metric("moe_cpu_experts_total", "counter", "Experts computed on the CPU (hybrid)",
           r.cpu_experts);
    metric("step_attention_seconds_total", "counter", "Step time in attention", r.t_attention);
    metric("step_routing_seconds_total", "counter", "Step time in routing", r.t_routing);
    metric("step_hits_seconds_total", "counter", "Step time computing cached experts", r.t_hits);
    metric("step_fetch_seconds_total", "counter", "Step time waiting for expert fetches",
           r.t_fetch);
    metric("step_cpu_seconds_total", "counter", "Step time waiting for CPU experts", r.t_cpu);
    metric("kv_bytes", "gauge", "KV cache bytes held", s.kv_bytes);
    metric("prefix_cache_tokens_total", "counter", "Prompt tokens served from the prefix cache",
           s.cached_tokens_total);
    metric("prefix_cache_pages_used", "gauge", "Prefix cache KV pages in use", s.prefix.pages_used);
    metric("prefix_cache_snapshot_bytes", "gauge", "Recurrent-state snapshot bytes held",
           s.prefix.snapshot_bytes);
    metric("prefix_cache_snapshot_vram_slots", "gauge", "VRAM snapshot slots (device tier)",
           s.prefix.device_slots);
    metric("prefix_cache_snapshot_vram_used", "gauge", "VRAM snapshot slots in use",
           s.prefix.device_snapshots);
    metric("prefix_cache_snapshot_spills_total", "counter",
           "Snapshots spilled from VRAM to host RAM", s.prefix.snapshot_spills);
    metric("prefix_cache_snapshot_evictions_total", "counter", "Snapshots evicted (LRU)",
           s.prefix.snapshot_evictions);
    metric("prefix_cache_snapshot_hits_total", "counter", "Restores from a snapshot",
           s.prefix.snapshot_hits);
    metric("memory_budget_bytes", "gauge", "GPU memory budget (0 on the CPU backend)",
           r.memory_budget);
    const ElasticStats& x = s.elastic;
    metric("cache_resizes_total", "counter", "Live pool resizes applied", x.resizes);
    metric("cache_resize_failures_total", "counter", "Live pool resizes refused or failed",
           x.resize_failures);
    metric("elastic_shrinks_total", "counter", "Pressure or OOM shrinks applied", x.shrinks);
    metric("elastic_grows_total", "counter", "Pressure grows applied", x.grows);
    metric("oom_events_total", "counter", "Engine steps that ran out of memory", x.oom_events);
    metric("cache_resize_seconds_p50", "gauge", "Median time to apply a resize", x.resize_p50_s);
    metric("cache_resize_seconds_p99", "gauge", "p99 time to apply a resize", x.resize_p99_s);
    metric("device_free_bytes", "gauge", "Free device memory at the watcher's last reading",
           x.free_bytes);
    for (const PoolInfo& p : ctx.engine.pools())
      m += fmt::format("ft_pool_size{{pool=\"{0}\",unit=\"{1}\"}} {2}\nft_pool_used{{pool=\"{0}\","
                       "unit=\"{1}\"}} {3}\nft_pool_bytes{{pool=\"{0}\"}} {4}\n",
                       p.name, p.unit, p.size, p.used, p.bytes);
    m += fmt::format("# HELP ft_backend_info Where the experts run\n# TYPE ft_backend_info "
                     "gauge\nft_backend_info{{backend=\"{}\"}} 1\n", r.backend);
    res.set_content(m, "text/plain; version=0.0.4");
  });
  http.Get("/v1/cache/status", [&ctx](const httplib::Request&, httplib::Response& res) {
    res.set_content(cache_status_json(ctx.engine).dump(), "application/json");
  });
  // Live re-split: {"moe_slots" | "moe_bytes", "kv_tokens", "prefix_tokens", "state_slots",
  // "wait_s"}. 400: an impossible target (nothing touched); 409: refused when applied (it
  // would cut a running request, or an allocation failed and it was rolled back); 202: still
  // queued after wait_s; 200: applied.
  post_json(http, ctx, "/v1/cache/rebuild", Dialect::OPENAI,
            [&ctx](const nlohmann::json& b, const httplib::Request&, httplib::Response& res) {
    auto size = [&](const char* key) -> int64_t {
      if (!b.contains(key) || b[key].is_null()) return -1;
      if (!b[key].is_number_integer() || b[key].get<int64_t>() < 0)
        throw HttpError(400, "invalid_request_error",
                        fmt::format("{} must be a non-negative integer", key), key);
      return b[key].get<int64_t>();
    };
    for (const auto& [k, v] : b.items())
      if (k != "moe_slots" && k != "moe_bytes" && k != "kv_tokens" && k != "prefix_tokens" &&
          k != "state_slots" && k != "wait_s")
        throw HttpError(400, "invalid_request_error",
                        fmt::format("unknown field '{}' (moe_slots, moe_bytes, kv_tokens, "
                                    "prefix_tokens, state_slots, wait_s)", k), k);
    ResizeTarget t{.moe_slots = size("moe_slots"), .kv_tokens = size("kv_tokens"),
                   .prefix_tokens = size("prefix_tokens"), .state_slots = size("state_slots")};
    if (const int64_t bytes = size("moe_bytes"); bytes >= 0) {
      if (t.moe_slots >= 0)
        throw HttpError(400, "invalid_request_error", "give moe_slots or moe_bytes, not both",
                        "moe_bytes");
      for (const PoolInfo& p : ctx.engine.pools())
        if (p.name == "moe" && p.unit_bytes > 0)
          t.moe_slots = bytes / static_cast<int64_t>(p.unit_bytes);
      if (t.moe_slots < 0)
        throw HttpError(400, "invalid_request_error", "this backend has no 'moe' pool",
                        "moe_bytes");
    }
    double wait_s = 0;
    if (b.contains("wait_s")) {
      if (!b["wait_s"].is_number() || b["wait_s"].get<double>() < 0 ||
          b["wait_s"].get<double>() > 3600)
        throw HttpError(400, "invalid_request_error", "wait_s must be a number in [0, 3600]",
                        "wait_s");
      wait_s = b["wait_s"].get<double>();
    }
    const int64_t id = ctx.engine.submit_resize(t, "api");
    const ResizeResult r = ctx.engine.resize_result(id, wait_s);
    if (r.done && !r.ok)
      throw HttpError(409, "invalid_request_error", fmt::format("resize refused: {}", r.error));
    nlohmann::json out = cache_status_json(ctx.engine);
    out["id"] = id;
    out["status"] = r.done ? "applied" : "pending";
    if (r.done) out["seconds"] = r.seconds;
    res.status = r.done ? 200 : 202;
    res.set_content(out.dump(), "application/json");
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
