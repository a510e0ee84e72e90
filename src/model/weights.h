// Canonical in-memory weights: plain structs of views, the same whatever the file layout was.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "base/tensor.h"

namespace ft {

// y = x W^T (+ b). w: [out, in]; bias: [out] or empty.
struct Linear {
  TensorView w;
  std::vector<float> bias;
};

// One routed expert's SwiGLU: gate, up [expert_dim, hidden]; down [hidden, expert_dim].
struct ExpertWeights {
  TensorView gate, up, down;
};

// Gated DeltaNet mixer in the canonical (Qwen3.5) layout; the loader splits Qwen3-Next's fused,
// per-key-head interleaved in_proj_qkvz / in_proj_ba into it.
struct DeltaNetWeights {
  TensorView qkv;                     // [conv_dim, hidden]: q [key_dim] | k [key_dim] | v
                                      // [value_dim]
  TensorView z;                       // [value_dim, hidden] output gate
  TensorView b, a;                    // [n_v_heads, hidden] write strength (beta), decay input
  std::vector<float> conv;            // [conv_dim, kernel] depthwise causal conv
  std::vector<float> a_log, dt_bias;  // [n_v_heads]
  std::vector<float> norm;            // [v_head_dim] gated RMSNorm (scale w, not 1 + w)
  TensorView out;                     // [hidden, value_dim]
};

struct LayerWeights {
  std::vector<float> attn_norm;       // [hidden]
  // Attention layers. q [q_dim, hidden] ([2 * q_dim, hidden], per head [query | gate], with
  // attn_output_gate), k/v [kv_dim, hidden], o [hidden, q_dim].
  Linear q, k, v, o;
  std::vector<float> q_norm, k_norm;  // [head_dim] (per head) or [q_dim]/[kv_dim] (full)
  std::vector<float> sinks;           // [n_heads] attention sink logits (gpt-oss) or empty
  std::vector<float> ffn_norm;        // [hidden]
  TensorView gate, up, down;          // dense layer: [ffn, hidden] x2, [hidden, ffn]
  TensorView router;                  // MoE layer: [n_experts, hidden]
  std::vector<ExpertWeights> experts; // MoE layer: [n_experts]
  // MoE biases (gpt-oss; empty otherwise): router [n_experts], experts' gate/up
  // [n_experts, expert_dim] and down [n_experts, hidden]. Small, so always resident.
  std::vector<float> router_bias, expert_gate_bias, expert_up_bias, expert_down_bias;
  ExpertWeights shared;               // MoE layer with a shared expert: [shared_expert_dim, ...]
  TensorView shared_gate;             // [1, hidden]: the shared expert is scaled by sigmoid(x.g)
  DeltaNetWeights delta;              // DeltaNet layers (instead of q/k/v/o)
};

struct ModelWeights {
  TensorView embed;               // [vocab, hidden]
  std::vector<float> final_norm;  // [hidden]
  TensorView lm_head;             // [vocab, hidden] (the embedding when tied)
  std::vector<LayerWeights> layers;
  // Tensors the loader had to rebuild (re-ordered rows); views above may point into these.
  std::vector<std::vector<uint8_t>> owned;

  // Visits every matrix view (for placement, offload and accounting).
  void for_each_matrix(const std::function<void(const TensorView&)>& fn) const;
};

}  // namespace ft
