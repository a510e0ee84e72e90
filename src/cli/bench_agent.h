// ft bench agent: replays a multi-turn coding-agent session (bench/traces/agent_session.json,
// written by tools/agent_trace/make_agent_trace.py) through the engine and its prefix cache,
// with semantic anchors and with only every-N checkpoints: per turn the new prompt tokens, the
// tokens recomputed, and the time to first token.
#pragma once
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "model/config.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ft::cli {

struct AgentTurn {
  int64_t prompt = 0;      // prompt tokens
  int64_t fresh = 0;       // tokens after the longest common prefix with the previous prompt
  int64_t recomputed = 0;  // prompt tokens the engine ran (prompt - cached)
  int64_t passes = 0;      // engine steps (forward passes) the turn took
  double ttft_s = 0;
  int32_t first_id = -1;   // the greedy first token (identical whatever the cache did)
};

struct AgentRun {
  std::string mode;  // "anchors" or "every-N"
  std::vector<AgentTurn> turns;
  // Over turns 1.. (turn 0 is a cold start): TTFT worst and mean, the largest and the overall
  // ratio of recomputed to new tokens.
  double worst_ttft_s = 0, mean_ttft_s = 0, max_ratio = 0, total_ratio = 0;
  void summarize();
};

// The tokenizer of dir with the agent special tokens (<think>, </think>, <tool_call>,
// </tool_call>, <tool_response>, </tool_response>) added after its vocabulary where missing.
Tokenizer agent_tokenizer(const std::string& dir);

// Each request of the trace rendered through the template (add_generation_prompt) and encoded.
std::vector<std::vector<int32_t>> render_agent_trace(const nlohmann::ordered_json& trace,
                                                     const ChatTemplate& tpl,
                                                     const Tokenizer& tok);

// A synthetic model shape: "qwen3.6-35b-a3b" (Qwen3.6-35B-A3B: 40 layers, 3 Gated DeltaNet : 1
// gated attention, 256 experts top-8 + a shared expert), "tiny" (the same layout in a few MB,
// for CPU tests) or "tiny-attn" (attention-only, Qwen3-MoE-like); vocab covers the tokenizer.
ModelConfig agent_model_config(const std::string& shape, int64_t vocab);

// Replays prompts one request at a time (max_tokens 1, greedy) on e, whose prefix cache was
// reset with the run's anchor setting; cold: the cache is emptied before every request (the
// reference without it). Stops early after max_seconds (0: never).
AgentRun replay_agent(Engine& e, const std::vector<std::vector<int32_t>>& prompts,
                      const std::string& mode, double max_seconds = 0, bool cold = false);

void add_bench_agent_command(CLI::App& bench);  // `ft bench agent`

}  // namespace ft::cli
