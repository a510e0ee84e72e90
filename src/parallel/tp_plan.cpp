// Tensor-parallel plan and shards: head/width ranges per rank, then slices of the weights.
#include "parallel/tp_plan.h"

#include <cstring>

#include "base/error.h"

namespace ft {

namespace {
TpRange part(int64_t n, int world, int rank) {
  return {n * rank / world, n * (rank + 1) / world};
}

// Block-quantized rows split at block boundaries only; FP8 block scales are per 128x128 tile.
void check_columns(const TensorView& t, int64_t local, const char* what, int world) {
  if (t.empty()) return;
  if (t.scale_inv) fail("--tensor-parallel {}: {} ({}) is block-scaled FP8; not sharded yet",
                        world, what, t.name);
  const int64_t block = dtype_block(t.dtype).elems;
  if (local % block != 0)
    fail("--tensor-parallel {}: {} slices of {} columns split {} blocks of {}", world, what,
         local, dtype_name(t.dtype), block);
}
}  // namespace

// Model's factory for shards, defined beside its only user.
std::unique_ptr<Model> Model::from_weights(const ModelConfig& config, ModelWeights weights,
                                           const std::string& dir) {
  std::unique_ptr<Model> m(new Model());
  m->dir_ = dir;
  m->config_ = config;
  m->weights_ = std::move(weights);
  return m;
}

TpPlan plan_tensor_parallel(const ModelConfig& c, int world) {
  if (world < 1) fail("--tensor-parallel must be >= 1, got {}", world);
  if (c.has_delta())
    fail("--tensor-parallel {}: {} has DeltaNet layers; tensor parallelism covers attention "
         "models only for now (use --tensor-parallel 1)", world, c.model_type);
  if (c.shared_expert_dim > 0 || c.attn_output_gate)
    fail("--tensor-parallel {}: shared experts and gated attention are not sharded yet", world);
  if (world > 1 && (c.attn_sinks || c.moe_bias || c.sliding_window > 0))
    fail("--tensor-parallel {}: {} (attention sinks, sliding window, MoE biases) is not sharded "
         "yet (use --tensor-parallel 1)", world, c.model_type);
  if (c.n_heads % world != 0)
    fail("--tensor-parallel {}: {} attention heads do not divide over {} GPUs", world,
         c.n_heads, world);
  const bool replicate = world > c.n_kv_heads;
  if (replicate ? world % c.n_kv_heads != 0 : c.n_kv_heads % world != 0)
    fail("--tensor-parallel {}: {} KV heads neither divide over {} GPUs nor replicate evenly",
         world, c.n_kv_heads, world);
  if (replicate && c.qk_norm == QkNorm::FULL)
    fail("--tensor-parallel {}: a full-width k norm needs {} distinct KV heads per GPU", world,
         c.n_kv_heads);
  bool dense = false;
  for (int64_t l = 0; l < c.n_layers; ++l) dense |= !c.layer_is_moe[l];
  if (dense && c.ffn_dim % world != 0)
    fail("--tensor-parallel {}: the dense MLP width {} does not divide over {} GPUs", world,
         c.ffn_dim, world);
  if (c.n_experts > 0 && c.expert_dim % world != 0)
    fail("--tensor-parallel {}: the expert width {} does not divide over {} GPUs", world,
         c.expert_dim, world);
  TpPlan p;
  p.world = world, p.kv_replicated = replicate;
  for (int r = 0; r < world; ++r) {
    TpRank k;
    k.rank = r, k.world = world;
    k.q_heads = part(c.n_heads, world, r);
    if (replicate) {
      const int64_t h = r / (world / c.n_kv_heads);
      k.kv_heads = {h, h + 1};
    } else {
      k.kv_heads = part(c.n_kv_heads, world, r);
    }
    // GQA: the rank's q heads must all read its KV heads.
    const int64_t group = c.n_heads / c.n_kv_heads;
    FT_CHECK(k.q_heads.begin / group >= k.kv_heads.begin &&
                 (k.q_heads.end - 1) / group < k.kv_heads.end,
             "tp plan: q heads {}..{} outside kv heads {}..{}", k.q_heads.begin, k.q_heads.end,
             k.kv_heads.begin, k.kv_heads.end);
    k.ffn = part(dense ? c.ffn_dim : 0, world, r);
    k.expert = part(c.expert_dim, world, r);
    k.adds_biases = r == 0;
    p.ranks.push_back(k);
  }
  return p;
}

ModelConfig shard_config(const ModelConfig& c, const TpRank& r) {
  ModelConfig s = c;
  s.n_heads = r.q_heads.size();
  s.n_kv_heads = r.kv_heads.size();
  if (c.ffn_dim > 0 && r.ffn.size() > 0) s.ffn_dim = r.ffn.size();
  if (c.n_experts > 0) s.expert_dim = r.expert.size();
  return s;
}

TensorView slice_columns(const TensorView& t, int64_t c0, int64_t c1,
                         std::vector<std::vector<uint8_t>>& owned) {
  FT_CHECK(t.ndim >= 2 && c0 >= 0 && c0 < c1 && c1 <= t.inner(), "{}: columns {}..{} of {}",
           t.name, c0, c1, t.shape_str());
  const int64_t block = dtype_block(t.dtype).elems;
  FT_CHECK(c0 % block == 0 && c1 % block == 0, "{}: columns {}..{} split blocks", t.name, c0, c1);
  const size_t row = dtype_row_bytes(t.dtype, t.inner());
  const size_t skip = dtype_row_bytes(t.dtype, c0) * (c0 > 0);
  const size_t width = dtype_row_bytes(t.dtype, c1 - c0);
  const int64_t rows = t.numel() / t.inner();
  std::vector<uint8_t>& buf = owned.emplace_back(rows * width);
  const auto* src = static_cast<const uint8_t*>(t.data);
  for (int64_t i = 0; i < rows; ++i) std::memcpy(buf.data() + i * width, src + i * row + skip, width);
  TensorView v = t;
  v.shape[t.ndim - 1] = c1 - c0;
  v.data = buf.data();
  v.name = fmt::format("{}[:, {}:{}]", t.name, c0, c1);
  return v;
}

std::unique_ptr<Model> shard_model(const Model& model, const TpPlan& plan, int rank) {
  const ModelConfig& c = model.config();
  FT_CHECK(rank >= 0 && rank < plan.world, "shard_model: rank {} of {}", rank, plan.world);
  const TpRank& r = plan.ranks[rank];
  const ModelWeights& w = model.weights();
  ModelWeights s;
  s.embed = w.embed, s.lm_head = w.lm_head, s.final_norm = w.final_norm;
  const int64_t hd = c.head_dim;
  auto rows = [](const TensorView& t, TpRange g, int64_t unit) {
    return t.empty() ? t : t.rows(g.begin * unit, g.end * unit);
  };
  auto vec = [](const std::vector<float>& v, TpRange g, int64_t unit) {
    if (v.empty()) return v;
    return std::vector<float>(v.begin() + g.begin * unit, v.begin() + g.end * unit);
  };
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = w.layers[l];
    LayerWeights d;
    d.attn_norm = L.attn_norm, d.ffn_norm = L.ffn_norm;
    d.q.w = rows(L.q.w, r.q_heads, hd), d.q.bias = vec(L.q.bias, r.q_heads, hd);
    d.k.w = rows(L.k.w, r.kv_heads, hd), d.k.bias = vec(L.k.bias, r.kv_heads, hd);
    d.v.w = rows(L.v.w, r.kv_heads, hd), d.v.bias = vec(L.v.bias, r.kv_heads, hd);
    if (!L.o.w.empty()) {
      check_columns(L.o.w, r.q_heads.size() * hd, "o_proj", plan.world);
      d.o.w = slice_columns(L.o.w, r.q_heads.begin * hd, r.q_heads.end * hd, s.owned);
    }
    if (r.adds_biases) d.o.bias = L.o.bias;
    if (c.qk_norm == QkNorm::FULL) {
      d.q_norm = vec(L.q_norm, r.q_heads, hd), d.k_norm = vec(L.k_norm, r.kv_heads, hd);
    } else {
      d.q_norm = L.q_norm, d.k_norm = L.k_norm;
    }
    if (!L.gate.empty()) {
      d.gate = rows(L.gate, r.ffn, 1), d.up = rows(L.up, r.ffn, 1);
      check_columns(L.down, r.ffn.size(), "the dense down_proj", plan.world);
      d.down = slice_columns(L.down, r.ffn.begin, r.ffn.end, s.owned);
    }
    d.router = L.router;
    for (const ExpertWeights& e : L.experts) {
      check_columns(e.down, r.expert.size(), "the experts' down_proj", plan.world);
      d.experts.push_back({.gate = rows(e.gate, r.expert, 1),
                           .up = rows(e.up, r.expert, 1),
                           .down = slice_columns(e.down, r.expert.begin, r.expert.end, s.owned)});
    }
    s.layers.push_back(std::move(d));
  }
  return Model::from_weights(shard_config(c, r), std::move(s),
                             fmt::format("{} (tp {}/{})", model.dir(), rank, plan.world));
}

}  // namespace ft
