// Qwen3-MoE (qwen3_moe): per-head q/k RMSNorm, GQA, softmax -> top-k routing with optional
// renormalisation (norm_topk_prob), SwiGLU experts; dense layers from mlp_only_layers and
// decoder_sparse_step. The forward is the shared MoE transformer (model/transformer.cpp).
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
  read_sparse_layers(r, c);
}
}  // namespace

extern const Family k_qwen3_moe_family = {.model_type = "qwen3_moe", .configure = configure};

}  // namespace ft
