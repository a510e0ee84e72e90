// The GGUF architecture table and GGUF metadata -> ModelConfig (the common <arch>.* keys here;
// the family's own fields go through its configure() via a config.json-shaped object).
#include "model/gguf_arch.h"

#include <fmt/format.h>

#include <cstring>

#include "base/error.h"
#include "model/family.h"

namespace ft {

namespace {

std::string key(const std::string& arch, const char* k) { return arch + "." + k; }

// Fields the MoE families share: expert count/width, top-k, renormalisation.
void moe_fields(const GgufSet& g, const std::string& arch, nlohmann::json& j, bool norm_dflt,
                bool experts_in_intermediate_size) {
  const int64_t E = g.get_int_or(key(arch, "expert_count"), 0);
  j["num_experts"] = E;
  j["num_local_experts"] = E;
  j["num_experts_per_tok"] = g.get_int_or(key(arch, "expert_used_count"), 0);
  const int64_t dense = g.get_int_or(key(arch, "feed_forward_length"), 0);
  const int64_t expert = g.get_int_or(key(arch, "expert_feed_forward_length"), dense);
  j["moe_intermediate_size"] = expert;
  j["intermediate_size"] = experts_in_intermediate_size ? expert : dense;
  j["norm_topk_prob"] = g.get_bool_or(key(arch, "expert_weights_norm"), norm_dflt);
}

void qwen3moe_config(const GgufSet& g, const std::string& arch, nlohmann::json& j) {
  moe_fields(g, arch, j, true, false);
  // Dense layers: llama.cpp's qwen3moe has none, but a layer without a router is one here
  // (mlp_only_layers / decoder_sparse_step checkpoints).
  nlohmann::json dense = nlohmann::json::array();
  const int64_t L = g.get_int(key(arch, "block_count"));
  for (int64_t l = 0; l < L && j["num_experts"].get<int64_t>() > 0; ++l)
    if (!g.tensor(gguf_names::layer(l, gguf_names::router))) dense.push_back(l);
  j["mlp_only_layers"] = dense;
}

void llama_moe_config(const GgufSet& g, const std::string& arch, nlohmann::json& j) {
  moe_fields(g, arch, j, true, true);
}

void olmoe_config(const GgufSet& g, const std::string& arch, nlohmann::json& j) {
  moe_fields(g, arch, j, false, true);
  if (g.has(key(arch, "attention.clamp_kqv")))
    j["clip_qkv"] = g.get_float(key(arch, "attention.clamp_kqv"));
}

// gpt-oss: the MoE fields, the sliding window on llama.cpp's layer pattern (even layers slide),
// q/k/v/o biases when the file has them; its YaRN does not round (truncate false).
void gpt_oss_config(const GgufSet& g, const std::string& arch, nlohmann::json& j) {
  moe_fields(g, arch, j, true, true);
  const int64_t L = g.get_int(key(arch, "block_count"));
  j["sliding_window"] = g.get_int_or(key(arch, "attention.sliding_window"), 0);
  nlohmann::json types = nlohmann::json::array();
  for (int64_t l = 0; l < L; ++l)
    types.push_back(l % 2 == 0 ? "sliding_attention" : "full_attention");
  j["layer_types"] = types;
  j["attention_bias"] = g.tensor(gguf_names::layer(0, gguf_names::q, "bias")) != nullptr;
  if (j["rope_parameters"].value("rope_type", "") == "yarn")
    j["rope_parameters"]["truncate"] = false;
}

// One line per architecture. Future lines (qwen35moe, deepseek2, glm4moe) need their
// family first; the GGUF side is this table plus gguf_names.
constexpr GgufArch k_gguf_archs[] = {
    {.arch = "qwen3moe",
     .model_type = "qwen3_moe",
     .permuted_qk = false,
     .norm_topk_default = true,
     .hf_config = qwen3moe_config},
    {.arch = "llama",
     .model_type = "mixtral",
     .permuted_qk = true,
     .norm_topk_default = true,
     .hf_config = llama_moe_config},
    {.arch = "olmoe",
     .model_type = "olmoe",
     .permuted_qk = false,
     .norm_topk_default = false,
     .hf_config = olmoe_config},
    {.arch = "gpt-oss",
     .model_type = "gpt_oss",
     .permuted_qk = false,
     .norm_topk_default = true,
     .hf_config = gpt_oss_config,
     .ffn_norm = "post_attention_norm",
     .yarn_truncate = false},
};

}  // namespace

std::string gguf_names::layer(int64_t l, const char* name, const char* suffix) {
  return fmt::format("blk.{}.{}.{}", l, name, suffix);
}

const GgufArch* find_gguf_arch(const std::string& arch) {
  for (const GgufArch& a : k_gguf_archs)
    if (arch == a.arch) return &a;
  return nullptr;
}

const GgufArch* gguf_arch_for_model_type(const std::string& model_type) {
  for (const GgufArch& a : k_gguf_archs)
    if (model_type == a.model_type) return &a;
  return nullptr;
}

std::string supported_gguf_archs() {
  std::string s;
  for (const GgufArch& a : k_gguf_archs)
    s += (s.empty() ? "" : ", ") + fmt::format("{} ({})", a.arch, a.model_type);
  return s;
}

void permute_qk_rows(const char* src, char* dst, int64_t n_heads, int64_t head_dim,
                     size_t row_bytes, bool to_gguf) {
  FT_CHECK(head_dim % 2 == 0, "head_dim {}", head_dim);
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < n_heads; ++h)
    for (int64_t i = 0; i < half; ++i)
      for (int64_t side = 0; side < 2; ++side) {
        const int64_t hf = h * head_dim + i + side * half;  // HF row (halves)
        const int64_t gg = h * head_dim + 2 * i + side;     // GGUF row (interleaved)
        const int64_t from = to_gguf ? hf : gg, to = to_gguf ? gg : hf;
        std::memcpy(dst + to * row_bytes, src + from * row_bytes, row_bytes);
      }
}

ModelConfig gguf_model_config(const GgufSet& g, const GgufArch** arch_out) {
  const std::string& path = g.path();
  const std::string arch = g.get_string("general.architecture");
  const GgufArch* a = find_gguf_arch(arch);
  if (!a)
    fail("{}: GGUF architecture '{}' is not supported (supported: {})", path, arch,
         supported_gguf_archs());
  if (arch == "llama" && g.get_int_or("llama.expert_count", 0) == 0)
    fail(
        "{}: a dense llama GGUF; only Mixture-of-Experts models are supported (llama with "
        "expert_count is Mixtral)",
        path);
  const GgufTensor& embed = g.get_tensor(gguf_names::embed);
  if (embed.ne.size() != 2) fail("{}: {} must be 2-D", path, gguf_names::embed);

  ModelConfig c;
  c.model_type = a->model_type;
  c.vocab_size = embed.ne[1];
  c.hidden = g.get_int(key(arch, "embedding_length"));
  c.n_layers = g.get_int(key(arch, "block_count"));
  if (const GgufValue* v = g.find(key(arch, "attention.head_count")); v && !v->is_int())
    fail("{}: per-layer attention.head_count is not supported", path);
  c.n_heads = g.get_int(key(arch, "attention.head_count"));
  c.n_kv_heads = g.get_int_or(key(arch, "attention.head_count_kv"), c.n_heads);
  c.head_dim =
      g.get_int_or(key(arch, "attention.key_length"), c.n_heads > 0 ? c.hidden / c.n_heads : 0);
  const int64_t v_dim = g.get_int_or(key(arch, "attention.value_length"), c.head_dim);
  if (v_dim != c.head_dim)
    fail("{}: attention.value_length {} differs from key_length {} (not supported)", path, v_dim,
         c.head_dim);
  c.max_position = g.get_int_or(key(arch, "context_length"), 4096);
  c.rms_eps =
      static_cast<float>(g.get_float_or(key(arch, "attention.layer_norm_rms_epsilon"), 1e-6));
  c.attention_bias = g.tensor(gguf_names::layer(0, gguf_names::q, "bias")) != nullptr;
  c.ffn_dim = g.get_int_or(key(arch, "feed_forward_length"), 0);
  c.tie_embeddings = g.tensor(gguf_names::lm_head) == nullptr;
  c.bos_token_id = g.get_int_or("tokenizer.ggml.bos_token_id", -1);
  if (g.has("tokenizer.ggml.eos_token_id"))
    c.eos_token_ids.push_back(g.get_int("tokenizer.ggml.eos_token_id"));

  // RoPE: the same parser as config.json, fed the GGUF keys.
  nlohmann::json rope = {{"rope_theta", g.get_float_or(key(arch, "rope.freq_base"), 10000.0)}};
  std::string scaling = g.get_string_or(key(arch, "rope.scaling.type"), "none");
  if (scaling == "none") scaling = "default";
  rope["rope_type"] = scaling;
  if (scaling != "default")
    rope["factor"] = g.get_float_or(key(arch, "rope.scaling.factor"),
                                    1.0 / g.get_float_or(key(arch, "rope.scale_linear"), 1.0));
  if (scaling == "yarn") {
    rope["original_max_position_embeddings"] =
        g.get_int(key(arch, "rope.scaling.original_context_length"));
    for (const char* k : {"yarn_beta_fast", "yarn_beta_slow"})
      if (g.has(key(arch, fmt::format("rope.scaling.{}", k).c_str())))
        rope[std::string(k).substr(5)] =
            g.get_float(key(arch, fmt::format("rope.scaling.{}", k).c_str()));
    if (g.has(key(arch, "rope.scaling.attn_factor")))
      rope["attention_factor"] = g.get_float(key(arch, "rope.scaling.attn_factor"));
  }
  if (g.has(key(arch, "rope.dimension_count")) && c.head_dim > 0)
    rope["partial_rotary_factor"] =
        static_cast<double>(g.get_int(key(arch, "rope.dimension_count"))) / c.head_dim;
  nlohmann::json cfg = {{"rope_parameters", rope}, {"max_position_embeddings", c.max_position}};
  c.rope = parse_rope(JsonReader{cfg, path});

  a->hf_config(g, arch, cfg);
  c.rope = parse_rope(JsonReader{cfg, path});  // the hook may add rope fields
  const Family* family = find_family(a->model_type);
  FT_CHECK(family, "GGUF arch {} maps to unknown family {}", arch, a->model_type);
  family->configure(JsonReader{cfg, path}, c);
  validate_config(c, path);
  if (arch_out) *arch_out = a;
  return c;
}

}  // namespace ft
