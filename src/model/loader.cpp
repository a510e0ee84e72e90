// Checkpoint names -> canonical ModelWeights. Per-expert and stacked expert layouts, fused
// vs split tensors and dtype/shape checks are all resolved here; families never see file names.
#include <fmt/format.h>

#include <cstring>

#include "base/error.h"
#include "base/half.h"
#include "base/log.h"
#include "model/model.h"
#include "model/oss_experts.h"
#include "model/quant_checkpoint.h"
#include "quant/quant.h"

namespace ft {

namespace {
struct Resolver {
  const SafetensorsSet& files;
  const ModelConfig& c;
  std::vector<std::vector<uint8_t>>& owned;  // ModelWeights::owned: repacked quantized tensors

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

  // A weight of this shape, plain or quantized (FP8 block / NVFP4 / ModelOpt FP8 checkpoints:
  // model/quant_checkpoint.h).
  TensorView weight(const std::string& name, std::initializer_list<int64_t> shape) const {
    TensorView q;
    if (quantized_view(files, name, shape, owned, &q)) return q;
    const TensorView& v = files.get(name);
    check(v, shape);
    return v;
  }

  TensorView matrix(const std::string& name, int64_t rows, int64_t cols) const {
    return weight(name, {rows, cols});
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

  // An RMSNorm weight as the forward uses it: zero-centred checkpoints store w for a scale of
  // (1 + w), so the 1 is added here.
  std::vector<float> norm(const std::string& name, int64_t n) const {
    std::vector<float> w = vec(name, n);
    if (c.norm_offset)
      for (float& x : w) x += 1.f;
    return w;
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
      const TensorView gu = weight(p + "experts.gate_up_proj", {E, 2 * I, H});
      const TensorView down = weight(p + "experts.down_proj", {E, H, I});
      if (gu.scale_inv && I % 128)
        fail("{}: {}experts.gate_up_proj is FP8 with 128x128 block scales but its gate/up "
             "split ({} rows) is not a multiple of 128; store the experts per expert",
             files.dir(), p, I);
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

  // Gated DeltaNet weights in the canonical layout. Qwen3-Next fuses the input projections
  // per key head g: in_proj_qkvz rows [q_g | k_g | v_g (r heads) | z_g (r heads)] and
  // in_proj_ba rows [b_g (r) | a_g (r)], r = n_v_heads / n_k_heads; those rows are copied
  // into q|k|v, z, b, a matrices owned by the weights.
  DeltaNetWeights delta(const std::string& p, ModelWeights& w) const {
    const DeltaNetConfig& d = c.delta;
    const int64_t K = d.key_dim(), V = d.value_dim(), nv = d.n_v_heads, H = c.hidden;
    DeltaNetWeights out;
    if (files.has(p + "in_proj_qkvz.weight")) {
      const int64_t hk = d.k_head_dim, r = d.n_v_heads / d.n_k_heads, rv = r * d.v_head_dim;
      // FP8 block scales move with whole 128-row blocks; when the head groups are not aligned
      // to them the fused matrices are expanded to f32 first.
      const bool fp8_aligned = hk % 128 == 0 && rv % 128 == 0 && K % 128 == 0;
      TensorView qkvz = matrix(p + "in_proj_qkvz.weight", 2 * K + 2 * V, H);
      TensorView ba = matrix(p + "in_proj_ba.weight", 2 * nv, H);
      if (qkvz.scale_inv && !fp8_aligned) qkvz = dequantized_f32(qkvz, w.owned);
      if (ba.scale_inv) ba = dequantized_f32(ba, w.owned);
      const size_t row = dtype_row_bytes(qkvz.dtype, H);
      const size_t ba_row = dtype_row_bytes(ba.dtype, H);
      const int64_t scale_cols = (H + 127) / 128;
      auto rebuilt = [&](const TensorView& src, int64_t rows, const char* what) {
        const size_t rb = &src == &ba ? ba_row : row;
        w.owned.emplace_back(static_cast<size_t>(rows) * rb);
        TensorView t = src;
        t.shape = {rows, H, 1, 1};
        t.data = w.owned.back().data();
        t.name = p + what;
        if (src.scale_inv) {
          auto& s = w.owned.emplace_back(static_cast<size_t>((rows + 127) / 128 * scale_cols) * 4);
          t.scale_inv = reinterpret_cast<const float*>(s.data());
        }
        return t;
      };
      out.qkv = rebuilt(qkvz, d.conv_dim(), "in_proj_qkv (from in_proj_qkvz)");
      out.z = rebuilt(qkvz, V, "in_proj_z (from in_proj_qkvz)");
      out.b = rebuilt(ba, nv, "in_proj_b (from in_proj_ba)");
      out.a = rebuilt(ba, nv, "in_proj_a (from in_proj_ba)");
      auto copy = [&](const TensorView& src, int64_t from, int64_t n, const TensorView& dst,
                      int64_t to) {
        const size_t rb = &src == &ba ? ba_row : row;
        std::memcpy(static_cast<uint8_t*>(const_cast<void*>(dst.data)) + to * rb,
                    static_cast<const uint8_t*>(src.data) + from * rb, n * rb);
        if (src.scale_inv)  // aligned (checked above): whole 128-row scale rows
          std::memcpy(const_cast<float*>(dst.scale_inv) + to / 128 * scale_cols,
                      src.scale_inv + from / 128 * scale_cols,
                      static_cast<size_t>((n + 127) / 128 * scale_cols) * 4);
      };
      const int64_t width = 2 * hk + 2 * rv;  // rows of one key head's group in in_proj_qkvz
      for (int64_t g = 0; g < d.n_k_heads; ++g) {
        copy(qkvz, g * width, hk, out.qkv, g * hk);
        copy(qkvz, g * width + hk, hk, out.qkv, K + g * hk);
        copy(qkvz, g * width + 2 * hk, rv, out.qkv, 2 * K + g * rv);
        copy(qkvz, g * width + 2 * hk + rv, rv, out.z, g * rv);
        copy(ba, g * 2 * r, r, out.b, g * r);
        copy(ba, g * 2 * r + r, r, out.a, g * r);
      }
    } else {
      out.qkv = matrix(p + "in_proj_qkv.weight", d.conv_dim(), H);
      out.z = matrix(p + "in_proj_z.weight", V, H);
      out.b = matrix(p + "in_proj_b.weight", nv, H);
      out.a = matrix(p + "in_proj_a.weight", nv, H);
    }
    const TensorView& conv = files.get(p + "conv1d.weight");
    check(conv, {d.conv_dim(), 1, d.conv_kernel});
    out.conv = to_f32(conv);
    out.a_log = vec(p + "A_log", nv);
    out.dt_bias = vec(p + "dt_bias", nv);
    out.norm = vec(p + "norm.weight", d.v_head_dim);
    out.out = matrix(p + "out_proj.weight", H, V);
    return out;
  }
};

// Multimodal checkpoints (Qwen3.5/3.6 image-text-to-text) keep the language model under
// model.language_model.*; the vision tower and MTP head are not used by a text engine.
WeightNames resolve_root(const WeightNames& in, const SafetensorsSet& files) {
  WeightNames n = in;
  const std::string from = "model.", to = "model.language_model.";
  auto moved = [&](const std::string& s) {
    return s.rfind(from, 0) == 0 ? to + s.substr(from.size()) : s;
  };
  if (files.has(n.embed) || !files.has(moved(n.embed))) return n;
  n.embed = moved(n.embed);
  n.final_norm = moved(n.final_norm);
  n.layer = moved(n.layer);
  int64_t vision = 0, mtp = 0;
  for (const auto& name : files.names()) {
    vision += name.rfind("model.visual.", 0) == 0;
    mtp += name.rfind("mtp.", 0) == 0;
  }
  FT_LOG_INFO("{}: text model under model.language_model; skipping {} vision tensors "
              "(model.visual.*) and {} MTP tensors (mtp.*)", files.dir(), vision, mtp);
  return n;
}
}  // namespace

ModelWeights load_weights(const ModelConfig& c, const WeightNames& names,
                          const SafetensorsSet& files) {
  const WeightNames n = resolve_root(names, files);
  ModelWeights w;
  Resolver r{files, c, w.owned};
  const TensorView embed = r.matrix(n.embed, c.vocab_size, c.hidden);
  // The lookup reads plain floats; a quantized table (rare: quantizers keep it) is expanded.
  w.embed = dtype_is_quant(embed.dtype) ? dequantized_f32(embed, w.owned) : embed;
  w.final_norm = r.norm(n.final_norm, c.hidden);
  if (c.tie_embeddings || !files.has(n.lm_head))
    w.lm_head = embed;
  else
    w.lm_head = r.matrix(n.lm_head, c.vocab_size, c.hidden);
  w.layers.resize(c.n_layers);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string p = fmt::format(fmt::runtime(n.layer), l);
    LayerWeights& L = w.layers[l];
    L.attn_norm = r.norm(p + n.attn_norm, c.hidden);
    if (c.is_delta(l)) {
      L.delta = r.delta(p + n.delta, w);
    } else {
      const int64_t q_rows = c.attn_output_gate ? 2 * c.q_dim() : c.q_dim();
      L.q = r.linear(p + n.q, q_rows, c.hidden, c.attention_bias);
      L.k = r.linear(p + n.k, c.kv_dim(), c.hidden, c.attention_bias);
      L.v = r.linear(p + n.v, c.kv_dim(), c.hidden, c.attention_bias);
      L.o = r.linear(p + n.o, c.hidden, c.q_dim(), c.attention_bias);
      if (c.attn_sinks) L.sinks = r.vec(p + n.sinks, c.n_heads);
      if (c.qk_norm == QkNorm::PER_HEAD) {
        L.q_norm = r.norm(p + n.q_norm, c.head_dim);
        L.k_norm = r.norm(p + n.k_norm, c.head_dim);
      } else if (c.qk_norm == QkNorm::FULL) {
        L.q_norm = r.norm(p + n.q_norm, c.q_dim());
        L.k_norm = r.norm(p + n.k_norm, c.kv_dim());
      }
    }
    L.ffn_norm = r.norm(p + n.ffn_norm, c.hidden);
    if (c.layer_is_moe[l]) {
      L.router = r.matrix(p + n.moe + n.router + ".weight", c.n_experts, c.hidden);
      if (c.moe_bias) L.router_bias = r.vec(p + n.moe + n.router + ".bias", c.n_experts);
      if (n.oss_experts)
        load_oss_experts(files, p + n.moe + "experts.", c.n_experts, c.expert_dim, c.hidden,
                         w.owned, L);
      else
        L.experts = r.experts(p + n.moe, n);
      if (c.shared_expert_dim > 0) {
        const std::string s = p + n.shared_expert;
        const int64_t S = c.shared_expert_dim, H = c.hidden;
        L.shared = {.gate = r.matrix(s + "gate_proj.weight", S, H),
                    .up = r.matrix(s + "up_proj.weight", S, H),
                    .down = r.matrix(s + "down_proj.weight", H, S)};
        L.shared_gate = r.matrix(p + n.shared_gate, 1, H);
      }
    } else {
      L.gate = r.matrix(p + n.mlp + "gate_proj.weight", c.ffn_dim, c.hidden);
      L.up = r.matrix(p + n.mlp + "up_proj.weight", c.ffn_dim, c.hidden);
      L.down = r.matrix(p + n.mlp + "down_proj.weight", c.hidden, c.ffn_dim);
    }
  }
  return w;
}

}  // namespace ft
