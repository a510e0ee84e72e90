// POST /v1/completions: legacy text completions (no chat template), prompt as text or token
// ids, logprobs in the legacy {tokens, token_logprobs, top_logprobs, text_offset} shape.
#include <fmt/format.h>

#include <cmath>

#include "server/constraints.h"
#include "server/openai_common.h"

namespace ft::server::openai {

namespace {

std::vector<int32_t> prompt_ids(const ServerContext& ctx, const json& p) {
  auto ids_of = [](const json& a) {
    std::vector<int32_t> ids;
    for (const auto& v : a) {
      if (!v.is_number_integer()) bad_param("prompt", "a token-id prompt must hold integers");
      ids.push_back(v.get<int32_t>());
    }
    return ids;
  };
  if (p.is_string()) return ctx.engine.tokenizer().encode(p.get<std::string>(), true);
  if (p.is_array() && !p.empty()) {
    if (p[0].is_number()) return ids_of(p);
    if (p.size() != 1)
      bad_param("prompt", "batched prompts are not supported; send one prompt per request");
    if (p[0].is_string()) return ctx.engine.tokenizer().encode(p[0].get<std::string>(), true);
    if (p[0].is_array()) return ids_of(p[0]);
  }
  bad_param("prompt", "'prompt' must be a string, a list of token ids, or a list of one of them");
}

// Legacy logprobs for a run of tokens starting at text offset `offset`.
void add_legacy_logprobs(const Tokenizer& tok, const std::vector<TokenLogprobs>& lps,
                         size_t& offset, json& out) {
  const TokenTable& table = token_table(tok);
  auto text_of = [&](int32_t id) {
    return id >= 0 && size_t(id) < table.bytes.size() ? table.bytes[id] : std::string();
  };
  auto lp_of = [](float l) { return std::isfinite(l) ? l : -9999.0f; };
  for (const auto& lp : lps) {
    const std::string t = text_of(lp.id);
    out["tokens"].push_back(t);
    out["token_logprobs"].push_back(lp_of(lp.logprob));
    json top = json::object();
    for (auto [id, l] : lp.top) top[text_of(id)] = lp_of(l);
    out["top_logprobs"].push_back(top);
    out["text_offset"].push_back(offset);
    offset += tok.is_special(lp.id) ? 0 : t.size();
  }
}

json empty_logprobs() {
  return {{"tokens", json::array()}, {"token_logprobs", json::array()},
          {"top_logprobs", json::array()}, {"text_offset", json::array()}};
}

void handle_completions(ServerContext& ctx, const json& b, httplib::Response& res) {
  check_known_fields(b, {"model", "prompt", "stream", "stream_options", "max_tokens",
                         FT_OPENAI_SAMPLING_FIELDS, "n", "best_of", "logprobs", "echo",
                         "suffix", "logit_bias", "user", "metadata", "store", "service_tier"});
  get_string(b, "model");
  get_string(b, "user");
  if (auto n = get_int(b, "n", 1, 128); n && *n != 1) bad_param("n", "only n = 1 is supported");
  if (auto n = get_int(b, "best_of", 1, 128); n && *n != 1)
    bad_param("best_of", "only best_of = 1 is supported");
  if (get_bool(b, "echo").value_or(false)) bad_param("echo", "echo is not supported");
  if (has(b, "suffix")) bad_param("suffix", "suffix is not supported");
  if (has(b, "logit_bias") && !(b["logit_bias"].is_object() && b["logit_bias"].empty()))
    bad_param("logit_bias", "'logit_bias' is not supported");
  if (!has(b, "prompt")) bad_param("prompt", "'prompt' is required");
  const bool stream = get_bool(b, "stream").value_or(false);
  const bool usage = include_usage(b, stream);

  auto req = std::make_shared<Request>();
  req->label = "completions";
  req->prompt = prompt_ids(ctx, b["prompt"]);
  // OpenAI's default is 16 new tokens.
  req->max_tokens = resolve_max_tokens(ctx, b, {"max_tokens"},
                                       static_cast<int64_t>(req->prompt.size()), 16);
  apply_sampling(b, *req);
  const auto logprobs = get_int(b, "logprobs", 0, 20);
  if (logprobs) req->top_logprobs = static_cast<int>(*logprobs);
  ctx.engine.submit(req);

  const std::string id = random_id("cmpl-");
  const int64_t created = now_s();
  const std::string model = ctx.options.served_model_name;
  const Tokenizer& tok = ctx.engine.tokenizer();
  if (!stream) {
    std::string text;
    json lps = empty_logprobs();
    size_t offset = 0;
    const Event done = pump_events(*req, [&](const Event& e) {
      text += e.text;
      if (logprobs) add_legacy_logprobs(tok, e.logprobs, offset, lps);
      return true;
    });
    check_done(done);
    json choice = {{"text", text}, {"index", 0}, {"logprobs", logprobs ? lps : json()},
                   {"finish_reason", finish_name(done.finish, false)}};
    json body = {{"id", id}, {"object", "text_completion"}, {"created", created},
                 {"model", model}, {"choices", json::array({choice})},
                 {"usage", usage_json(done.usage)}, {"system_fingerprint", nullptr}};
    res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace),
                    "application/json");
    return;
  }
  sse_response(res, [&tok, req, id, created, model, usage, logprobs](SseWriter& w) {
    size_t offset = 0;
    auto chunk = [&](const std::string& text, json lp, json finish) {
      json c = {{"id", id}, {"object", "text_completion"}, {"created", created},
                {"model", model}, {"system_fingerprint", nullptr},
                {"choices", json::array({{{"text", text}, {"index", 0}, {"logprobs", lp},
                                          {"finish_reason", finish}}})}};
      if (usage) c["usage"] = nullptr;
      return w.write("", c);
    };
    const Event done = pump_events(*req, [&](const Event& e) {
      if (e.text.empty() && e.logprobs.empty()) return true;
      json lp = nullptr;
      if (logprobs) {
        lp = empty_logprobs();
        add_legacy_logprobs(tok, e.logprobs, offset, lp);
      }
      return chunk(e.text, lp, nullptr);
    });
    if (done.finish == FinishReason::CANCELLED) return;
    if (done.finish == FinishReason::ERROR) {
      w.write("", error_body(Dialect::OPENAI, 500, "server_error",
                             "generation failed: " + done.error));
      w.write_raw("data: [DONE]\n\n");
      return;
    }
    chunk("", nullptr, finish_name(done.finish, false));
    if (usage)
      w.write("", {{"id", id}, {"object", "text_completion"}, {"created", created},
                   {"model", model}, {"choices", json::array()},
                   {"usage", usage_json(done.usage)}});
    w.write_raw("data: [DONE]\n\n");
  });
}
}  // namespace

void register_completions_route(httplib::Server& http, ServerContext& ctx) {
  post_json(http, ctx, "/v1/completions", Dialect::OPENAI,
            [&ctx](const json& b, const httplib::Request&, httplib::Response& res) {
              handle_completions(ctx, b, res);
            });
}

}  // namespace ft::server::openai
