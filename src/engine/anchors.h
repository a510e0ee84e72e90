// Semantic anchors: the positions in a token stream where agent conversations diverge (end of a
// chat message, tool-call opener and closer, thinking block edges), found from the special
// token ids of the tokenizer's vocabulary, plus every N tokens. The prefix cache snapshots the
// recurrent state there.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace ft {

class Tokenizer;

struct AnchorTokens {
  std::vector<int32_t> after;   // a boundary follows these ids (<|im_end|>, </tool_call>, ...)
  std::vector<int32_t> before;  // a boundary precedes these ids (<tool_call>, <think>, ...)
};

// The anchor ids the tokenizer's vocabulary has (absent tokens are skipped).
AnchorTokens anchor_tokens(const Tokenizer& tok);

// Sorted boundary positions p in (from, tokens.size()] (p tokens precede the boundary): after
// each `after` id, before each `before` id, every `every` tokens (0: never), one before the end
// (a resent prompt then recomputes only its last token, for its logits) and at the end.
std::vector<int64_t> find_anchors(std::span<const int32_t> tokens, const AnchorTokens& a,
                                  int64_t every, int64_t from = 0);

// Drops each anchor closer than gap tokens after the previous one kept (or after from, where
// the prefill starts); end, the prompt's length, always stays, replacing a kept anchor less
// than gap before it. A prefill whose chunks end at anchors then runs
// fewer, longer chunks (an offloaded model streams its experts once per chunk) at the price of
// at most gap more tokens recomputed where a later request diverges. gap <= 0: all kept.
std::vector<int64_t> thin_anchors(std::span<const int64_t> cuts, int64_t gap, int64_t from,
                                  int64_t end);

}  // namespace ft
