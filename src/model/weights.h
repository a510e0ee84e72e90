// Canonical in-memory weights: plain structs of views, the same whatever the file layout was.
#pragma once
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

struct LayerWeights {
  std::vector<float> attn_norm;       // [hidden]
  Linear q, k, v, o;                  // q [q_dim, hidden], k/v [kv_dim, hidden], o [hidden, q_dim]
  std::vector<float> q_norm, k_norm;  // [head_dim] (per head) or [q_dim]/[kv_dim] (full)
  std::vector<float> ffn_norm;        // [hidden]
  TensorView gate, up, down;          // dense layer: [ffn, hidden] x2, [hidden, ffn]
  TensorView router;                  // MoE layer: [n_experts, hidden]
  std::vector<ExpertWeights> experts; // MoE layer: [n_experts]
};

struct ModelWeights {
  TensorView embed;               // [vocab, hidden]
  std::vector<float> final_norm;  // [hidden]
  TensorView lm_head;             // [vocab, hidden] (the embedding when tied)
  std::vector<LayerWeights> layers;

  // Visits every matrix view (for placement, offload and accounting).
  void for_each_matrix(const std::function<void(const TensorView&)>& fn) const;
};

}  // namespace ft
