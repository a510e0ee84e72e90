// Typed model configuration read from an HF config.json; families fill in their own fields.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ft {

struct RopeConfig {
  enum class Type { DEFAULT, LINEAR, YARN };
  Type type = Type::DEFAULT;
  double theta = 10000.0;
  double factor = 1.0;
  int64_t original_max_pos = 0;  // yarn
  double beta_fast = 32.0, beta_slow = 1.0;
  double attention_factor = 0.0;  // 0: derived (yarn)
  double mscale = 0.0, mscale_all_dim = 0.0;
  bool truncate = true;
  double partial_rotary_factor = 1.0;
  bool interleaved = false;  // GPT-J style pairs (2i, 2i+1) instead of NeoX halves
};

// How q/k are normalised after projection: per head over head_dim (Qwen3), or over the whole
// projection width before the head split (OLMoE).
enum class QkNorm { NONE, PER_HEAD, FULL };

// A layer's token mixer: softmax attention over the KV cache, or a Gated DeltaNet (linear
// attention with a recurrent state; Qwen3-Next, Qwen3.5/3.6).
enum class Mixer : uint8_t { ATTENTION, DELTA_NET };

// Gated DeltaNet sizes (linear_* fields). q/k heads are shared by n_v_heads / n_k_heads
// consecutive value heads.
struct DeltaNetConfig {
  int64_t n_k_heads = 0, n_v_heads = 0, k_head_dim = 0, v_head_dim = 0, conv_kernel = 0;
  int64_t key_dim() const { return n_k_heads * k_head_dim; }
  int64_t value_dim() const { return n_v_heads * v_head_dim; }
  int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }  // conv over [q | k | v]
};

// The routed experts' activation: SwiGLU silu(g) * u, or gpt-oss's clamped form
// (g = min(g, limit), u = clamp(u, -limit, limit), y = g * sigmoid(alpha * g) * (u + 1)).
struct ExpertActivation {
  enum class Kind : uint8_t { SILU, SWIGLU_OAI };
  Kind kind = Kind::SILU;
  float alpha = 1.702f, limit = 7.f;
};

struct ModelConfig {
  std::string model_type;
  int64_t vocab_size = 0, hidden = 0, n_layers = 0;
  int64_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
  int64_t max_position = 0;
  float rms_eps = 1e-6f;
  RopeConfig rope;
  QkNorm qk_norm = QkNorm::NONE;
  bool attention_bias = false;
  float clip_qkv = 0.f;  // 0: off
  // Feed-forward: dense width, and the MoE (n_experts == 0: no MoE layers).
  int64_t ffn_dim = 0;
  int64_t n_experts = 0, top_k = 0, expert_dim = 0;
  bool norm_topk_prob = true;
  // Tensor-parallel whole-expert shards (parallel/tp_plan.h): the router scores router_experts
  // experts and this shard holds n_experts of them from expert_begin; routed ids outside that
  // range contribute nothing here. 0: the router's width is n_experts.
  int64_t router_experts = 0, expert_begin = 0;
  std::vector<bool> layer_is_moe;  // [n_layers]
  int64_t shared_expert_dim = 0;   // MoE layers add a sigmoid-gated shared expert when > 0
  // Hybrid models: per-layer mixer (empty: every layer attention), DeltaNet sizes, gated
  // attention (q_proj rows per head [query | gate], output * sigmoid(gate)) and zero-centred
  // RMSNorm weights (scale 1 + w; the loader bakes the 1 in).
  std::vector<Mixer> layer_mixer;  // [n_layers] or empty
  DeltaNetConfig delta;
  bool attn_output_gate = false;
  bool norm_offset = false;
  bool tie_embeddings = false;
  // gpt-oss: layers with layer_sliding[l] attend to the last sliding_window positions (the
  // query's own included; empty: every layer full), learned per-head attention sinks (one more
  // logit in each softmax's denominator), router and expert biases, and the expert activation.
  int64_t sliding_window = 0;
  std::vector<bool> layer_sliding;  // [n_layers] or empty
  bool attn_sinks = false;
  bool moe_bias = false;
  ExpertActivation expert_act;
  int64_t bos_token_id = -1;
  std::vector<int64_t> eos_token_ids;

  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
  int64_t routed_experts() const { return router_experts > 0 ? router_experts : n_experts; }
  // Routed experts are a plain SwiGLU without biases, all that HYBRID's CPU share computes
  // (gpt-oss's expert biases and clamped SwiGLU are not).
  bool plain_swiglu_experts() const {
    return !moe_bias && expert_act.kind == ExpertActivation::Kind::SILU;
  }
  bool is_delta(int64_t layer) const {
    return !layer_mixer.empty() && layer_mixer[layer] == Mixer::DELTA_NET;
  }
  bool has_delta() const;  // any DeltaNet layer
  // The attention window of layer l in positions, 0 for full attention.
  int64_t window(int64_t l) const {
    return !layer_sliding.empty() && layer_sliding[l] ? sliding_window : 0;
  }
  int64_t rotary_dim() const {
    return static_cast<int64_t>(static_cast<double>(head_dim) * rope.partial_rotary_factor);
  }
};

// Typed readers over config.json that name the file and key in their errors.
struct JsonReader {
  const nlohmann::json& j;
  std::string path;
  bool has(const char* key) const { return j.contains(key) && !j[key].is_null(); }
  int64_t i64(const char* key) const;
  int64_t i64_or(const char* key, int64_t dflt) const { return has(key) ? i64(key) : dflt; }
  double f64(const char* key) const;
  double f64_or(const char* key, double dflt) const { return has(key) ? f64(key) : dflt; }
  bool boolean_or(const char* key, bool dflt) const;
  std::string str_or(const char* key, const std::string& dflt) const;
};

// Reads config.json in dir (and generation_config.json's eos ids when present): the fields every
// family shares. The family's configure() then adds its own. Throws ft::Error with the fix.
ModelConfig read_model_config(const std::string& dir, nlohmann::json* raw = nullptr);

// Parses rope_parameters (transformers 5) or rope_theta + rope_scaling (4.x).
RopeConfig parse_rope(const JsonReader& r);

// config.json's layer_types: one string per layer (a non-string entry reads as ""), or empty
// when the field is absent; throws ft::Error when it is not an array of n_layers entries.
std::vector<std::string> read_layer_types(const JsonReader& r, int64_t n_layers);

// Hybrid families (Qwen3-Next, Qwen3.5/3.6): layer_types (or full_attention_interval), the
// linear_* DeltaNet sizes, shared_expert_intermediate_size, gated attention, zero-centred norms
// and partial rotary (default 0.25). Throws ft::Error naming the field.
void read_hybrid_fields(const JsonReader& r, ModelConfig& c);

// MoE layers from decoder_sparse_step and mlp_only_layers (Qwen3-MoE, Qwen3-Next).
void read_sparse_layers(const JsonReader& r, ModelConfig& c);

// Validates cross-field invariants (divisibility, sizes); throws ft::Error naming the field.
void validate_config(const ModelConfig& c, const std::string& path);

}  // namespace ft
