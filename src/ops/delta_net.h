// Gated DeltaNet ops (Qwen3-Next, Qwen3.5/3.6 linear attention): the depthwise causal conv1d
// over the mixed q|k|v channels and the gated delta rule, in a chunked form for prefill and a
// recurrent form for decode (same math; tests check they agree). CPU: ops/delta_net.cpp.
#pragma once
#include <cstdint>
#include <span>

#include "backend/cpu/thread_pool.h"

namespace ft::ops {

// Depthwise causal conv1d (no bias) + SiLU over n new tokens of one sequence, continuing from
// `state` (the previous kernel - 1 inputs of each channel, oldest first; zeros at the start of
// a sequence), which is advanced past the new tokens.
// x, out: [n, channels]; w: [channels, kernel]; state: [channels, kernel - 1].
void causal_conv1d_silu(ThreadPool& pool, const float* x, int64_t n, int64_t channels,
                        const float* w, int64_t kernel, float* state, float* out);

// The gated delta rule of one sequence, for every value head h (its key head is
// h / (n_v_heads / n_k_heads)), with state S [k_dim, v_dim] per value head. Per token:
//   S *= exp(g);  delta = beta * (v - S^T k);  S += k delta^T;  out = S^T q.
// q and k are used as given (the caller L2-normalises them and scales q).
struct DeltaRuleArgs {
  const float* q;  // token t at q + t * qkv_stride: [n_k_heads * k_dim]
  const float* k;  // same layout as q
  const float* v;  // token t at v + t * qkv_stride: [n_v_heads * v_dim]
  int64_t qkv_stride;
  const float* g;     // [n, n_v_heads] log decay (<= 0)
  const float* beta;  // [n, n_v_heads] write strength
  int64_t n, n_k_heads, n_v_heads, k_dim, v_dim;
  float* state;  // [n_v_heads, k_dim, v_dim], updated in place
  float* out;    // [n, n_v_heads * v_dim]
};

// Tokens per chunk of the chunked form (transformers and FLA use 64 as well).
inline constexpr int64_t k_delta_chunk = 64;

// One head, token by token (the decode form and the reference).
void gated_delta_rule_recurrent(const DeltaRuleArgs& a, int64_t head);
// One head, chunks of up to `chunk` tokens: within a chunk the updates are solved as one
// lower-triangular system (the WY/UT form), so the state is read and written once per chunk.
void gated_delta_rule_chunked(const DeltaRuleArgs& a, int64_t head, int64_t chunk = k_delta_chunk);
// Several sequences as one parallel region over (sequence, head): single tokens take the
// recurrent form, longer runs the chunked one.
void gated_delta_rule(ThreadPool& pool, std::span<const DeltaRuleArgs> seqs);

}  // namespace ft::ops
