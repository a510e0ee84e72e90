// GGUF file(s) -> canonical ModelWeights: GGUF tensor names resolved, stacked experts sliced,
// llama.cpp's q/k row permutation undone, every tensor's type and shape checked. Matrices stay
// zero-copy views into the mapped file (quantized ones as quant DTypes); norms become f32.
#include <fmt/format.h>

#include "base/error.h"
#include "base/half.h"
#include "io/gguf.h"
#include "model/gguf_arch.h"
#include "model/model.h"
#include "quant/quant.h"

namespace ft {

namespace {

namespace gn = gguf_names;

// The mapped files plus tensors rebuilt at load (un-permuted q/k).
struct GgufStorage {
  std::unique_ptr<GgufSet> set;
  std::vector<std::vector<char>> arena;
};

struct GgufResolver {
  const GgufSet& g;
  const ModelConfig& c;
  GgufStorage& store;

  std::string want(std::initializer_list<int64_t> shape) const {
    std::string s = "[";
    for (int64_t d : shape) s += (s.size() > 1 ? ", " : "") + std::to_string(d);
    return s + "]";
  }

  // A weight view of any type this engine reads: F32/F16/BF16 or a quant type (quant/quant.h).
  TensorView view(const GgufTensor& t, std::initializer_list<int64_t> shape) const {
    TensorView v;
    v.name = t.name;
    if (ggml_plain_dtype(t.type, &v.dtype)) {
      if (v.dtype != DType::F32 && v.dtype != DType::F16 && v.dtype != DType::BF16)
        fail("{}: tensor '{}' has integer type {}; weights must be floating point or quantized",
             g.path(), t.name, ggml_type_info(t.type).name);
    } else if (quant::is_known(t.type)) {
      v.dtype = quant::to_dtype(static_cast<quant::QuantType>(t.type));
    } else {
      fail(
          "{}: tensor '{}' has type {}, which this engine does not read (supported: F32, F16, "
          "BF16, Q4_0, Q4_1, Q8_0, Q2_K..Q6_K, IQ4_NL, IQ4_XS, MXFP4); re-quantize it with ft "
          "quantize",
          g.path(), t.name, ggml_type_info(t.type).name);
    }
    auto s = t.shape();
    bool ok = s.size() == shape.size();
    int i = 0;
    for (int64_t d : shape) ok = ok && s[i++] == d;
    if (!ok)
      fail(
          "{}: tensor '{}' has shape {} but the metadata implies {}; the file's tensors do not "
          "match its metadata",
          g.path(), t.name, t.shape_str(), want(shape));
    v.ndim = static_cast<int>(s.size());
    for (size_t k = 0; k < s.size(); ++k) v.shape[k] = s[k];
    v.data = t.data;
    return v;
  }

  TensorView matrix(const std::string& name, int64_t rows, int64_t cols) const {
    return view(g.get_tensor(name), {rows, cols});
  }

  std::vector<float> vec(const std::string& name, int64_t n) const {
    TensorView v = view(g.get_tensor(name), {n});
    std::vector<float> out(n);
    for (int64_t i = 0; i < n; ++i) {
      switch (v.dtype) {
        case DType::F32:
          out[i] = v.as<float>()[i];
          break;
        case DType::F16:
          out[i] = f16_to_f32(v.as<uint16_t>()[i]);
          break;
        case DType::BF16:
          out[i] = bf16_to_f32(v.as<uint16_t>()[i]);
          break;
        default:
          fail("{}: vector '{}' must be F32, F16 or BF16", g.path(), name);
      }
    }
    return out;
  }

  // A float tensor of this shape flattened to f32 (gpt-oss's stacked expert biases).
  std::vector<float> flat(const std::string& name, std::initializer_list<int64_t> shape) const {
    const TensorView v = view(g.get_tensor(name), shape);
    if (v.dtype != DType::F32 && v.dtype != DType::F16 && v.dtype != DType::BF16)
      fail("{}: tensor '{}' must be F32, F16 or BF16", g.path(), name);
    std::vector<float> out(v.numel());
    for (int64_t i = 0; i < v.numel(); ++i)
      out[i] = v.dtype == DType::F32   ? v.as<float>()[i]
               : v.dtype == DType::F16 ? f16_to_f32(v.as<uint16_t>()[i])
                                       : bf16_to_f32(v.as<uint16_t>()[i]);
    return out;
  }

  // q/k of a permuted arch: rows put back in HF order, in the tensor's own type.
  TensorView unpermuted(const std::string& name, int64_t heads) const {
    TensorView v = matrix(name, heads * c.head_dim, c.hidden);
    const size_t row = v.nbytes() / v.shape[0];
    std::vector<char>& buf = store.arena.emplace_back(row * heads * c.head_dim);
    permute_qk_rows(static_cast<const char*>(v.data), buf.data(), heads, c.head_dim, row, false);
    v.data = buf.data();
    return v;
  }

  // A quantized table as f32 in the arena (the embedding lookup reads plain floats).
  TensorView dequantized(const TensorView& q) const {
    const int64_t rows = q.shape[0], cols = q.shape[1];
    std::vector<char>& buf = store.arena.emplace_back(static_cast<size_t>(rows * cols) * 4);
    quant::dequantize_rows(q, 0, rows, reinterpret_cast<float*>(buf.data()));
    TensorView v = q;
    v.dtype = DType::F32;
    v.data = buf.data();
    return v;
  }

  Linear linear(int64_t l, const char* name, int64_t out, int64_t in) const {
    Linear lin{.w = matrix(gn::layer(l, name), out, in), .bias = {}};
    if (c.attention_bias) lin.bias = vec(gn::layer(l, name, "bias"), out);
    return lin;
  }

  std::vector<ExpertWeights> experts(int64_t l) const {
    const int64_t E = c.n_experts, I = c.expert_dim, H = c.hidden;
    if (!g.tensor(gn::layer(l, gn::gate_exps)))
      fail(
          "{}: layer {} has a router but no {} tensor (per-expert GGUF tensors from old "
          "converters are not supported; convert the model again)",
          g.path(), l, gn::gate_exps);
    TensorView gate = view(g.get_tensor(gn::layer(l, gn::gate_exps)), {E, I, H});
    TensorView up = view(g.get_tensor(gn::layer(l, gn::up_exps)), {E, I, H});
    TensorView down = view(g.get_tensor(gn::layer(l, gn::down_exps)), {E, H, I});
    std::vector<ExpertWeights> out(E);
    for (int64_t e = 0; e < E; ++e)
      out[e] = {.gate = gate.slice0(e), .up = up.slice0(e), .down = down.slice0(e)};
    return out;
  }
};

}  // namespace

std::unique_ptr<Model> Model::load_gguf(const std::string& path) {
  auto store = std::make_shared<GgufStorage>();
  store->set = GgufSet::open(path);
  const GgufSet& g = *store->set;
  const GgufArch* arch = nullptr;
  std::unique_ptr<Model> m(new Model());
  m->dir_ = path;
  m->config_ = gguf_model_config(g, &arch);
  const ModelConfig& c = m->config_;
  GgufResolver r{g, c, *store};
  ModelWeights& w = m->weights_;
  w.embed = r.matrix(gn::embed, c.vocab_size, c.hidden);
  const TensorView embed_file = w.embed;
  if (dtype_is_quant(w.embed.dtype)) w.embed = r.dequantized(w.embed);  // ops::embed reads floats
  w.final_norm = r.vec(gn::final_norm, c.hidden);
  w.lm_head = c.tie_embeddings ? embed_file : r.matrix(gn::lm_head, c.vocab_size, c.hidden);
  w.layers.resize(c.n_layers);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    LayerWeights& L = w.layers[l];
    L.attn_norm = r.vec(gn::layer(l, gn::attn_norm), c.hidden);
    L.q = r.linear(l, gn::q, c.q_dim(), c.hidden);
    L.k = r.linear(l, gn::k, c.kv_dim(), c.hidden);
    L.v = r.linear(l, gn::v, c.kv_dim(), c.hidden);
    L.o = r.linear(l, gn::o, c.hidden, c.q_dim());
    if (arch->permuted_qk) {
      if (c.attention_bias || c.qk_norm != QkNorm::NONE)
        fail("{}: permuted q/k with biases or q/k norms is not supported", path);
      L.q.w = r.unpermuted(gn::layer(l, gn::q), c.n_heads);
      L.k.w = r.unpermuted(gn::layer(l, gn::k), c.n_kv_heads);
    }
    if (c.qk_norm == QkNorm::PER_HEAD) {
      L.q_norm = r.vec(gn::layer(l, gn::q_norm), c.head_dim);
      L.k_norm = r.vec(gn::layer(l, gn::k_norm), c.head_dim);
    } else if (c.qk_norm == QkNorm::FULL) {
      L.q_norm = r.vec(gn::layer(l, gn::q_norm), c.q_dim());
      L.k_norm = r.vec(gn::layer(l, gn::k_norm), c.kv_dim());
    }
    if (c.attn_sinks) L.sinks = r.vec(gn::layer(l, gn::sinks), c.n_heads);
    L.ffn_norm = r.vec(gn::layer(l, arch->ffn_norm), c.hidden);
    if (c.layer_is_moe[l]) {
      L.router = r.matrix(gn::layer(l, gn::router), c.n_experts, c.hidden);
      L.experts = r.experts(l);
      if (c.moe_bias) {
        const int64_t E = c.n_experts, I = c.expert_dim;
        L.router_bias = r.vec(gn::layer(l, gn::router, "bias"), E);
        L.expert_gate_bias = r.flat(gn::layer(l, gn::gate_exps, "bias"), {E, I});
        L.expert_up_bias = r.flat(gn::layer(l, gn::up_exps, "bias"), {E, I});
        L.expert_down_bias = r.flat(gn::layer(l, gn::down_exps, "bias"), {E, c.hidden});
      }
    } else {
      L.gate = r.matrix(gn::layer(l, gn::gate), c.ffn_dim, c.hidden);
      L.up = r.matrix(gn::layer(l, gn::up), c.ffn_dim, c.hidden);
      L.down = r.matrix(gn::layer(l, gn::down), c.hidden, c.ffn_dim);
    }
  }
  m->storage_ = std::move(store);
  return m;
}

}  // namespace ft
