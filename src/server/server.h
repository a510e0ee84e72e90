// ft serve: the HTTP front end. Transport (httplib + SSE) here; one adapter file per API
// dialect registers its routes and converts wire JSON <-> engine Request/Event.
#pragma once
#include <httplib.h>

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/engine.h"
#include "tokenizer/chat_template.h"

namespace ft::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 1919;
  std::string api_key;             // empty: no auth
  std::string served_model_name;   // default: the model directory's name
};

// What every route handler can reach. The engine is the only owner of model state.
struct ServerContext {
  Engine& engine;
  const ChatTemplate* chat_template;  // nullptr when the model has none
  ServerOptions options;
};

// An error the adapters throw while parsing a request; the route wrapper writes it in the
// dialect's error shape with this status.
struct HttpError : std::runtime_error {
  HttpError(int status, std::string type, const std::string& msg, std::string param = {})
      : std::runtime_error(msg), status(status), type(std::move(type)), param(std::move(param)) {}
  int status;
  std::string type;   // OpenAI "invalid_request_error" / Anthropic "invalid_request_error", ...
  std::string param;  // the offending field, when known
};

enum class Dialect { OPENAI, ANTHROPIC };

// Error bodies: {"error": {"message", "type", "param", "code"}} (OpenAI) or
// {"type": "error", "error": {"type", "message"}} (Anthropic).
nlohmann::json error_body(Dialect d, int status, const std::string& type, const std::string& msg,
                          const std::string& param = {});

// Registers a POST JSON route: parses the body (400 on bad JSON), checks the API key, runs fn,
// and maps HttpError / RequestError / ft::Error to the dialect's error JSON.
void post_json(httplib::Server& http, ServerContext& ctx, const std::string& path, Dialect d,
               std::function<void(const nlohmann::json& body, const httplib::Request&,
                                  httplib::Response&)> fn);

// Server-sent events: `produce` is called on the HTTP thread with a writer; it returns when the
// stream is complete. write() returns false once the client has gone away.
struct SseWriter {
  std::function<bool(const std::string& event, const nlohmann::json& data)> write;  // event may be ""
  std::function<bool(const std::string& raw)> write_raw;  // e.g. "data: [DONE]\n\n"
};
void sse_response(httplib::Response& res, std::function<void(SseWriter&)> produce);

// Streams a submitted request's events to `on_event` until DONE; cancels the request when
// on_event returns false (client gone). Returns the DONE event. on_idle is called about every
// `idle_ms` while no event arrives (Anthropic pings); returning false cancels too.
Event pump_events(Request& req, const std::function<bool(const Event&)>& on_event,
                  const std::function<bool()>& on_idle = {}, int idle_ms = 5000);

// Route registration, one per dialect file.
void register_control_routes(httplib::Server& http, ServerContext& ctx);    // control.cpp
void register_openai_routes(httplib::Server& http, ServerContext& ctx);     // openai_*.cpp
void register_anthropic_routes(httplib::Server& http, ServerContext& ctx);  // anthropic.cpp

}  // namespace ft::server
