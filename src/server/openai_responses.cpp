// POST /v1/responses: the Responses API over the chat pipeline. Input items (messages,
// function_call, function_call_output) become chat messages; the output becomes reasoning,
// message and function_call items, whole or as the response.* event stream.
#include <fmt/format.h>

#include "server/openai_common.h"

namespace ft::server::openai {

namespace {

void check_response_fields(const json& b) {
  check_known_fields(b, {"model", "input", "instructions", "tools", "tool_choice",
                         "parallel_tool_calls", "max_output_tokens", "temperature", "top_p",
                         "top_k", "min_p", "presence_penalty", "frequency_penalty",
                         "repetition_penalty", "seed", "stop", "stream", "stream_options",
                         "reasoning", "text", "store", "metadata", "user", "truncation",
                         "include", "service_tier", "previous_response_id", "background",
                         "prompt_cache_key", "safety_identifier"});
  get_string(b, "model");
  get_string(b, "user");
  get_bool(b, "store");
  get_bool(b, "parallel_tool_calls");
  if (has(b, "previous_response_id"))
    bad_param("previous_response_id", "responses are not stored; send the whole conversation");
  if (get_bool(b, "background").value_or(false))
    bad_param("background", "background responses are not supported");
  if (has(b, "metadata") && !b["metadata"].is_object())
    bad_param("metadata", "'metadata' must be an object");
  if (has(b, "include") && !b["include"].is_array())
    bad_param("include", "'include' must be a list");
  if (auto t = get_string(b, "truncation"); t && *t != "disabled" && *t != "auto")
    bad_param("truncation", "'truncation' must be \"disabled\" or \"auto\"");
  if (has(b, "text")) {
    const json& t = b["text"];
    if (!t.is_object()) bad_param("text", "'text' must be an object");
    if (has(t, "format") && t["format"].value("type", "") != "text")
      bad_param("text.format", "only {\"type\": \"text\"} is supported");
  }
  if (has(b, "reasoning")) {
    const json& r = b["reasoning"];
    if (!r.is_object()) bad_param("reasoning", "'reasoning' must be an object");
    if (auto e = get_string(r, "effort"); e && *e != "none" && *e != "minimal" && *e != "low" &&
                                          *e != "medium" && *e != "high")
      bad_param("reasoning.effort", "'reasoning.effort' must be none, minimal, low, medium or high");
  }
}

// Text of a Responses content value: a string or a list of input_text/output_text parts.
std::string content_text(const ojson& c, const std::string& where) {
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) bad_param(where, fmt::format("'{}' must be a string or a list of parts", where));
  std::string text;
  for (const auto& p : c) {
    const std::string type = p.is_object() ? p.value("type", "") : "";
    if (type != "input_text" && type != "output_text" && type != "text")
      bad_param(where, fmt::format("content parts of type '{}' are not supported (text only)", type));
    if (!p.contains("text") || !p["text"].is_string())
      bad_param(where, "a text part needs 'text' (a string)");
    text += p["text"].get<std::string>();
  }
  return text;
}

// input (+ instructions) -> chat messages.
ojson input_messages(const ojson& body) {
  ojson msgs = ojson::array();
  if (body.contains("instructions") && !body["instructions"].is_null()) {
    if (!body["instructions"].is_string()) bad_param("instructions", "'instructions' must be a string");
    msgs.push_back({{"role", "system"}, {"content", body["instructions"]}});
  }
  if (!body.contains("input") || body["input"].is_null()) bad_param("input", "'input' is required");
  const ojson& input = body["input"];
  if (input.is_string()) {
    msgs.push_back({{"role", "user"}, {"content", input}});
    return msgs;
  }
  if (!input.is_array() || input.empty())
    bad_param("input", "'input' must be a string or a non-empty list of items");
  for (size_t i = 0; i < input.size(); ++i) {
    const ojson& it = input[i];
    const std::string where = fmt::format("input[{}]", i);
    if (!it.is_object()) bad_param(where, "each input item must be an object");
    const std::string type = it.value("type", "message");
    if (type == "message") {
      const std::string role = it.value("role", "");
      if (role != "user" && role != "system" && role != "developer" && role != "assistant")
        bad_param(where + ".role", fmt::format("unknown role '{}' (use user, system, developer "
                                               "or assistant)", role));
      if (!it.contains("content")) bad_param(where + ".content", "the message needs 'content'");
      msgs.push_back({{"role", role == "developer" ? "system" : role},
                      {"content", content_text(it["content"], where + ".content")}});
    } else if (type == "function_call") {
      for (const char* k : {"call_id", "name", "arguments"})
        if (!it.contains(k) || !it[k].is_string())
          bad_param(where + "." + k, fmt::format("a function_call needs '{}' (a string)", k));
      if (!json::accept(it["arguments"].get<std::string>()))
        bad_param(where + ".arguments", "'arguments' is not valid JSON");
      if (msgs.empty() || msgs.back()["role"] != "assistant")
        msgs.push_back({{"role", "assistant"}, {"content", ""}});
      ojson& a = msgs.back();
      if (!a.contains("tool_calls")) a["tool_calls"] = ojson::array();
      a["tool_calls"].push_back({{"id", it["call_id"]}, {"type", "function"},
                                 {"function", {{"name", it["name"]},
                                               {"arguments", it["arguments"]}}}});
    } else if (type == "function_call_output") {
      if (!it.contains("call_id") || !it["call_id"].is_string())
        bad_param(where + ".call_id", "a function_call_output needs 'call_id'");
      if (!it.contains("output")) bad_param(where + ".output", "a function_call_output needs 'output'");
      msgs.push_back({{"role", "tool"}, {"tool_call_id", it["call_id"]},
                      {"content", content_text(it["output"], where + ".output")}});
    } else if (type == "reasoning") {
      continue;  // earlier reasoning is not replayed (the Qwen templates drop it too)
    } else {
      bad_param(where + ".type", fmt::format("input items of type '{}' are not supported", type));
    }
  }
  return msgs;
}

// Builds the output items from chat deltas, emitting the stream events when `emit` is set.
class ResponseBuilder {
 public:
  using Emit = std::function<bool(const std::string& type, json ev)>;
  ResponseBuilder(Emit emit, bool parallel) : emit_(std::move(emit)), parallel_(parallel) {}

  bool add(const ChatDelta& d) {
    if (!d.reasoning.empty() && !text_delta(Kind::REASONING, d.reasoning)) return false;
    if (!d.content.empty() && !text_delta(Kind::MESSAGE, d.content)) return false;
    for (const auto& c : d.calls) {
      if (!parallel_ && c.index > 0) continue;
      if (kind_ != Kind::CALL || c.index != call_index_) {
        if (!close()) return false;
        kind_ = Kind::CALL;
        call_index_ = c.index;
        item_ = {{"id", random_id("fc_")}, {"type", "function_call"}, {"status", "in_progress"},
                 {"call_id", random_id("call_")}, {"name", c.name}, {"arguments", ""}};
        if (!send("response.output_item.added", {{"output_index", index()}, {"item", item_}}))
          return false;
      }
      if (c.arguments.empty()) continue;
      text_ += c.arguments;
      if (!send("response.function_call_arguments.delta",
                {{"item_id", item_["id"]}, {"output_index", index()}, {"delta", c.arguments}}))
        return false;
    }
    return true;
  }

  bool close() {
    if (kind_ == Kind::NONE) return true;
    const json id = item_["id"];
    bool ok = true;
    if (kind_ == Kind::CALL) {
      item_["arguments"] = text_;
      ok = send("response.function_call_arguments.done", {{"item_id", id}, {"output_index", index()},
                                                          {"name", item_["name"]},
                                                          {"arguments", text_}});
      ++calls_;
    } else {
      const bool msg = kind_ == Kind::MESSAGE;
      json part = msg ? json{{"type", "output_text"}, {"text", text_}, {"annotations", json::array()},
                             {"logprobs", json::array()}}
                      : json{{"type", "reasoning_text"}, {"text", text_}};
      json done = {{"item_id", id}, {"output_index", index()}, {"content_index", 0},
                   {"text", text_}};
      if (msg) done["logprobs"] = json::array();
      ok = send(msg ? "response.output_text.done" : "response.reasoning_text.done", done) &&
           send("response.content_part.done", {{"item_id", id}, {"output_index", index()},
                                                {"content_index", 0}, {"part", part}});
      item_["content"] = json::array({part});
      if (msg) output_text_ += text_;
    }
    item_["status"] = "completed";
    ok = ok && send("response.output_item.done", {{"output_index", index()}, {"item", item_}});
    output_.push_back(item_);
    kind_ = Kind::NONE;
    text_.clear();
    return ok;
  }

  const json& output() const { return output_; }
  const std::string& output_text() const { return output_text_; }
  int calls() const { return calls_; }

 private:
  enum class Kind { NONE, REASONING, MESSAGE, CALL };
  int index() const { return static_cast<int>(output_.size()); }
  bool send(const std::string& type, json ev) { return !emit_ || emit_(type, std::move(ev)); }

  bool text_delta(Kind k, const std::string& delta) {
    if (kind_ != k) {
      if (!close()) return false;
      kind_ = k;
      const bool msg = k == Kind::MESSAGE;
      item_ = msg ? json{{"id", random_id("msg_")}, {"type", "message"}, {"status", "in_progress"},
                         {"role", "assistant"}, {"content", json::array()}}
                  : json{{"id", random_id("rs_")}, {"type", "reasoning"}, {"summary", json::array()},
                         {"content", json::array()}, {"status", "in_progress"}};
      json part = msg ? json{{"type", "output_text"}, {"text", ""}, {"annotations", json::array()},
                             {"logprobs", json::array()}}
                      : json{{"type", "reasoning_text"}, {"text", ""}};
      if (!send("response.output_item.added", {{"output_index", index()}, {"item", item_}}) ||
          !send("response.content_part.added", {{"item_id", item_["id"]}, {"output_index", index()},
                                                {"content_index", 0}, {"part", part}}))
        return false;
    }
    text_ += delta;
    json ev = {{"item_id", item_["id"]}, {"output_index", index()}, {"content_index", 0},
               {"delta", delta}};
    if (k == Kind::MESSAGE) ev["logprobs"] = json::array();
    return send(k == Kind::MESSAGE ? "response.output_text.delta" : "response.reasoning_text.delta",
                std::move(ev));
  }

  Emit emit_;
  bool parallel_;
  Kind kind_ = Kind::NONE;
  int call_index_ = -1, calls_ = 0;
  json item_;
  std::string text_, output_text_;
  json output_ = json::array();
};

struct ResponseMeta {
  json base;  // the response object without status/output/usage
};

json response_usage(const Usage& u) {
  return {{"input_tokens", u.prompt_tokens},
          {"input_tokens_details", {{"cached_tokens", u.cached_tokens}}},
          {"output_tokens", u.completion_tokens},
          {"output_tokens_details", {{"reasoning_tokens", 0}}},
          {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

json finished(json r, const Event& done, const ResponseBuilder& b) {
  const bool length = done.finish == FinishReason::LENGTH;
  r["status"] = length ? "incomplete" : "completed";
  r["incomplete_details"] = length ? json{{"reason", "max_output_tokens"}} : json();
  r["output"] = b.output();
  r["output_text"] = b.output_text();
  r["usage"] = response_usage(done.usage);
  return r;
}

void handle_responses(ServerContext& ctx, const json& b, const httplib::Request& http_req,
                      httplib::Response& res) {
  check_response_fields(b);
  const ojson body = ojson::parse(http_req.body);
  const bool stream = get_bool(b, "stream").value_or(false);
  if (has(b, "stream_options")) {
    if (!stream) bad_param("stream_options", "'stream_options' is only allowed with stream: true");
    if (!b["stream_options"].is_object()) bad_param("stream_options", "'stream_options' must be an object");
  }
  ojson chat = {{"messages", check_messages(input_messages(body))}};
  const ojson tools = has(b, "tools") ? parse_tools(body["tools"], true, "tools") : ojson::array();
  const ToolChoice choice =
      parse_tool_choice(b.contains("tool_choice") ? b["tool_choice"] : json(), tools, "tool_choice");
  if (!tools.empty()) chat["tools"] = tools;
  if (has(b, "reasoning") && has(b["reasoning"], "effort"))
    chat["reasoning_effort"] = body["reasoning"]["effort"];
  ChatJob job = prepare_chat(ctx, std::move(chat), choice);
  Request& r = *job.req;
  r.label = "responses";
  r.max_tokens = resolve_max_tokens(ctx, b, {"max_output_tokens"}, static_cast<int64_t>(r.prompt.size()));
  apply_sampling(b, r);
  constrain_tools(ctx, job);
  const bool parallel = get_bool(b, "parallel_tool_calls").value_or(true);

  json flat_tools = json::array();
  for (const auto& t : tools) {
    json f = json::parse(t["function"].dump());
    f["type"] = "function";
    if (!f.contains("strict")) f["strict"] = false;
    if (!f.contains("parameters")) f["parameters"] = json::object();
    flat_tools.push_back(f);
  }
  json tool_choice = has(b, "tool_choice") ? b["tool_choice"] : json("auto");
  json base = {{"id", random_id("resp_")}, {"object", "response"}, {"created_at", now_s()},
               {"status", "in_progress"}, {"error", nullptr}, {"incomplete_details", nullptr},
               {"instructions", has(b, "instructions") ? b["instructions"] : json()},
               {"max_output_tokens", has(b, "max_output_tokens") ? b["max_output_tokens"] : json()},
               {"model", ctx.options.served_model_name}, {"output", json::array()},
               {"parallel_tool_calls", parallel}, {"previous_response_id", nullptr},
               {"reasoning", {{"effort", has(b, "reasoning") && has(b["reasoning"], "effort")
                                             ? b["reasoning"]["effort"] : json()},
                              {"summary", nullptr}}},
               {"store", false}, {"temperature", r.sampling.temperature},
               {"text", {{"format", {{"type", "text"}}}}}, {"tool_choice", tool_choice},
               {"tools", flat_tools}, {"top_p", r.sampling.top_p}, {"truncation", "disabled"},
               {"usage", nullptr}, {"user", has(b, "user") ? b["user"] : json()},
               {"metadata", has(b, "metadata") ? b["metadata"] : json::object()}};
  ctx.engine.submit(job.req);

  if (!stream) {
    ChatOutput out(job, false);
    ResponseBuilder builder(nullptr, parallel);
    const Event done = pump_events(*job.req, [&](const Event& e) {
      builder.add(out.feed(e.text));
      return true;
    });
    check_done(done);
    builder.add(out.finish());
    builder.close();
    res.set_content(finished(base, done, builder).dump(-1, ' ', false, json::error_handler_t::replace),
                    "application/json");
    return;
  }
  sse_response(res, [job, base](SseWriter& w) {
    int seq = 0;
    auto emit = [&](const std::string& type, json ev) {
      json e = {{"type", type}, {"sequence_number", seq++}};
      e.update(ev);
      return w.write(type, e);
    };
    ChatOutput out(job, true);
    ResponseBuilder builder(emit, base["parallel_tool_calls"].get<bool>());
    if (!emit("response.created", {{"response", base}}) ||
        !emit("response.in_progress", {{"response", base}})) {
      job.req->cancelled = true;
      pump_events(*job.req, [](const Event&) { return false; });
      return;
    }
    const Event done = pump_events(*job.req, [&](const Event& e) { return builder.add(out.feed(e.text)); });
    if (done.finish == FinishReason::CANCELLED) return;
    if (done.finish == FinishReason::ERROR) {
      json r = base;
      r["status"] = "failed";
      r["error"] = {{"code", "server_error"}, {"message", "generation failed: " + done.error}};
      emit("response.failed", {{"response", r}});
      return;
    }
    if (!builder.add(out.finish()) || !builder.close()) return;
    const json r = finished(base, done, builder);
    emit(r["status"] == "completed" ? "response.completed" : "response.incomplete", {{"response", r}});
  });
}
}  // namespace

void register_responses_route(httplib::Server& http, ServerContext& ctx) {
  post_json(http, ctx, "/v1/responses", Dialect::OPENAI,
            [&ctx](const json& b, const httplib::Request& req, httplib::Response& res) {
              handle_responses(ctx, b, req, res);
            });
}

}  // namespace ft::server::openai
