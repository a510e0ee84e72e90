// Qwen3.5 / Qwen3.6 MoE (qwen3_5_moe, e.g. Qwen3.6-35B-A3B): the Qwen3-Next hybrid (Gated
// DeltaNet + gated attention, zero-centred norms, partial rotary, shared expert) with every
// layer an MoE whose top-k weights are renormalised, and separate DeltaNet projections.
// Hub checkpoints are image-text-to-text: config.json nests the model under text_config and
// the loader reads the weights under model.language_model.*, skipping the vision tower.
#include "model/family.h"

namespace ft {

namespace {
void configure(const JsonReader& r, ModelConfig& c) {
  read_hybrid_fields(r, c);
  c.n_experts = r.i64_or("num_experts", 0);
  c.top_k = r.i64_or("num_experts_per_tok", 0);
  c.expert_dim = r.i64_or("moe_intermediate_size", 0);
  c.norm_topk_prob = r.boolean_or("norm_topk_prob", true);  // the router always renormalises
  c.layer_is_moe.assign(c.n_layers, c.n_experts > 0);
}
}  // namespace

extern const Family k_qwen3_5_moe_family = {.model_type = "qwen3_5_moe", .configure = configure};
// The text model alone, as transformers saves Qwen3_5MoeForCausalLM (and as text_config names it).
extern const Family k_qwen3_5_moe_text_family = {.model_type = "qwen3_5_moe_text",
                                                 .configure = configure};

}  // namespace ft
