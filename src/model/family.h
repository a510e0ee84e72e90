// A model family: the config fields it adds and the names its checkpoints give each weight.
// Adding a family = one file in families/ + one line in registry.cpp.
#pragma once
#include <string>

#include "model/config.h"

namespace ft {

// Checkpoint names; "{}" in `layer` is the layer index, in `expert` the expert index. Names
// under "model." are looked up under "model.language_model." in multimodal checkpoints.
struct WeightNames {
  std::string embed = "model.embed_tokens.weight";
  std::string final_norm = "model.norm.weight";
  std::string lm_head = "lm_head.weight";
  std::string layer = "model.layers.{}.";
  std::string attn_norm = "input_layernorm.weight";
  std::string q = "self_attn.q_proj", k = "self_attn.k_proj", v = "self_attn.v_proj",
              o = "self_attn.o_proj";
  std::string q_norm = "self_attn.q_norm.weight", k_norm = "self_attn.k_norm.weight";
  std::string ffn_norm = "post_attention_layernorm.weight";
  std::string mlp = "mlp.";  // dense: gate_proj, up_proj, down_proj
  std::string moe = "mlp.";  // router: <moe><router>.weight (+ .bias with moe_bias)
  std::string router = "gate";
  std::string sinks = "self_attn.sinks";  // [n_heads], with attn_sinks
  // Per-expert layout: <moe>experts.{}.<expert_gate>.weight ...; stacked (transformers 5):
  // <moe>experts.gate_up_proj [E, 2I, H] and <moe>experts.down_proj [E, H, I].
  std::string expert_gate = "gate_proj", expert_up = "up_proj", expert_down = "down_proj";
  // gpt-oss: <moe>experts.gate_up_proj [E, H, 2I] (x @ W, gate/up interleaved in the columns)
  // and down_proj [E, I, H], each with a _bias, or as MXFP4 (_blocks [E, rows, cols/32, 16],
  // _scales [E, rows, cols/32] e8m0, rows = outputs: 2I interleaved gate/up rows, or H).
  bool oss_experts = false;
  // Shared expert (gate_proj/up_proj/down_proj) and its sigmoid gate [1, hidden].
  std::string shared_expert = "mlp.shared_expert.", shared_gate = "mlp.shared_expert_gate.weight";
  // Gated DeltaNet: in_proj_qkv/z/b/a (Qwen3.5) or in_proj_qkvz/ba (Qwen3-Next), conv1d, A_log,
  // dt_bias, norm, out_proj.
  std::string delta = "linear_attn.";
};

struct Family {
  const char* model_type;
  // Reads the family's own config.json fields into c (MoE sizes, layer kinds, qk-norm kind).
  void (*configure)(const JsonReader& r, ModelConfig& c);
  WeightNames names;
};

// nullptr when unsupported.
const Family* find_family(const std::string& model_type);
// "qwen3_moe, mixtral, ..." for error messages.
std::string supported_families();

}  // namespace ft
