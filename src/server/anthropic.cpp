// Anthropic Messages API: POST /v1/messages (stream or not) and /v1/messages/count_tokens.
// Wire JSON -> the chat body (anthropic_convert.cpp) -> the shared chat pipeline of
// openai_common.h (template, parsers, tool_choice constraint) -> one engine Request; events ->
// content blocks (thinking, text, tool_use) written whole or as the SSE event sequence
// message_start, (content_block_start, content_block_delta*, content_block_stop)*,
// message_delta, message_stop, with pings while the prompt is prefilled.
#include <fmt/format.h>

#include <random>

#include "base/error.h"
#include "base/log.h"
#include "server/anthropic_convert.h"
#include "server/openai_common.h"
#include "server/server.h"

namespace ft::server {

namespace {

using ojson = nlohmann::ordered_json;
using anthropic::MessagesRequest;

constexpr int k_max_json_depth = 128;
constexpr int k_ping_ms = 3000;

// The body again, as ordered_json (tool schemas keep their key order for `tojson`), refusing
// nesting that recursive JSON code could not survive.
ojson parse_ordered(const std::string& body) {
  return ojson::parse(body, [](int depth, ojson::parse_event_t, ojson&) {
    if (depth > k_max_json_depth)
      throw HttpError(400, "invalid_request_error",
                      fmt::format("the body nests deeper than {} levels", k_max_json_depth));
    return true;
  });
}

std::vector<int32_t> render_prompt(const ServerContext& ctx, const MessagesRequest& m) {
  if (!ctx.chat_template)
    throw HttpError(400, "invalid_request_error",
                    "this model has no chat template; use /generate with raw text");
  const std::string text = ctx.chat_template->render(m.chat);
  return ctx.engine.tokenizer().encode(text, false);  // the template writes any BOS itself
}

ojson usage_json(int64_t prompt, int64_t cached, int64_t output) {
  return {{"input_tokens", prompt - cached},
          {"output_tokens", output},
          {"cache_creation_input_tokens", 0},
          {"cache_read_input_tokens", cached}};
}

// The content blocks of one reply, built from parsed output pieces; when streaming, each piece
// is also written as its SSE event. Methods return false once the client has gone.
class Blocks {
 public:
  explicit Blocks(SseWriter* sse) : sse_(sse) {}

  bool text(std::string_view t) {
    if (t.empty()) return ok_;
    if (open_ != Open::TEXT) start(Open::TEXT, {{"type", "text"}, {"text", ""}});
    content_.back()["text"].get_ref<std::string&>() += t;
    return delta({{"type", "text_delta"}, {"text", t}});
  }
  bool thinking(std::string_view t) {
    if (t.empty()) return ok_;
    if (open_ != Open::THINKING)
      start(Open::THINKING, {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}});
    content_.back()["thinking"].get_ref<std::string&>() += t;
    return delta({{"type", "thinking_delta"}, {"thinking", t}});
  }
  bool tool_start(const std::string& name) {
    start(Open::TOOL, {{"type", "tool_use"}, {"id", anthropic::make_id("toolu_")},
                       {"name", name}, {"input", ojson::object()}});
    args_.clear();
    ++tool_uses_;
    return ok_;
  }
  bool tool_args(std::string_view json) {
    if (json.empty() || open_ != Open::TOOL) return ok_;
    args_ += json;
    return delta({{"type", "input_json_delta"}, {"partial_json", json}});
  }
  bool close() {
    if (open_ == Open::NONE) return ok_;
    if (open_ == Open::THINKING)  // no signature to give; clients expect the event
      delta({{"type", "signature_delta"}, {"signature", ""}});
    if (open_ == Open::TOOL) {
      ojson input = ojson::parse(args_.empty() ? "{}" : args_, nullptr, false);
      if (!input.is_object()) {
        FT_LOG_WARN("tool call '{}' has arguments that are not a JSON object: {}",
                    content_.back()["name"].get<std::string>(), args_);
        input = ojson::object();
      }
      content_.back()["input"] = std::move(input);
    }
    open_ = Open::NONE;
    return emit("content_block_stop", {{"type", "content_block_stop"}, {"index", index()}});
  }
  // Framed here rather than by SseWriter::write so keys keep their order ("type" first).
  bool emit(const char* event, const ojson& data) {
    if (sse_ && ok_)
      ok_ = sse_->write_raw(fmt::format("event: {}\ndata: {}\n\n", event,
                                        data.dump(-1, ' ', false, ojson::error_handler_t::replace)));
    return ok_;
  }
  int tool_uses() const { return tool_uses_; }
  const ojson& content() const { return content_; }

 private:
  enum class Open { NONE, TEXT, THINKING, TOOL };
  int index() const { return static_cast<int>(content_.size()) - 1; }
  void start(Open kind, ojson block) {
    close();
    content_.push_back(block);
    open_ = kind;
    emit("content_block_start",
         {{"type", "content_block_start"}, {"index", index()}, {"content_block", std::move(block)}});
  }
  bool delta(ojson d) {
    return emit("content_block_delta",
                {{"type", "content_block_delta"}, {"index", index()}, {"delta", std::move(d)}});
  }

  SseWriter* sse_;
  ojson content_ = ojson::array();
  Open open_ = Open::NONE;
  std::string args_;  // the open tool_use block's argument JSON so far
  int tool_uses_ = 0;
  bool ok_ = true;
};

// Model output -> blocks through the shared chat pipeline (reasoning and tool-call parsers).
class Output {
 public:
  Output(const openai::ChatJob& job, Blocks& b, bool stream) : chat_(job, stream), blocks_(b) {}
  bool feed(const std::string& text) { return put(chat_.feed(text)); }
  bool finish() {
    put(chat_.finish());
    return blocks_.close();
  }

 private:
  bool put(const openai::ChatDelta& d) {
    blocks_.thinking(d.reasoning);
    blocks_.text(d.content);
    for (const ToolCallDelta& c : d.calls) {
      if (c.index != open_call_) {  // a call's first delta carries its name
        blocks_.tool_start(c.name);
        open_call_ = c.index;
      }
      blocks_.tool_args(c.arguments);
    }
    return blocks_.text({});  // whether the client is still there
  }

  openai::ChatOutput chat_;
  Blocks& blocks_;
  int open_call_ = -1;
};

struct Prepared {
  MessagesRequest msg;
  openai::ChatJob job;
};

openai::ToolChoice shared_tool_choice(const anthropic::ToolChoice& c) {
  using K = anthropic::ToolChoice::Kind;
  using M = openai::ToolChoice::Mode;
  switch (c.kind) {
    case K::ANY: return {M::REQUIRED, {}};
    case K::TOOL: return {M::NAMED, c.name};
    case K::NONE: return {M::NONE, {}};
    case K::AUTO: break;
  }
  return {M::AUTO, {}};
}

Prepared prepare(ServerContext& ctx, const httplib::Request& http_req) {
  Prepared p{anthropic::parse_messages_request(parse_ordered(http_req.body), false), {}};
  const MessagesRequest& m = p.msg;
  p.job = openai::prepare_chat(ctx, m.chat, shared_tool_choice(m.tool_choice));
  Request& req = *p.job.req;
  req.label = "messages";
  // Clients ask for their own output budget (Claude Code: 32000); fit it to the context the
  // way hosted APIs do, rather than refusing the request. A prompt that leaves no room still
  // gets the engine's "does not fit" error.
  const int64_t room = ctx.engine.options().ctx_size - static_cast<int64_t>(req.prompt.size());
  req.max_tokens = room > 0 ? std::min(m.max_tokens, room) : m.max_tokens;
  req.sampling.temperature = m.temperature;
  req.sampling.top_p = m.top_p;
  req.sampling.top_k = m.top_k;
  req.sampling.seed = std::random_device{}();
  req.stop = m.stop_sequences;
  openai::constrain_tools(ctx, p.job);  // tool_choice any / tool: force one well-formed call
  return p;
}

void reply_whole(ServerContext& ctx, const Prepared& p, httplib::Response& res) {
  Blocks blocks(nullptr);
  Output out(p.job, blocks, false);
  Event done = pump_events(*p.job.req, [&](const Event& e) { return out.feed(e.text); });
  out.finish();
  if (done.finish == FinishReason::ERROR)
    throw HttpError(500, "api_error", "generation failed: " + done.error);
  if (done.finish == FinishReason::CANCELLED)
    throw HttpError(503, "overloaded_error", "the request was cancelled (server stopping)");
  const bool tool_use = blocks.tool_uses() > 0;
  ojson msg = {{"id", anthropic::make_id("msg_")},
               {"type", "message"},
               {"role", "assistant"},
               {"model", p.msg.model},
               {"content", blocks.content()},
               {"stop_reason", anthropic::stop_reason(finish_reason_name(done.finish),
                                                      done.matched_stop, tool_use)},
               {"stop_sequence", done.matched_stop.empty() ? ojson(nullptr) : ojson(done.matched_stop)},
               {"usage", usage_json(done.usage.prompt_tokens, done.usage.cached_tokens,
                                    done.usage.completion_tokens)}};
  res.set_content(msg.dump(-1, ' ', false, ojson::error_handler_t::replace), "application/json");
}

// Cancels a submitted request whose stream is dropped before it was pumped to the end.
struct CancelGuard {
  std::shared_ptr<Request> req;
  bool finished = false;
  ~CancelGuard() {
    if (!finished) req->cancelled = true;
  }
};

void reply_stream(const Prepared& p, httplib::Response& res) {
  auto guard = std::make_shared<CancelGuard>();
  guard->req = p.job.req;
  const int64_t prompt_tokens = static_cast<int64_t>(p.job.req->prompt.size());
  sse_response(res, [guard, job = p.job, model = p.msg.model, prompt_tokens](SseWriter& w) {
    Request& req = *guard->req;
    Blocks blocks(&w);
    Output out(job, blocks, true);
    blocks.emit("message_start",
                {{"type", "message_start"},
                 {"message", {{"id", anthropic::make_id("msg_")}, {"type", "message"},
                              {"role", "assistant"}, {"model", model},
                              {"content", ojson::array()}, {"stop_reason", nullptr},
                              {"stop_sequence", nullptr},
                              {"usage", usage_json(prompt_tokens, 0, 0)}}}});
    Event done = pump_events(
        req, [&](const Event& e) { return out.feed(e.text); },
        [&] { return blocks.emit("ping", {{"type", "ping"}}); }, k_ping_ms);
    guard->finished = true;
    out.finish();
    if (done.finish == FinishReason::ERROR || done.finish == FinishReason::CANCELLED) {
      const bool err = done.finish == FinishReason::ERROR;
      blocks.emit("error", error_body(Dialect::ANTHROPIC, err ? 500 : 503,
                                      err ? "api_error" : "overloaded_error",
                                      err ? "generation failed: " + done.error
                                          : "the request was cancelled"));
      return;
    }
    const bool tool_use = blocks.tool_uses() > 0;
    blocks.emit("message_delta",
                {{"type", "message_delta"},
                 {"delta", {{"stop_reason", anthropic::stop_reason(finish_reason_name(done.finish),
                                                                   done.matched_stop, tool_use)},
                            {"stop_sequence", done.matched_stop.empty()
                                                  ? ojson(nullptr) : ojson(done.matched_stop)}}},
                 {"usage", usage_json(done.usage.prompt_tokens, done.usage.cached_tokens,
                                      done.usage.completion_tokens)}});
    blocks.emit("message_stop", {{"type", "message_stop"}});
  });
}

}  // namespace

void register_anthropic_routes(httplib::Server& http, ServerContext& ctx) {
  post_json(http, ctx, "/v1/messages", Dialect::ANTHROPIC,
            [&ctx](const nlohmann::json&, const httplib::Request& http_req, httplib::Response& res) {
    Prepared p = prepare(ctx, http_req);
    ctx.engine.submit(p.job.req);  // 400 (does not fit) and 429 (queue full) before any streaming
    if (p.msg.stream)
      reply_stream(p, res);
    else
      reply_whole(ctx, p, res);
  });
  post_json(http, ctx, "/v1/messages/count_tokens", Dialect::ANTHROPIC,
            [&ctx](const nlohmann::json&, const httplib::Request& http_req, httplib::Response& res) {
    const MessagesRequest m = anthropic::parse_messages_request(parse_ordered(http_req.body), true);
    const int64_t n = static_cast<int64_t>(render_prompt(ctx, m).size());
    res.set_content(ojson{{"input_tokens", n}}.dump(), "application/json");
  });
}

}  // namespace ft::server
