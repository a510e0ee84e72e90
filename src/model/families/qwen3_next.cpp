// Qwen3-Next (qwen3_next): Gated DeltaNet layers with a gated full-attention layer every few
// (layer_types / full_attention_interval), zero-centred RMSNorms, partial rotary, and an MoE
// with a sigmoid-gated shared expert; dense layers from mlp_only_layers / decoder_sparse_step.
// Checkpoints fuse the DeltaNet projections (in_proj_qkvz, in_proj_ba); the loader splits them.
#include "model/family.h"

namespace ft {

namespace {
void configure(const JsonReader& r, ModelConfig& c) {
  read_hybrid_fields(r, c);
  c.n_experts = r.i64_or("num_experts", 0);
  c.top_k = r.i64_or("num_experts_per_tok", 0);
  c.expert_dim = r.i64_or("moe_intermediate_size", 0);
  c.norm_topk_prob = r.boolean_or("norm_topk_prob", true);
  read_sparse_layers(r, c);
}
}  // namespace

extern const Family k_qwen3_next_family = {.model_type = "qwen3_next", .configure = configure};

}  // namespace ft
