// gpt-oss (gpt_oss): GQA attention with q/k/v/o biases, learned per-head attention sinks and
// sliding-window (layer_types: sliding_attention / full_attention) layers, YaRN RoPE; every
// layer an MoE whose router has a bias and whose top-k logits are softmaxed (= softmax, top-k,
// renormalise), experts with biases and the clamped SwiGLU (alpha 1.702, swiglu_limit). The
// loader canonicalises the interleaved gate_up_proj (bf16 or MXFP4 blocks) into gate/up.
#include "base/error.h"
#include "model/family.h"

namespace ft {

namespace {
void configure(const JsonReader& r, ModelConfig& c) {
  c.qk_norm = QkNorm::NONE;
  c.n_experts = r.i64("num_local_experts");
  c.top_k = r.i64_or("num_experts_per_tok", r.i64_or("experts_per_token", 0));
  c.expert_dim = r.i64("intermediate_size");
  c.norm_topk_prob = true;  // softmax over the top-k logits
  c.layer_is_moe.assign(c.n_layers, true);
  c.attention_bias = r.boolean_or("attention_bias", true);
  c.attn_sinks = true;
  c.moe_bias = true;
  c.expert_act = {.kind = ExpertActivation::Kind::SWIGLU_OAI,
                  .alpha = 1.702f,
                  .limit = static_cast<float>(r.f64_or("swiglu_limit", 7.0))};
  c.sliding_window = r.i64_or("sliding_window", 0);
  c.layer_sliding.assign(c.n_layers, false);
  if (const auto types = read_layer_types(r, c.n_layers); !types.empty()) {
    for (int64_t l = 0; l < c.n_layers; ++l) {
      const std::string& t = types[l];
      if (t != "sliding_attention" && t != "full_attention")
        fail(
            "{}: layer_types[{}] '{}' is not supported (supported: sliding_attention, "
            "full_attention)",
            r.path, l, t);
      c.layer_sliding[l] = t == "sliding_attention";
    }
  } else {
    for (int64_t l = 0; l < c.n_layers; ++l) c.layer_sliding[l] = l % 2 == 0;
  }
  if (c.sliding_window <= 0) c.layer_sliding.assign(c.n_layers, false);
}

WeightNames names() {
  WeightNames n;
  n.router = "router";
  n.oss_experts = true;
  return n;
}
}  // namespace

extern const Family k_gpt_oss_family = {
    .model_type = "gpt_oss", .configure = configure, .names = names()};

}  // namespace ft
