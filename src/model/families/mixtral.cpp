// Mixtral (mixtral): Llama attention, every layer an MoE whose top-k weights are renormalised.
#include "model/family.h"

namespace ft {

namespace {
void configure(const JsonReader& r, ModelConfig& c) {
  c.qk_norm = QkNorm::NONE;
  c.n_experts = r.i64("num_local_experts");
  c.top_k = r.i64("num_experts_per_tok");
  c.expert_dim = r.i64("intermediate_size");
  c.norm_topk_prob = true;
  c.layer_is_moe.assign(c.n_layers, true);
}

WeightNames names() {
  WeightNames n;
  n.moe = "block_sparse_moe.";
  n.expert_gate = "w1";
  n.expert_down = "w2";
  n.expert_up = "w3";
  return n;
}
}  // namespace

extern const Family k_mixtral_family = {
    .model_type = "mixtral", .configure = configure, .names = names()};

}  // namespace ft
