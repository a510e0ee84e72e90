// config.json -> ModelConfig: shared fields, RoPE variants, validation.
#include "model/config.h"

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
  for (int64_t id : c.eos_token_ids)
    if (id < 0 || id >= c.vocab_size) fail("{}: eos_token_id {} is outside the vocabulary", path, id);
}

}  // namespace ft
