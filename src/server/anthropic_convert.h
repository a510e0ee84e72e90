// Anthropic Messages wire JSON -> the OpenAI-style chat body ChatTemplate renders plus the
// engine-side parameters. Pure functions (no engine, no HTTP), so they are unit-tested directly.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ft::server::anthropic {

// tool_choice: {"type": "auto" | "any" | "tool" (+ "name") | "none"}.
struct ToolChoice {
  enum class Kind { AUTO, ANY, TOOL, NONE };
  Kind kind = Kind::AUTO;
  std::string name;               // Kind::TOOL
  bool disable_parallel = false;  // disable_parallel_tool_use
};

struct MessagesRequest {
  // {"messages": [...], "tools"?: [...], "chat_template_kwargs"?: {...}} for ChatTemplate::render.
  // Tools are omitted when tool_choice is "none" (the model never sees them).
  nlohmann::ordered_json chat;
  std::string model;
  int64_t max_tokens = 0;  // 0 for count_tokens
  bool stream = false;
  float temperature = 1.f;  // Anthropic's default
  float top_p = 1.f;
  int64_t top_k = 0;
  std::vector<std::string> stop_sequences;
  ToolChoice tool_choice;
  std::vector<std::string> tool_names;  // as declared, in order
  std::optional<bool> thinking;         // thinking.type enabled/disabled; unset: template default
  int dropped_system_blocks = 0;        // volatile blocks removed (billing header)
};

// Top-level fields accepted and ignored: they have no effect on a local single-tenant engine.
// context_management (Claude Code sends {"edits": [{"type": "clear_thinking_…"}]}) asks the
// server to prune old thinking / tool results; the history is rendered as sent instead.
// "container" is not here: it only makes sense with server tools, which are refused.
inline constexpr std::string_view k_ignored_fields[] = {
    "metadata", "service_tier", "cache_control", "inference_geo", "speed", "user_profile_id",
    "workspace_id", "diagnostics", "anthropic_version", "context_management"};

// Validates `body` (a /v1/messages request, or /v1/messages/count_tokens when count_tokens:
// max_tokens and stream are then not expected) and converts it. Throws HttpError(400,
// "invalid_request_error", message naming the field) for anything malformed or unsupported
// (images, documents, server tools, unknown top-level fields).
MessagesRequest parse_messages_request(const nlohmann::ordered_json& body, bool count_tokens);

// A system text block that changes on every request and so defeats prefix reuse (Claude Code's
// "x-anthropic-billing-header: ...; cch=<nonce>;"). Such blocks are dropped before templating.
bool is_volatile_system_text(std::string_view text);

// "msg_…" / "toolu_…" ids: the prefix and 24 random base62 characters.
std::string make_id(std::string_view prefix);

// stop_reason for a finished generation.
//   finish: "stop" | "length" | ... (finish_reason_name); matched_stop: the stop string hit.
std::string stop_reason(std::string_view finish, const std::string& matched_stop, bool tool_use);

}  // namespace ft::server::anthropic
