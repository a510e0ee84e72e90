// OLMoE (olmoe): q/k RMSNorm over the whole projection before the head split, optional
// clip_qkv, every layer an MoE (top-k weights renormalised only with norm_topk_prob).
#include "model/family.h"

namespace ft {

namespace {
void configure(const JsonReader& r, ModelConfig& c) {
  c.qk_norm = QkNorm::FULL;
  c.clip_qkv = static_cast<float>(r.f64_or("clip_qkv", 0.0));
  c.n_experts = r.i64("num_experts");
  c.top_k = r.i64("num_experts_per_tok");
  c.expert_dim = r.i64("intermediate_size");
  c.norm_topk_prob = r.boolean_or("norm_topk_prob", false);
  c.layer_is_moe.assign(c.n_layers, true);
}
}  // namespace

extern const Family k_olmoe_family = {.model_type = "olmoe", .configure = configure};

}  // namespace ft
