// Checkpoint names -> canonical ModelWeights. Per-expert and stacked expert layouts, fused
// vs split tensors and dtype/shape checks are all resolved here; families never see file names.
#include <fmt/format.h>

#include "base/error.h"
#include "base/half.h"
#include "model/model.h"

namespace ft {

namespace {
struct Resolver {
  const SafetensorsSet& files;
  const ModelConfig& c;

  static bool float_type(DType t) {
    return t == DType::F32 || t == DType::F16 || t == DType::BF16;
  }

  void check(const TensorView& v, std::initializer_list<int64_t> shape) const {
    if (!float_type(v.dtype))
      fail("{}: tensor '{}' has dtype {}; supported: F32, F16, BF16", files.dir(), v.name,
           dtype_name(v.dtype));
    bool ok = v.ndim == static_cast<int>(shape.size());
    int i = 0;
    for (int64_t d : shape) ok = ok && v.shape[i++] == d;
    if (!ok) {
      std::string want = "[";
      for (int64_t d : shape) want += (want.size() > 1 ? ", " : "") + std::to_string(d);
      fail("{}: tensor '{}' has shape {} but config.json implies {}]; the weights do not match "
           "the config", files.dir(), v.name, v.shape_str(), want);
    }
  }

  TensorView matrix(const std::string& name, int64_t rows, int64_t cols) const {
    const TensorView& v = files.get(name);
    check(v, {rows, cols});
    return v;
  }

  std::vector<float> vec(const std::string& name, int64_t n) const {
    const TensorView& v = files.get(name);
    check(v, {n});
    return to_f32(v);
  }

  std::vector<float> optional_vec(const std::string& name, int64_t n) const {
    return files.has(name) ? vec(name, n) : std::vector<float>{};
  }

  static std::vector<float> to_f32(const TensorView& v) {
    std::vector<float> out(v.numel());
    for (int64_t i = 0; i < v.numel(); ++i) {
      switch (v.dtype) {
        case DType::F32: out[i] = v.as<float>()[i]; break;
        case DType::F16: out[i] = f16_to_f32(v.as<uint16_t>()[i]); break;
        default: out[i] = bf16_to_f32(v.as<uint16_t>()[i]); break;
      }
    }
    return out;
  }

  Linear linear(const std::string& name, int64_t out, int64_t in, bool bias) const {
    Linear l{.w = matrix(name + ".weight", out, in), .bias = {}};
    if (bias) l.bias = vec(name + ".bias", out);
    return l;
  }

  std::vector<ExpertWeights> experts(const std::string& p, const WeightNames& n) const {
    const int64_t E = c.n_experts, I = c.expert_dim, H = c.hidden;
    std::vector<ExpertWeights> out(E);
    if (files.has(p + "experts.gate_up_proj")) {  // stacked (transformers 5)
      const TensorView& gu = files.get(p + "experts.gate_up_proj");
      const TensorView& down = files.get(p + "experts.down_proj");
      check(gu, {E, 2 * I, H});
      check(down, {E, H, I});
      for (int64_t e = 0; e < E; ++e) {
        TensorView s = gu.slice0(e);
        out[e] = {.gate = s.rows(0, I), .up = s.rows(I, 2 * I), .down = down.slice0(e)};
      }
      return out;
    }
    const std::string first = fmt::format("{}experts.0.{}.weight", p, n.expert_gate);
    if (!files.has(first))
      fail("{}: no experts found for '{}' (looked for {} and {}experts.gate_up_proj)",
           files.dir(), p, first, p);
    for (int64_t e = 0; e < E; ++e) {
      auto name = [&](const std::string& w) {
        return fmt::format("{}experts.{}.{}.weight", p, e, w);
      };
      out[e] = {.gate = matrix(name(n.expert_gate), I, H),
                .up = matrix(name(n.expert_up), I, H),
                .down = matrix(name(n.expert_down), H, I)};
    }
    return out;
  }
};
}  // namespace

ModelWeights load_weights(const ModelConfig& c, const WeightNames& n,
                          const SafetensorsSet& files) {
  Resolver r{files, c};
  ModelWeights w;
  w.embed = r.matrix(n.embed, c.vocab_size, c.hidden);
  w.final_norm = r.vec(n.final_norm, c.hidden);
  if (c.tie_embeddings || !files.has(n.lm_head))
    w.lm_head = w.embed;
  else
    w.lm_head = r.matrix(n.lm_head, c.vocab_size, c.hidden);
  w.layers.resize(c.n_layers);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string p = fmt::format(fmt::runtime(n.layer), l);
    LayerWeights& L = w.layers[l];
    L.attn_norm = r.vec(p + n.attn_norm, c.hidden);
    L.q = r.linear(p + n.q, c.q_dim(), c.hidden, c.attention_bias);
    L.k = r.linear(p + n.k, c.kv_dim(), c.hidden, c.attention_bias);
    L.v = r.linear(p + n.v, c.kv_dim(), c.hidden, c.attention_bias);
    L.o = r.linear(p + n.o, c.hidden, c.q_dim(), c.attention_bias);
    if (c.qk_norm == QkNorm::PER_HEAD) {
      L.q_norm = r.vec(p + n.q_norm, c.head_dim);
      L.k_norm = r.vec(p + n.k_norm, c.head_dim);
    } else if (c.qk_norm == QkNorm::FULL) {
      L.q_norm = r.vec(p + n.q_norm, c.q_dim());
      L.k_norm = r.vec(p + n.k_norm, c.kv_dim());
    }
    L.ffn_norm = r.vec(p + n.ffn_norm, c.hidden);
    if (c.layer_is_moe[l]) {
      L.router = r.matrix(p + n.moe + "gate.weight", c.n_experts, c.hidden);
      L.experts = r.experts(p + n.moe, n);
    } else {
      L.gate = r.matrix(p + n.mlp + "gate_proj.weight", c.ffn_dim, c.hidden);
      L.up = r.matrix(p + n.mlp + "up_proj.weight", c.ffn_dim, c.hidden);
      L.down = r.matrix(p + n.mlp + "down_proj.weight", c.hidden, c.ffn_dim);
    }
  }
  return w;
}

}  // namespace ft
