// Transport shared by every dialect: JSON routes with auth and error mapping, SSE, event pump.
#include "server/server.h"

#include "base/error.h"
#include "base/log.h"

namespace ft::server {

nlohmann::json error_body(Dialect d, int status, const std::string& type, const std::string& msg,
                          const std::string& param) {
  if (d == Dialect::ANTHROPIC)
    return {{"type", "error"}, {"error", {{"type", type}, {"message", msg}}}};
  nlohmann::json e = {{"message", msg}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) e["param"] = param;
  if (status == 429) e["code"] = "rate_limit_exceeded";
  return {{"error", e}};
}

namespace {
// The error "type" each dialect uses for a status.
std::string error_type(Dialect d, int status) {
  if (d == Dialect::ANTHROPIC) {
    switch (status) {
      case 401: return "authentication_error";
      case 404: return "not_found_error";
      case 413: return "request_too_large";
      case 429: return "rate_limit_error";
      case 503: return "overloaded_error";
      default: return status >= 500 ? "api_error" : "invalid_request_error";
    }
  }
  switch (status) {
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 429: return "rate_limit_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

// Error messages may quote the client's bytes; invalid UTF-8 in them becomes U+FFFD.
std::string json_text(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

bool authorized(const ServerContext& ctx, const httplib::Request& req) {
  if (ctx.options.api_key.empty()) return true;
  if (req.get_header_value("x-api-key") == ctx.options.api_key) return true;
  return req.get_header_value("Authorization") == "Bearer " + ctx.options.api_key;
}
}  // namespace

void write_error(httplib::Response& res, Dialect d, int status, const std::string& msg,
                 const std::string& param = {}) {
  res.status = status;
  res.set_content(json_text(error_body(d, status, error_type(d, status), msg, param)),
                  "application/json");
}

void post_json(httplib::Server& http, ServerContext& ctx, const std::string& path, Dialect d,
               std::function<void(const nlohmann::json&, const httplib::Request&,
                                  httplib::Response&)> fn) {
  http.Post(path, [&ctx, d, fn](const httplib::Request& req, httplib::Response& res) {
    if (!authorized(ctx, req)) return write_error(res, d, 401, "invalid API key");
    nlohmann::json body;
    try {
      body = nlohmann::json::parse(req.body);
    } catch (const nlohmann::json::exception& e) {
      return write_error(res, d, 400, std::string("the body is not valid JSON: ") + e.what());
    }
    if (!body.is_object()) return write_error(res, d, 400, "the body must be a JSON object");
    try {
      fn(body, req, res);
    } catch (const HttpError& e) {
      res.status = e.status;
      res.set_content(json_text(error_body(d, e.status, e.type.empty() ? error_type(d, e.status) : e.type,
                                           e.what(), e.param)), "application/json");
    } catch (const RequestError& e) {
      write_error(res, d, e.status, e.what());
    } catch (const Error& e) {
      write_error(res, d, 400, e.what());
    } catch (const nlohmann::json::exception& e) {
      write_error(res, d, 400, std::string("malformed request: ") + e.what());
    } catch (const std::bad_alloc&) {
      write_error(res, d, 503, "out of memory while handling the request");
    } catch (const std::exception& e) {
      FT_LOG_WARN("{} failed: {}", req.path, e.what());
      write_error(res, d, 500, e.what());
    }
  });
}

void sse_response(httplib::Response& res, std::function<void(SseWriter&)> produce) {
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream", [produce = std::move(produce)](size_t, httplib::DataSink& sink) {
        bool open = true;
        SseWriter w;
        w.write_raw = [&](const std::string& raw) {
          open = open && sink.is_writable() && sink.write(raw.data(), raw.size());
          return open;
        };
        w.write = [&](const std::string& event, const nlohmann::json& data) {
          std::string frame;
          if (!event.empty()) frame = "event: " + event + "\n";
          frame += "data: " + json_text(data) + "\n\n";
          return w.write_raw(frame);
        };
        produce(w);
        sink.done();
        return true;
      });
}

Event pump_events(Request& req, const std::function<bool(const Event&)>& on_event,
                  const std::function<bool()>& on_idle, int idle_ms) {
  Event e;
  bool cancelled = false;
  for (;;) {
    if (!req.events.pop(e, idle_ms)) {
      if (on_idle && !cancelled && !on_idle()) {
        req.cancelled = true;
        cancelled = true;
      }
      continue;
    }
    if (e.kind == Event::Kind::DONE) {
      if (!cancelled) on_event(e);
      return e;
    }
    if (!cancelled && !on_event(e)) {
      req.cancelled = true;  // the engine frees the slot at its next step
      cancelled = true;
    }
  }
}

}  // namespace ft::server
