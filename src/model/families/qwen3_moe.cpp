// Qwen3-MoE (qwen3_moe): per-head q/k RMSNorm, GQA, softmax -> top-k routing with optional
// renormalisation (norm_topk_prob), SwiGLU experts; dense layers from mlp_only_layers and
// decoder_sparse_step. The forward is the shared MoE transformer (model/transformer.cpp).
#include <algorithm>

#include "base/error.h"
#include "model/family.h"

namespace ft {

namespace {
void configure(const JsonReader& r, ModelConfig& c) {
  c.qk_norm = QkNorm::PER_HEAD;
  // transformers 5 writes num_local_experts; hub checkpoints say num_experts.
  c.n_experts = r.i64_or("num_experts", r.i64_or("num_local_experts", 0));
  c.top_k = r.i64_or("num_experts_per_tok", 0);
  c.expert_dim = r.i64_or("moe_intermediate_size", 0);
  c.norm_topk_prob = r.boolean_or("norm_topk_prob", false);
  int64_t step = r.i64_or("decoder_sparse_step", 1);
  if (step <= 0) fail("{}: decoder_sparse_step must be positive", r.path);
  std::vector<int64_t> dense_only;
  if (r.has("mlp_only_layers")) {
    if (!r.j["mlp_only_layers"].is_array()) fail("{}: mlp_only_layers must be a list", r.path);
    for (const auto& v : r.j["mlp_only_layers"]) dense_only.push_back(v.get<int64_t>());
  }
  c.layer_is_moe.assign(c.n_layers, false);
  for (int64_t l = 0; l < c.n_layers; ++l)
    c.layer_is_moe[l] = c.n_experts > 0 && (l + 1) % step == 0 &&
                        std::find(dense_only.begin(), dense_only.end(), l) == dense_only.end();
}
}  // namespace

extern const Family k_qwen3_moe_family = {.model_type = "qwen3_moe", .configure = configure};

}  // namespace ft
