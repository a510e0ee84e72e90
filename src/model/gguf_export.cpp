// Model -> GGUF: metadata from ModelConfig (the inverse of gguf_model_config) and one tensor per
// GGUF name, converted row by row into its type when the writer asks for the bytes.
#include "model/gguf_export.h"

#include <fmt/format.h>

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "backend/cpu/thread_pool.h"
#include "base/error.h"
#include "base/half.h"
#include "model/gguf_arch.h"
#include "quant/quant.h"

namespace ft {

namespace {

namespace gn = gguf_names;
using quant::QuantType;

bool plain_ggml(uint32_t t) { return t == k_ggml_f32 || t == k_ggml_f16 || t == k_ggml_bf16; }

uint32_t ggml_of(DType d) {
  switch (d) {
    case DType::F32:
      return k_ggml_f32;
    case DType::F16:
      return k_ggml_f16;
    case DType::BF16:
      return k_ggml_bf16;
    default:
      return static_cast<uint32_t>(quant::from_dtype(d));
  }
}

// Rows [0, rows) of src (any readable dtype) written in ggml type `type` at dst, rows spread
// over the pool (quantizers with a scale search are the slow part of ft quantize).
void convert(const TensorView& src, uint32_t type, char* dst, ThreadPool& pool) {
  const int64_t rows = src.shape[0], cols = src.shape[1];
  if (ggml_of(src.dtype) == type) {
    std::memcpy(dst, src.data, src.nbytes());
    return;
  }
  const size_t out_row = static_cast<size_t>(cols / ggml_type_info(type).block_elems) *
                         ggml_type_info(type).block_bytes;
  pool.run(rows, 16, [&](int64_t r0, int64_t r1) {
    std::vector<float> buf((r1 - r0) * cols);
    quant::dequantize_rows(src, r0, r1, buf.data());
    for (int64_t r = r0; r < r1; ++r) {
      const float* x = buf.data() + (r - r0) * cols;
      char* out = dst + r * out_row;
      if (type == k_ggml_f32) {
        std::memcpy(out, x, cols * sizeof(float));
      } else if (type == k_ggml_f16 || type == k_ggml_bf16) {
        auto* h = reinterpret_cast<uint16_t*>(out);
        for (int64_t c = 0; c < cols; ++c)
          h[c] = type == k_ggml_f16 ? f32_to_f16(x[c]) : f32_to_bf16(x[c]);
      } else {
        quant::quantize_row(static_cast<QuantType>(type), x, out, cols);
      }
    }
  });
}

size_t type_row_bytes(uint32_t type, int64_t cols) {
  GgmlTypeInfo ti = ggml_type_info(type);
  return static_cast<size_t>(cols / ti.block_elems * ti.block_bytes);
}

bool is_k_quant(uint32_t t) {
  switch (static_cast<QuantType>(t)) {
    case QuantType::Q2_K:
    case QuantType::Q3_K:
    case QuantType::Q4_K:
    case QuantType::Q5_K:
    case QuantType::Q6_K:
    case QuantType::IQ4_XS:
      return true;
    default:
      return false;
  }
}

struct Exporter {
  GgufWriter& w;
  const ModelConfig& c;
  const GgufArch& arch;
  const GgufExportOptions& o;
  std::shared_ptr<ThreadPool> pool;  // shared by the fill callbacks, which run at write time

  uint32_t type_for(const TensorView& t, const std::string& name) const {
    if (o.type_of)
      if (const auto forced = o.type_of(name))
        return gguf_export_type(*forced, name, t.shape[t.ndim - 1], c.tie_embeddings);
    if (!o.type) return ggml_of(t.dtype);
    const uint32_t target = o.mix == GgufMix::NONE ? *o.type : gguf_mix_type(o.mix, name, c.n_layers);
    return gguf_export_type(target, name, t.shape[t.ndim - 1], c.tie_embeddings);
  }

  void vec(const std::string& name, const std::vector<float>& v) {
    w.add_tensor(name, k_ggml_f32, {static_cast<int64_t>(v.size())}, v.data());
  }

  // A 2-D matrix; `permute_heads` > 0 applies llama.cpp's q/k row permutation.
  void matrix(const std::string& name, const TensorView& t, int64_t permute_heads = 0) {
    const uint32_t type = type_for(t, name);
    const int64_t rows = t.shape[0], cols = t.shape[1];
    const int64_t head_dim = c.head_dim;
    w.add_tensor(name, type, {rows, cols}, [t, type, permute_heads, head_dim, p = pool](char* dst) {
      if (permute_heads == 0) return convert(t, type, dst, *p);
      std::vector<char> tmp(type_row_bytes(type, t.shape[1]) * t.shape[0]);
      convert(t, type, tmp.data(), *p);
      permute_qk_rows(tmp.data(), dst, permute_heads, head_dim, type_row_bytes(type, t.shape[1]),
                      true);
    });
  }

  // [E, rows, cols] from one view per expert.
  void stacked(const std::string& name, std::vector<TensorView> parts) {
    const TensorView& t0 = parts.at(0);
    const uint32_t type = type_for(t0, name);
    const int64_t E = static_cast<int64_t>(parts.size());
    const size_t slice = type_row_bytes(type, t0.shape[1]) * t0.shape[0];
    w.add_tensor(name, type, {E, t0.shape[0], t0.shape[1]},
                 [parts = std::move(parts), type, slice, p = pool](char* dst) {
                   for (size_t e = 0; e < parts.size(); ++e)
                     convert(parts[e], type, dst + e * slice, *p);
                 });
  }
};

void add_metadata(GgufWriter& w, const ModelConfig& c, const GgufArch& a,
                  const GgufExportOptions& o) {
  const std::string p = std::string(a.arch) + ".";
  auto u32 = [](int64_t v) { return GgufValue::u32(static_cast<uint32_t>(v)); };
  w.set("general.architecture", GgufValue::str(a.arch));
  if (!o.name.empty()) w.set("general.name", GgufValue::str(o.name));
  if (o.type && !plain_ggml(*o.type)) w.set("general.quantization_version", u32(2));
  bool any_dense = false;
  for (bool moe : c.layer_is_moe) any_dense = any_dense || !moe;
  w.set(p + "vocab_size", u32(c.vocab_size));
  w.set(p + "context_length", u32(c.max_position));
  w.set(p + "embedding_length", u32(c.hidden));
  w.set(p + "block_count", u32(c.n_layers));
  w.set(p + "feed_forward_length", u32(any_dense || c.n_experts == 0 ? c.ffn_dim : c.expert_dim));
  w.set(p + "attention.head_count", u32(c.n_heads));
  w.set(p + "attention.head_count_kv", u32(c.n_kv_heads));
  w.set(p + "attention.key_length", u32(c.head_dim));
  w.set(p + "attention.value_length", u32(c.head_dim));
  w.set(p + "attention.layer_norm_rms_epsilon", GgufValue::f32(c.rms_eps));
  if (c.clip_qkv > 0) w.set(p + "attention.clamp_kqv", GgufValue::f32(c.clip_qkv));
  w.set(p + "rope.freq_base", GgufValue::f32(static_cast<float>(c.rope.theta)));
  w.set(p + "rope.dimension_count", u32(c.rotary_dim()));
  if (c.rope.interleaved) fail("GGUF export: interleaved RoPE configs are not supported");
  switch (c.rope.type) {
    case RopeConfig::Type::DEFAULT:
      break;
    case RopeConfig::Type::LINEAR:
      w.set(p + "rope.scaling.type", GgufValue::str("linear"));
      w.set(p + "rope.scaling.factor", GgufValue::f32(static_cast<float>(c.rope.factor)));
      break;
    case RopeConfig::Type::YARN:
      if (c.rope.mscale != 0 || c.rope.mscale_all_dim != 0 || c.rope.truncate != a.yarn_truncate)
        fail("GGUF export: this YaRN variant (mscale / truncate) has no GGUF keys");
      w.set(p + "rope.scaling.type", GgufValue::str("yarn"));
      w.set(p + "rope.scaling.factor", GgufValue::f32(static_cast<float>(c.rope.factor)));
      w.set(p + "rope.scaling.original_context_length", u32(c.rope.original_max_pos));
      w.set(p + "rope.scaling.yarn_beta_fast",
            GgufValue::f32(static_cast<float>(c.rope.beta_fast)));
      w.set(p + "rope.scaling.yarn_beta_slow",
            GgufValue::f32(static_cast<float>(c.rope.beta_slow)));
      if (c.rope.attention_factor != 0)
        w.set(p + "rope.scaling.attn_factor",
              GgufValue::f32(static_cast<float>(c.rope.attention_factor)));
      break;
  }
  if (c.sliding_window > 0) {  // llama.cpp's pattern: even layers slide
    for (int64_t l = 0; l < c.n_layers; ++l)
      if (c.window(l) != (l % 2 == 0 ? c.sliding_window : 0))
        fail("GGUF export: sliding layers other than every even layer have no GGUF keys");
    w.set(p + "attention.sliding_window", u32(c.sliding_window));
  }
  if (c.expert_act.kind == ExpertActivation::Kind::SWIGLU_OAI &&
      (c.expert_act.limit != 7.f || c.expert_act.alpha != 1.702f))
    fail("GGUF export: a clamped SwiGLU other than gpt-oss's (alpha 1.702, limit 7) has no GGUF "
         "keys");
  if (c.n_experts > 0) {
    w.set(p + "expert_count", u32(c.n_experts));
    w.set(p + "expert_used_count", u32(c.top_k));
    w.set(p + "expert_feed_forward_length", u32(c.expert_dim));
    w.set(p + "expert_weights_norm", GgufValue::boolean(c.norm_topk_prob));
  }
}

}  // namespace

uint32_t gguf_export_type(uint32_t target, const std::string& name, int64_t cols, bool tied) {
  if (name.find(gn::router) != std::string::npos) return k_ggml_f32;
  uint32_t t = target;
  if (is_k_quant(t) && (name == gn::lm_head || (tied && name == gn::embed)))
    t = static_cast<uint32_t>(QuantType::Q6_K);
  auto fits = [&](uint32_t type) { return cols % ggml_type_info(type).block_elems == 0; };
  if (!fits(t)) {
    switch (static_cast<QuantType>(t)) {
      case QuantType::Q2_K:
      case QuantType::Q3_K:
      case QuantType::Q4_K:
      case QuantType::IQ4_XS:
        t = static_cast<uint32_t>(QuantType::IQ4_NL);
        break;
      case QuantType::Q5_K:
      case QuantType::Q6_K:
        t = static_cast<uint32_t>(QuantType::Q8_0);
        break;
      default:
        break;
    }
  }
  return fits(t) ? t : k_ggml_f16;
}

GgufMix gguf_mix_parse(std::string_view s) {
  std::string l(s);
  for (char& ch : l) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (l == "q4_k_m") return GgufMix::Q4_K_M;
  if (l == "q5_k_m") return GgufMix::Q5_K_M;
  return GgufMix::NONE;
}

uint32_t gguf_mix_base(GgufMix mix) {
  FT_CHECK(mix != GgufMix::NONE, "gguf_mix_base: no mixture");
  return static_cast<uint32_t>(mix == GgufMix::Q4_K_M ? QuantType::Q4_K : QuantType::Q5_K);
}

bool gguf_more_bits(int64_t i, int64_t n) {
  return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

uint32_t gguf_mix_type(GgufMix mix, const std::string& name, int64_t n_layers) {
  const uint32_t base = gguf_mix_base(mix);
  int64_t layer = -1;
  if (name.rfind("blk.", 0) == 0) layer = std::strtoll(name.c_str() + 4, nullptr, 10);
  if (layer < 0) return base;  // token_embd (output becomes Q6_K in gguf_export_type)
  const std::string tail = name.substr(name.find('.', 4) + 1);
  const bool sensitive = tail.rfind(std::string(gn::v) + ".", 0) == 0 ||
                         tail.rfind(std::string(gn::down) + ".", 0) == 0 ||
                         tail.rfind(std::string(gn::down_exps) + ".", 0) == 0;
  return sensitive && gguf_more_bits(layer, n_layers) ? static_cast<uint32_t>(QuantType::Q6_K)
                                                      : base;
}

void gguf_add_model(GgufWriter& w, const Model& m, const GgufExportOptions& o) {
  const ModelConfig& c = m.config();
  const GgufArch* a = gguf_arch_for_model_type(c.model_type);
  if (!a)
    fail("model_type '{}' has no GGUF architecture (supported: {})", c.model_type,
         supported_gguf_archs());
  if (o.type && ggml_type_info(*o.type).block_bytes == 0)
    fail("GGUF export: unknown target type {}", *o.type);
  if (o.type && !plain_ggml(*o.type) && !quant::is_known(*o.type))
    fail("GGUF export: cannot quantize to {}", ggml_type_info(*o.type).name);
  add_metadata(w, c, *a, o);
  const ModelWeights& mw = m.weights();
  Exporter x{w, c, *a, o, std::make_shared<ThreadPool>(0, false)};
  x.matrix(gn::embed, c.tie_embeddings ? mw.lm_head : mw.embed);  // tied: the file's own view
  x.vec(gn::final_norm, mw.final_norm);
  if (!c.tie_embeddings && mw.lm_head.data != mw.embed.data) x.matrix(gn::lm_head, mw.lm_head);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = mw.layers[l];
    auto name = [&](const char* n, const char* s = "weight") { return gn::layer(l, n, s); };
    x.vec(name(gn::attn_norm), L.attn_norm);
    x.matrix(name(gn::q), L.q.w, a->permuted_qk ? c.n_heads : 0);
    x.matrix(name(gn::k), L.k.w, a->permuted_qk ? c.n_kv_heads : 0);
    x.matrix(name(gn::v), L.v.w);
    x.matrix(name(gn::o), L.o.w);
    for (auto [lin, n] : {std::pair{&L.q, gn::q}, {&L.k, gn::k}, {&L.v, gn::v}, {&L.o, gn::o}})
      if (!lin->bias.empty()) {
        if (a->permuted_qk) fail("GGUF export: q/k biases with permuted q/k are not supported");
        x.vec(name(n, "bias"), lin->bias);
      }
    if (!L.q_norm.empty()) x.vec(name(gn::q_norm), L.q_norm);
    if (!L.k_norm.empty()) x.vec(name(gn::k_norm), L.k_norm);
    if (!L.sinks.empty()) x.vec(name(gn::sinks), L.sinks);
    x.vec(name(a->ffn_norm), L.ffn_norm);
    if (c.layer_is_moe[l]) {
      x.matrix(name(gn::router), L.router);
      if (!L.router_bias.empty()) {  // gpt-oss
        const int64_t E = c.n_experts;
        x.vec(name(gn::router, "bias"), L.router_bias);
        w.add_tensor(name(gn::gate_exps, "bias"), k_ggml_f32, {E, c.expert_dim},
                     L.expert_gate_bias.data());
        w.add_tensor(name(gn::up_exps, "bias"), k_ggml_f32, {E, c.expert_dim},
                     L.expert_up_bias.data());
        w.add_tensor(name(gn::down_exps, "bias"), k_ggml_f32, {E, c.hidden},
                     L.expert_down_bias.data());
      }
      std::vector<TensorView> g, u, d;
      for (const ExpertWeights& e : L.experts) {
        g.push_back(e.gate);
        u.push_back(e.up);
        d.push_back(e.down);
      }
      x.stacked(name(gn::gate_exps), std::move(g));
      x.stacked(name(gn::up_exps), std::move(u));
      x.stacked(name(gn::down_exps), std::move(d));
    } else {
      x.matrix(name(gn::gate), L.gate);
      x.matrix(name(gn::up), L.up);
      x.matrix(name(gn::down), L.down);
    }
  }
}

}  // namespace ft
