// POST /v1/chat/completions: OpenAI chat requests -> one engine Request; the output split into
// content, reasoning_content and tool_calls, whole or as chat.completion.chunk events.
#include <map>

#include "server/openai_common.h"

namespace ft::server::openai {

namespace {

// Accepted fields. user/metadata/store/service_tier/prompt_cache_key/safety_identifier are
// bookkeeping that does not change the output and are ignored; everything else is used or
// checked (response_format text only, logit_bias empty, modalities ["text"], n = 1).
void check_chat_fields(const json& b) {
  check_known_fields(b, {"model", "messages", "stream", "stream_options", "max_tokens",
                         "max_completion_tokens", FT_OPENAI_SAMPLING_FIELDS, "n", "logprobs",
                         "top_logprobs", "tools", "tool_choice", "parallel_tool_calls",
                         "chat_template_kwargs", "reasoning_effort", "response_format",
                         "logit_bias", "modalities", "user", "metadata", "store",
                         "service_tier", "prompt_cache_key", "safety_identifier"});
  get_string(b, "model");
  get_string(b, "user");
  get_string(b, "service_tier");
  get_bool(b, "store");
  get_bool(b, "parallel_tool_calls");
  if (has(b, "metadata") && !b["metadata"].is_object())
    bad_param("metadata", "'metadata' must be an object");
  if (auto n = get_int(b, "n", 1, 128); n && *n != 1) bad_param("n", "only n = 1 is supported");
  if (has(b, "response_format") &&
      !(b["response_format"].is_object() && b["response_format"].value("type", "") == "text"))
    bad_param("response_format", "only {\"type\": \"text\"} is supported");
  if (has(b, "logit_bias") && !(b["logit_bias"].is_object() && b["logit_bias"].empty()))
    bad_param("logit_bias", "'logit_bias' is not supported");
  if (has(b, "modalities") && b["modalities"] != json::array({"text"}))
    bad_param("modalities", "only [\"text\"] is supported");
  if (auto e = get_string(b, "reasoning_effort");
      e && *e != "none" && *e != "minimal" && *e != "low" && *e != "medium" && *e != "high")
    bad_param("reasoning_effort", "'reasoning_effort' must be none, minimal, low, medium or high");
  if (has(b, "chat_template_kwargs") && !b["chat_template_kwargs"].is_object())
    bad_param("chat_template_kwargs", "'chat_template_kwargs' must be an object");
}

struct ChatMeta {
  std::string id = random_id("chatcmpl-");
  int64_t created = now_s();
  std::string model;
  bool logprobs = false, usage = false, parallel = true;
};

// Tool-call deltas in the wire shape; ids are made on a call's first delta.
json tool_call_deltas(const std::vector<ToolCallDelta>& calls, std::map<int, std::string>& ids,
                      bool parallel) {
  json out = json::array();
  for (const auto& c : calls) {
    if (!parallel && c.index > 0) continue;
    json tc = {{"index", c.index}};
    if (!ids.contains(c.index)) {
      ids[c.index] = random_id("call_");
      tc["id"] = ids[c.index];
      tc["type"] = "function";
      tc["function"] = {{"name", c.name}, {"arguments", c.arguments}};
    } else {
      tc["function"] = {{"arguments", c.arguments}};
    }
    out.push_back(tc);
  }
  return out;
}

void respond_whole(const ServerContext& ctx, const ChatJob& job, const ChatMeta& m,
                   httplib::Response& res) {
  ChatOutput out(job, false);
  std::string content, reasoning;
  json calls = json::array(), lps = json::array();
  std::map<int, std::string> ids;
  auto take = [&](ChatDelta d) {
    content += d.content;
    reasoning += d.reasoning;
    for (auto& tc : tool_call_deltas(d.calls, ids, m.parallel)) {
      tc.erase("index");
      calls.push_back(tc);
    }
  };
  const Event done = pump_events(*job.req, [&](const Event& e) {
    take(out.feed(e.text));
    for (const auto& lp : e.logprobs) lps.push_back(chat_logprob(ctx.engine.tokenizer(), lp));
    return true;
  });
  check_done(done);
  take(out.finish());
  json msg = {{"role", "assistant"},
              {"content", content.empty() && !calls.empty() ? json() : json(content)},
              {"reasoning_content", reasoning.empty() ? json() : json(reasoning)}};
  if (!calls.empty()) msg["tool_calls"] = calls;
  json choice = {{"index", 0}, {"message", msg},
                 {"logprobs", m.logprobs ? json{{"content", lps}, {"refusal", nullptr}} : json()},
                 {"finish_reason", finish_name(done.finish, !calls.empty())}};
  json body = {{"id", m.id}, {"object", "chat.completion"}, {"created", m.created},
               {"model", m.model}, {"choices", json::array({choice})},
               {"usage", usage_json(done.usage)}, {"system_fingerprint", nullptr}};
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void respond_stream(const ServerContext& ctx, const ChatJob& job, const ChatMeta& m,
                    httplib::Response& res) {
  sse_response(res, [&ctx, job, m](SseWriter& w) {
    ChatOutput out(job, true);
    std::map<int, std::string> ids;
    json pending_lps = json::array();  // logprobs not yet attached to a chunk
    auto chunk = [&](json delta, json finish = nullptr) {
      json lp = nullptr;
      if (m.logprobs && !pending_lps.empty()) {
        lp = {{"content", pending_lps}, {"refusal", nullptr}};
        pending_lps = json::array();
      }
      json c = {{"id", m.id}, {"object", "chat.completion.chunk"}, {"created", m.created},
                {"model", m.model}, {"system_fingerprint", nullptr},
                {"choices", json::array({{{"index", 0}, {"delta", std::move(delta)},
                                          {"logprobs", lp}, {"finish_reason", finish}}})}};
      if (m.usage) c["usage"] = nullptr;
      return w.write("", c);
    };
    auto send = [&](const ChatDelta& d) {
      bool ok = true;
      if (!d.reasoning.empty()) ok = ok && chunk({{"reasoning_content", d.reasoning}});
      if (!d.content.empty()) ok = ok && chunk({{"content", d.content}});
      if (!d.calls.empty()) {
        json tcs = tool_call_deltas(d.calls, ids, m.parallel);
        if (!tcs.empty()) ok = ok && chunk({{"tool_calls", tcs}});
      }
      return ok;
    };
    if (!chunk({{"role", "assistant"}, {"content", ""}})) {
      job.req->cancelled = true;
      pump_events(*job.req, [](const Event&) { return false; });
      return;
    }
    const Event done = pump_events(*job.req, [&](const Event& e) {
      for (const auto& lp : e.logprobs)
        pending_lps.push_back(chat_logprob(ctx.engine.tokenizer(), lp));
      return send(out.feed(e.text));
    });
    if (done.finish == FinishReason::CANCELLED) return;  // the client has gone
    if (done.finish == FinishReason::ERROR) {
      w.write("", error_body(Dialect::OPENAI, 500, "server_error",
                             "generation failed: " + done.error));
      w.write_raw("data: [DONE]\n\n");
      return;
    }
    send(out.finish());
    chunk(json::object(), finish_name(done.finish, !ids.empty()));
    if (m.usage)
      w.write("", {{"id", m.id}, {"object", "chat.completion.chunk"}, {"created", m.created},
                   {"model", m.model}, {"system_fingerprint", nullptr},
                   {"choices", json::array()}, {"usage", usage_json(done.usage)}});
    w.write_raw("data: [DONE]\n\n");
  });
}

void handle_chat(ServerContext& ctx, const json& b, const httplib::Request& http_req,
                 httplib::Response& res) {
  check_chat_fields(b);
  const ojson body = ojson::parse(http_req.body);  // keeps tool-schema key order
  const bool stream = get_bool(b, "stream").value_or(false);
  ChatMeta m;
  m.model = ctx.options.served_model_name;
  m.usage = include_usage(b, stream);
  m.parallel = get_bool(b, "parallel_tool_calls").value_or(true);
  if (!has(b, "messages")) bad_param("messages", "'messages' is required");
  ojson chat = {{"messages", check_messages(body["messages"])}};
  const ojson tools = has(b, "tools") ? parse_tools(body["tools"], false, "tools") : ojson::array();
  const ToolChoice choice =
      parse_tool_choice(b.contains("tool_choice") ? b["tool_choice"] : json(), tools, "tool_choice");
  if (!tools.empty()) chat["tools"] = tools;
  if (has(b, "chat_template_kwargs")) chat["chat_template_kwargs"] = body["chat_template_kwargs"];
  if (has(b, "reasoning_effort")) chat["reasoning_effort"] = body["reasoning_effort"];

  ChatJob job = prepare_chat(ctx, std::move(chat), choice);
  Request& r = *job.req;
  r.label = "chat.completions";
  r.max_tokens = resolve_max_tokens(ctx, b, {"max_completion_tokens", "max_tokens"},
                                    static_cast<int64_t>(r.prompt.size()));
  apply_sampling(b, r);
  m.logprobs = get_bool(b, "logprobs").value_or(false);
  const auto top = get_int(b, "top_logprobs", 0, 20);
  if (top && !m.logprobs) bad_param("top_logprobs", "'top_logprobs' needs logprobs: true");
  if (m.logprobs) r.top_logprobs = static_cast<int>(top.value_or(0));
  constrain_tools(ctx, job);
  ctx.engine.submit(job.req);
  if (stream) {
    respond_stream(ctx, job, m, res);
  } else {
    respond_whole(ctx, job, m, res);
  }
}
}  // namespace

void register_chat_route(httplib::Server& http, ServerContext& ctx) {
  post_json(http, ctx, "/v1/chat/completions", Dialect::OPENAI,
            [&ctx](const json& b, const httplib::Request& req, httplib::Response& res) {
              handle_chat(ctx, b, req, res);
            });
}

}  // namespace ft::server::openai
