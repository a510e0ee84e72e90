// Semantic anchors from special token ids.
#include "engine/anchors.h"

#include <algorithm>

#include "tokenizer/tokenizer.h"

namespace ft {

AnchorTokens anchor_tokens(const Tokenizer& tok) {
  AnchorTokens a;
  auto add = [&](std::vector<int32_t>& to, const char* piece) {
    const int32_t id = tok.token_id(piece);
    if (id >= 0 && std::find(to.begin(), to.end(), id) == to.end()) to.push_back(id);
  };
  for (const char* p : {"<|im_end|>", "</tool_call>", "</think>", "</tool_response>", "<|eot_id|>",
                        "</s>", "[/INST]", "[/TOOL_RESULTS]"})
    add(a.after, p);
  for (const char* p : {"<|im_start|>", "<tool_call>", "<think>", "<tool_response>",
                        "<|start_header_id|>", "[INST]", "[TOOL_CALLS]", "[TOOL_RESULTS]"})
    add(a.before, p);
  return a;
}

std::vector<int64_t> find_anchors(std::span<const int32_t> tokens, const AnchorTokens& a,
                                  int64_t every, int64_t from) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  std::vector<int64_t> out;
  auto in = [](const std::vector<int32_t>& v, int32_t id) {
    return std::find(v.begin(), v.end(), id) != v.end();
  };
  for (int64_t i = 0; i < n; ++i) {
    if (in(a.before, tokens[i]) && i > from) out.push_back(i);
    if (in(a.after, tokens[i]) && i + 1 > from) out.push_back(i + 1);
    if (every > 0 && (i + 1) % every == 0 && i + 1 > from) out.push_back(i + 1);
  }
  if (n - 1 > from && n > 1) out.push_back(n - 1);  // a resent prompt resumes at its last token
  if (n > from) out.push_back(n);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<int64_t> thin_anchors(std::span<const int64_t> cuts, int64_t gap, int64_t from,
                                  int64_t end) {
  if (gap <= 0) return {cuts.begin(), cuts.end()};
  std::vector<int64_t> out;
  for (int64_t c : cuts) {
    const int64_t prev = out.empty() ? from : out.back();
    if (c == end && !out.empty() && c - prev < gap)
      out.back() = c;  // the end replaces a kept anchor just before it
    else if (c == end || c - prev >= gap)
      out.push_back(c);
  }
  return out;
}

}  // namespace ft
