// config.json -> ModelConfig: shared fields, RoPE variants, validation.
#include "model/config.h"

#include <algorithm>

#include "base/error.h"
#include "io/mmap.h"

namespace ft {

int64_t JsonReader::i64(const char* key) const {
  if (!has(key)) fail("{}: missing required field '{}'", path, key);
  const auto& v = j[key];
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float() && v.get<double>() == static_cast<int64_t>(v.get<double>()))
    return static_cast<int64_t>(v.get<double>());
  fail("{}: field '{}' must be an integer", path, key);
}

double JsonReader::f64(const char* key) const {
  if (!has(key)) fail("{}: missing required field '{}'", path, key);
  if (!j[key].is_number()) fail("{}: field '{}' must be a number", path, key);
  return j[key].get<double>();
}

bool JsonReader::boolean_or(const char* key, bool dflt) const {
  if (!has(key)) return dflt;
  if (!j[key].is_boolean()) fail("{}: field '{}' must be true or false", path, key);
  return j[key].get<bool>();
}

std::string JsonReader::str_or(const char* key, const std::string& dflt) const {
  if (!has(key)) return dflt;
  if (!j[key].is_string()) fail("{}: field '{}' must be a string", path, key);
  return j[key].get<std::string>();
}

RopeConfig parse_rope(const JsonReader& r) {
  RopeConfig rope;
  nlohmann::json params = nlohmann::json::object();
  if (r.has("rope_parameters") && r.j["rope_parameters"].is_object()) {
    params = r.j["rope_parameters"];
  } else {
    if (r.has("rope_scaling")) {
      if (!r.j["rope_scaling"].is_object()) fail("{}: rope_scaling must be an object", r.path);
      params = r.j["rope_scaling"];
    }
    if (r.has("rope_theta")) params["rope_theta"] = r.j["rope_theta"];
  }
  JsonReader p{params, r.path + " (rope parameters)"};
  rope.theta = p.f64_or("rope_theta", 10000.0);
  std::string type = p.str_or("rope_type", p.str_or("type", "default"));
  rope.partial_rotary_factor =
      p.f64_or("partial_rotary_factor", r.f64_or("partial_rotary_factor", 1.0));
  if (type == "default") {
    rope.type = RopeConfig::Type::DEFAULT;
  } else if (type == "linear") {
    rope.type = RopeConfig::Type::LINEAR;
    rope.factor = p.f64("factor");
  } else if (type == "yarn") {
    rope.type = RopeConfig::Type::YARN;
    rope.original_max_pos = p.i64("original_max_position_embeddings");
    rope.factor = p.f64_or("factor", static_cast<double>(r.i64("max_position_embeddings")) /
                                         static_cast<double>(rope.original_max_pos));
    rope.beta_fast = p.f64_or("beta_fast", 32.0);
    rope.beta_slow = p.f64_or("beta_slow", 1.0);
    rope.attention_factor = p.f64_or("attention_factor", 0.0);
    rope.mscale = p.f64_or("mscale", 0.0);
    rope.mscale_all_dim = p.f64_or("mscale_all_dim", 0.0);
    rope.truncate = p.boolean_or("truncate", true);
  } else {
    fail("{}: rope type '{}' is not supported (supported: default, linear, yarn)", r.path, type);
  }
  if (rope.theta <= 0 || rope.factor <= 0)
    fail("{}: rope_theta and factor must be positive", r.path);
  return rope;
}

ModelConfig read_model_config(const std::string& dir, nlohmann::json* raw) {
  const std::string path = dir + "/config.json";
  if (!file_exists(path))
    fail("{} has no config.json: point --model at a Hugging Face checkpoint directory", dir);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON ({})", path, e.what());
  }
  if (!j.is_object()) fail("{}: must be a JSON object", path);
  // Multimodal wrappers keep the language model's fields under text_config.
  if (j.contains("text_config") && j["text_config"].is_object() && !j.contains("hidden_size")) {
    auto text = j["text_config"];
    if (!text.contains("model_type") && j.contains("model_type")) text["model_type"] = j["model_type"];
    j = text;
  }
  JsonReader r{j, path};
  ModelConfig c;
  c.model_type = r.str_or("model_type", "");
  if (c.model_type.empty()) fail("{}: missing 'model_type'", path);
  c.vocab_size = r.i64("vocab_size");
  c.hidden = r.i64("hidden_size");
  c.n_layers = r.i64("num_hidden_layers");
  c.n_heads = r.i64("num_attention_heads");
  c.n_kv_heads = r.i64_or("num_key_value_heads", c.n_heads);
  c.head_dim = r.i64_or("head_dim", c.n_heads > 0 ? c.hidden / c.n_heads : 0);
  c.max_position = r.i64_or("max_position_embeddings", 4096);
  c.rms_eps = static_cast<float>(r.f64_or("rms_norm_eps", 1e-6));
  c.rope = parse_rope(r);
  c.attention_bias = r.boolean_or("attention_bias", false);
  c.ffn_dim = r.i64_or("intermediate_size", 0);
  c.tie_embeddings = r.boolean_or("tie_word_embeddings", false);
  c.bos_token_id = r.i64_or("bos_token_id", -1);
  auto add_eos = [&](const nlohmann::json& v) {
    if (v.is_number_integer()) c.eos_token_ids.push_back(v.get<int64_t>());
    if (v.is_array())
      for (const auto& e : v)
        if (e.is_number_integer()) c.eos_token_ids.push_back(e.get<int64_t>());
  };
  if (j.contains("eos_token_id")) add_eos(j["eos_token_id"]);
  const std::string gen_path = dir + "/generation_config.json";
  if (file_exists(gen_path)) {
    try {
      auto g = nlohmann::json::parse(read_file(gen_path));
      if (g.contains("eos_token_id")) {
        c.eos_token_ids.clear();
        add_eos(g["eos_token_id"]);
      }
    } catch (const nlohmann::json::exception& e) {
      fail("{}: not valid JSON ({})", gen_path, e.what());
    }
  }
  if (raw) *raw = j;
  return c;
}

bool ModelConfig::has_delta() const {
  for (Mixer m : layer_mixer)
    if (m == Mixer::DELTA_NET) return true;
  return false;
}

void read_sparse_layers(const JsonReader& r, ModelConfig& c) {
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

std::vector<std::string> read_layer_types(const JsonReader& r, int64_t n_layers) {
  std::vector<std::string> out;
  if (!r.has("layer_types")) return out;
  const auto& types = r.j["layer_types"];
  if (!types.is_array() || static_cast<int64_t>(types.size()) != n_layers)
    fail("{}: layer_types must list one type per layer ({} layers)", r.path, n_layers);
  for (const auto& t : types) out.push_back(t.is_string() ? t.get<std::string>() : "");
  return out;
}

void read_hybrid_fields(const JsonReader& r, ModelConfig& c) {
  const std::string act = r.str_or("hidden_act", "silu");
  if (act != "silu") fail("{}: hidden_act '{}' is not supported (supported: silu)", r.path, act);
  c.layer_mixer.assign(c.n_layers, Mixer::ATTENTION);
  if (const auto types = read_layer_types(r, c.n_layers); !types.empty()) {
    for (int64_t l = 0; l < c.n_layers; ++l) {
      const std::string& t = types[l];
      if (t == "linear_attention" || t == "mamba")
        c.layer_mixer[l] = Mixer::DELTA_NET;
      else if (t != "full_attention" && t != "attention")
        fail("{}: layer_types[{}] '{}' is not supported (supported: linear_attention, "
             "full_attention)", r.path, l, t);
    }
  } else {
    const int64_t interval = r.i64_or("full_attention_interval", 4);
    if (interval <= 0) fail("{}: full_attention_interval must be positive", r.path);
    for (int64_t l = 0; l < c.n_layers; ++l)
      if ((l + 1) % interval != 0) c.layer_mixer[l] = Mixer::DELTA_NET;
  }
  if (c.has_delta())
    c.delta = {.n_k_heads = r.i64("linear_num_key_heads"),
               .n_v_heads = r.i64("linear_num_value_heads"),
               .k_head_dim = r.i64("linear_key_head_dim"),
               .v_head_dim = r.i64("linear_value_head_dim"),
               .conv_kernel = r.i64_or("linear_conv_kernel_dim", 4)};
  c.shared_expert_dim = r.i64_or("shared_expert_intermediate_size", 0);
  c.qk_norm = QkNorm::PER_HEAD;
  c.attn_output_gate = true;
  c.norm_offset = true;
  // These families rotate a quarter of each head unless the file says otherwise.
  const bool rope_names_it =
      r.has("partial_rotary_factor") ||
      (r.has("rope_parameters") && r.j["rope_parameters"].is_object() &&
       r.j["rope_parameters"].contains("partial_rotary_factor"));
  if (!rope_names_it) c.rope.partial_rotary_factor = 0.25;
}

void validate_config(const ModelConfig& c, const std::string& path) {
  auto positive = [&](int64_t v, const char* name) {
    if (v <= 0) fail("{}: '{}' must be positive (got {})", path, name, v);
  };
  positive(c.vocab_size, "vocab_size");
  positive(c.hidden, "hidden_size");
  positive(c.n_layers, "num_hidden_layers");
  positive(c.n_heads, "num_attention_heads");
  positive(c.n_kv_heads, "num_key_value_heads");
  positive(c.head_dim, "head_dim");
  if (c.n_heads % c.n_kv_heads != 0)
    fail("{}: num_attention_heads ({}) must be a multiple of num_key_value_heads ({})", path,
         c.n_heads, c.n_kv_heads);
  if (c.head_dim > 1024) fail("{}: head_dim {} is larger than the supported 1024", path, c.head_dim);
  int64_t rd = c.rotary_dim();
  if (rd <= 0 || rd > c.head_dim || rd % 2 != 0)
    fail("{}: rotary dimension {} (head_dim {} x partial_rotary_factor) must be even and in "
         "(0, head_dim]", path, rd, c.head_dim);
  if (c.n_experts > 0) {
    positive(c.top_k, "num_experts_per_tok");
    positive(c.expert_dim, "moe_intermediate_size");
    if (c.top_k > c.n_experts)
      fail("{}: num_experts_per_tok ({}) exceeds the number of experts ({})", path, c.top_k,
           c.n_experts);
  }
  if (static_cast<int64_t>(c.layer_is_moe.size()) != c.n_layers)
    fail("{}: layer kinds not set for every layer", path);
  for (int64_t l = 0; l < c.n_layers; ++l)
    if (!c.layer_is_moe[l]) positive(c.ffn_dim, "intermediate_size");
  if (!c.layer_mixer.empty() && static_cast<int64_t>(c.layer_mixer.size()) != c.n_layers)
    fail("{}: layer types not set for every layer", path);
  if (c.has_delta()) {
    const DeltaNetConfig& d = c.delta;
    positive(d.n_k_heads, "linear_num_key_heads");
    positive(d.n_v_heads, "linear_num_value_heads");
    positive(d.k_head_dim, "linear_key_head_dim");
    positive(d.v_head_dim, "linear_value_head_dim");
    positive(d.conv_kernel, "linear_conv_kernel_dim");
    if (d.n_v_heads % d.n_k_heads != 0)
      fail("{}: linear_num_value_heads ({}) must be a multiple of linear_num_key_heads ({})", path,
           d.n_v_heads, d.n_k_heads);
    if (d.k_head_dim > 1024 || d.v_head_dim > 1024 || d.conv_kernel > 64)
      fail("{}: DeltaNet head dims must be <= 1024 and the conv kernel <= 64", path);
  }
  if (c.shared_expert_dim < 0) fail("{}: shared_expert_intermediate_size must be >= 0", path);
  for (int64_t id : c.eos_token_ids)
    if (id < 0 || id >= c.vocab_size) fail("{}: eos_token_id {} is outside the vocabulary", path, id);
}

}  // namespace ft
