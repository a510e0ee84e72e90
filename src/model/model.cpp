// Model::load (HF directory) and Model::synthetic (random in-memory weights for benchmarks).
#include "model/model.h"

#include <cmath>
#include <random>

#include "base/error.h"
#include "base/half.h"
#include "base/log.h"
#include "io/gguf.h"
#include "model/ft_checkpoint.h"
#include "model/quant_checkpoint.h"

namespace ft {

void ModelWeights::for_each_matrix(const std::function<void(const TensorView&)>& fn) const {
  fn(embed);
  if (lm_head.data != embed.data) fn(lm_head);
  for (const auto& L : layers) {
    const DeltaNetWeights& d = L.delta;
    for (const TensorView* t : {&L.q.w, &L.k.w, &L.v.w, &L.o.w, &d.qkv, &d.z, &d.b, &d.a, &d.out,
                                &L.gate, &L.up, &L.down, &L.router, &L.shared.gate, &L.shared.up,
                                &L.shared.down, &L.shared_gate})
      if (!t->empty()) fn(*t);
    for (const auto& e : L.experts) {
      fn(e.gate);
      fn(e.up);
      fn(e.down);
    }
  }
}

size_t Model::matrix_bytes() const {
  size_t total = 0;
  weights_.for_each_matrix([&](const TensorView& t) { total += t.nbytes(); });
  return total;
}

std::unique_ptr<Model> Model::load(const std::string& dir) {
  if (is_gguf_path(dir)) return load_gguf(dir);
  if (is_ft_checkpoint(dir)) return load_ftc(dir);
  nlohmann::json raw;
  ModelConfig config = read_model_config(dir, &raw);
  const Family* family = find_family(config.model_type);
  if (!family)
    fail("{}/config.json: model_type '{}' is not supported (supported: {})", dir,
         config.model_type, supported_families());
  family->configure(JsonReader{raw, dir + "/config.json"}, config);
  validate_config(config, dir + "/config.json");
  checkpoint_quant_scheme(dir, raw);  // an unsupported quantization fails here, by name
  std::unique_ptr<Model> m(new Model());
  m->dir_ = dir;
  m->config_ = std::move(config);
  m->files_ = std::make_unique<SafetensorsSet>(SafetensorsSet::open_dir(dir));
  m->weights_ = load_weights(m->config_, family->names, *m->files_);
  return m;
}

ModelConfig synthetic_moe_config(const SyntheticShape& s) {
  ModelConfig c;
  c.model_type = "qwen3_moe";
  c.vocab_size = s.vocab;
  c.hidden = s.hidden;
  c.n_layers = s.layers;
  c.n_heads = s.heads;
  c.n_kv_heads = s.kv_heads;
  c.head_dim = s.head_dim;
  c.max_position = 32768;
  c.rope.theta = 1e6;
  c.qk_norm = QkNorm::PER_HEAD;
  c.n_experts = s.experts;
  c.top_k = s.top_k;
  c.expert_dim = s.expert_dim;
  c.norm_topk_prob = true;
  c.layer_is_moe.assign(c.n_layers, true);
  return c;
}

// A Gated DeltaNet mixer with random projections, a small causal conv and decays spread over
// (0, 1) (A = 1..16, dt_bias 0), like a trained layer's ranges.
template <class Make>
void synthetic_delta(const ModelConfig& c, DeltaNetWeights& D, Make& make, std::mt19937_64& rng) {
  const DeltaNetConfig& d = c.delta;
  D.qkv = make({d.conv_dim(), c.hidden}, "qkv");
  D.z = make({d.value_dim(), c.hidden}, "z");
  D.b = make({d.n_v_heads, c.hidden}, "b");
  D.a = make({d.n_v_heads, c.hidden}, "a");
  D.out = make({c.hidden, d.value_dim()}, "out");
  std::uniform_real_distribution<float> u(-0.5f, 0.5f), decay(1.f, 16.f);
  D.conv.resize(d.conv_dim() * d.conv_kernel);
  for (float& x : D.conv) x = u(rng);
  D.a_log.resize(d.n_v_heads);
  for (float& x : D.a_log) x = std::log(decay(rng));
  D.dt_bias.assign(d.n_v_heads, 0.f);
  D.norm.assign(d.v_head_dim, 1.f);
}

std::unique_ptr<Model> Model::synthetic(const ModelConfig& config, uint64_t seed,
                                        bool one_expert) {
  validate_config(config, "synthetic config");
  std::unique_ptr<Model> m(new Model());
  m->dir_ = "(synthetic)";
  m->config_ = config;
  const ModelConfig& c = m->config_;
  std::mt19937_64 rng(seed);
  // A cheap generator: a table of random bf16 values, each row of a tensor read from it with
  // a stride of 7 from the row's own random offset, so building gigabytes of weights takes well
  // under a second per GB. (One offset per tensor repeated a [rows, 2048] matrix's rows every
  // 32 rows of a 2^16 table: the router had 32 distinct rows, so ties sent every token to
  // experts 0..31 and three quarters of the experts were never routed.)
  std::vector<uint16_t> table(1 << 20);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (auto& v : table) v = f32_to_bf16(normal(rng) * 0.05f);
  auto make = [&](std::initializer_list<int64_t> shape, const char* name) {
    TensorView t;
    t.dtype = DType::BF16;
    t.ndim = static_cast<int>(shape.size());
    int i = 0;
    for (int64_t d : shape) t.shape[i++] = d;
    t.name = name;
    std::vector<uint16_t> buf(t.numel());
    const size_t cols = static_cast<size_t>(t.shape[t.ndim - 1]);
    for (size_t r = 0; r < buf.size(); r += cols) {
      const size_t off = rng() % table.size();
      for (size_t j = 0; j < cols; ++j) buf[r + j] = table[(off + j * 7) % table.size()];
    }
    t.data = buf.data();
    m->arena_.push_back(std::move(buf));
    return t;
  };
  ModelWeights& w = m->weights_;
  w.embed = make({c.vocab_size, c.hidden}, "embed");
  w.lm_head = c.tie_embeddings ? w.embed : make({c.vocab_size, c.hidden}, "lm_head");
  w.final_norm.assign(c.hidden, 1.f);
  w.layers.resize(c.n_layers);
  ExpertWeights first_expert;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    LayerWeights& L = w.layers[l];
    L.attn_norm.assign(c.hidden, 1.f);
    L.ffn_norm.assign(c.hidden, 1.f);
    if (c.is_delta(l)) {
      synthetic_delta(c, L.delta, make, rng);
    } else {
      L.q.w = make({(c.attn_output_gate ? 2 : 1) * c.q_dim(), c.hidden}, "q");
      L.k.w = make({c.kv_dim(), c.hidden}, "k");
      L.v.w = make({c.kv_dim(), c.hidden}, "v");
      L.o.w = make({c.hidden, c.q_dim()}, "o");
      if (c.qk_norm == QkNorm::PER_HEAD) {
        L.q_norm.assign(c.head_dim, 1.f);
        L.k_norm.assign(c.head_dim, 1.f);
      }
    }
    if (c.layer_is_moe[l]) {
      L.router = make({c.n_experts, c.hidden}, "router");
      L.experts.resize(c.n_experts);
      for (auto& e : L.experts) {
        if (one_expert && first_expert.gate.data) {  // stand-ins: every expert views one
          e = first_expert;
          continue;
        }
        e = {make({c.expert_dim, c.hidden}, "gate"), make({c.expert_dim, c.hidden}, "up"),
             make({c.hidden, c.expert_dim}, "down")};
        first_expert = e;
      }
      if (c.shared_expert_dim > 0) {
        L.shared = {make({c.shared_expert_dim, c.hidden}, "shared_gate"),
                    make({c.shared_expert_dim, c.hidden}, "shared_up"),
                    make({c.hidden, c.shared_expert_dim}, "shared_down")};
        L.shared_gate = make({1, c.hidden}, "shared_expert_gate");
      }
    } else {
      L.gate = make({c.ffn_dim, c.hidden}, "gate");
      L.up = make({c.ffn_dim, c.hidden}, "up");
      L.down = make({c.hidden, c.ffn_dim}, "down");
    }
  }
  return m;
}

}  // namespace ft
