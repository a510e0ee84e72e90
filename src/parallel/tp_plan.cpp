// Tensor-parallel plan and shards: head/width ranges per rank, then slices of the weights.
#include "parallel/tp_plan.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"

namespace ft {

namespace {
TpRange part(int64_t n, int world, int rank) {
  return {n * rank / world, n * (rank + 1) / world};
}

// Columns a slice of t must start and end on: its block, or an FP8 tile's 128.
int64_t column_unit(const TensorView& t) {
  if (t.empty()) return 1;
  return t.scale_inv ? 128 : dtype_block(t.dtype).elems;
}

// Block-quantized rows split at block boundaries only; FP8 block scales are per 128x128 tile.
void check_columns(const TensorView& t, int64_t c0, int64_t c1, const char* what, int world) {
  if (t.empty()) return;
  const int64_t block = column_unit(t);
  if (c0 % block != 0 || (c1 % block != 0 && c1 != t.inner()))
    fail("--tensor-parallel {}: {} slices of {} columns split {} blocks of {}", world, what,
         c1 - c0, dtype_name(t.dtype), block);
}

// A width split over the ranks: evenly when it divides, else (block-quantized) in whole blocks
// of `align` columns as evenly as they go. Refuses in one line otherwise.
std::vector<TpRange> split_width(int64_t n, int64_t align, int world, const char* what) {
  std::vector<TpRange> out;
  if (n % world == 0 && (n / world) % align == 0) {
    for (int r = 0; r < world; ++r) out.push_back(part(n, world, r));
    return out;
  }
  if (align == 1)
    fail("--tensor-parallel {}: {} {} does not divide over {} GPUs", world, what, n, world);
  if (n % align != 0 || n / align < world)
    fail("--tensor-parallel {}: {} {} is not {} or more whole blocks of {} columns", world, what,
         n, world, align);
  for (int r = 0; r < world; ++r) {
    const TpRange b = part(n / align, world, r);
    out.push_back({b.begin * align, b.end * align});
  }
  return out;
}

// Rows [r0, r1) as a view; FP8 tiles need r0 on a 128-row boundary (one-line refusal).
TensorView row_slice(const TensorView& t, int64_t r0, int64_t r1, const char* what, int world) {
  if (t.empty()) return t;
  if (t.scale_inv && r0 % 128 != 0)
    fail("--tensor-parallel {}: {} ({}) is block-scaled FP8 and its rank rows start at {}, not "
         "on a 128-row tile", world, what, t.name, r0);
  return t.rows(r0, r1);
}

// Row ranges of t gathered into one new matrix in `owned` (FP8: every piece in whole tiles).
TensorView gather_rows(const TensorView& t, const std::vector<TpRange>& pieces, const char* what,
                       int world, std::vector<std::vector<uint8_t>>& owned) {
  FT_CHECK(t.ndim == 2, "{}: gather_rows of {}", t.name, t.shape_str());
  const size_t row = dtype_row_bytes(t.dtype, t.inner());
  int64_t rows = 0;
  for (const TpRange& p : pieces) {
    FT_CHECK(p.begin >= 0 && p.begin <= p.end && p.end <= t.shape[0], "{}: rows {}..{}", t.name,
             p.begin, p.end);
    if (t.scale_inv && (p.begin % 128 != 0 || (p.size() % 128 != 0 && p.end != t.shape[0])))
      fail("--tensor-parallel {}: {} ({}) is block-scaled FP8 and rows {}..{} are not whole "
           "128-row tiles", world, what, t.name, p.begin, p.end);
    rows += p.size();
  }
  std::vector<uint8_t>& buf = owned.emplace_back(rows * row);
  const auto* src = static_cast<const uint8_t*>(t.data);
  size_t at = 0;
  for (const TpRange& p : pieces) {
    std::memcpy(buf.data() + at, src + p.begin * row, p.size() * row);
    at += p.size() * row;
  }
  TensorView v = t;
  v.shape[0] = rows;
  v.data = buf.data();
  v.name = fmt::format("{}[rank rows]", t.name);
  if (t.scale_inv) {  // the pieces' tile rows, in order
    const int64_t tc = (t.shape[1] + 127) / 128;
    std::vector<uint8_t>& sb = owned.emplace_back(((rows + 127) / 128) * tc * sizeof(float));
    size_t so = 0;
    for (const TpRange& p : pieces) {
      const size_t n = ((p.size() + 127) / 128) * tc * sizeof(float);
      std::memcpy(sb.data() + so, t.scale_inv + (p.begin / 128) * tc, n);
      so += n;
    }
    v.scale_inv = reinterpret_cast<const float*>(sb.data());
  }
  return v;
}

std::vector<float> gather(const std::vector<float>& v, const std::vector<TpRange>& pieces,
                          int64_t unit) {
  std::vector<float> out;
  for (const TpRange& p : pieces)
    out.insert(out.end(), v.begin() + p.begin * unit, v.begin() + p.end * unit);
  return out;
}

int64_t widest_unit(int64_t a, const TensorView& t) { return std::max(a, column_unit(t)); }
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

TpAlign tp_align(const ModelWeights& w) {
  TpAlign a;
  for (const LayerWeights& L : w.layers) {
    a.ffn = widest_unit(widest_unit(a.ffn, L.down), L.gate);
    for (const ExpertWeights& e : L.experts)
      a.expert = widest_unit(widest_unit(a.expert, e.down), e.gate);
    a.shared = widest_unit(widest_unit(a.shared, L.shared.down), L.shared.gate);
  }
  return a;
}

TpPlan plan_tensor_parallel(const Model& m, int world) {
  return plan_tensor_parallel(m.config(), world, tp_align(m.weights()));
}

TpPlan plan_tensor_parallel(const ModelConfig& c, int world, const TpAlign& align) {
  if (world < 1) fail("--tensor-parallel must be >= 1, got {}", world);
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
  // DeltaNet: key heads split evenly, each with its group of value heads.
  const DeltaNetConfig& dn = c.delta;
  if (c.has_delta() && (dn.n_k_heads % world != 0 || dn.n_v_heads % dn.n_k_heads != 0))
    fail("--tensor-parallel {}: {} DeltaNet key heads ({} value heads) do not divide over {} "
         "GPUs", world, dn.n_k_heads, dn.n_v_heads, world);
  bool dense = false;
  for (int64_t l = 0; l < c.n_layers; ++l) dense |= !c.layer_is_moe[l];
  const auto ffn = split_width(dense ? c.ffn_dim : 0, align.ffn, world, "the dense MLP width");
  const auto expert =
      split_width(c.n_experts > 0 ? c.expert_dim : 0, align.expert, world, "the expert width");
  const auto shared = split_width(c.shared_expert_dim, align.shared, world,
                                  "the shared expert width");
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
    k.ffn = ffn[r], k.expert = expert[r], k.shared = shared[r];
    if (c.has_delta()) {
      const int64_t ratio = dn.n_v_heads / dn.n_k_heads;
      k.delta_k = part(dn.n_k_heads, world, r);
      k.delta_v = {k.delta_k.begin * ratio, k.delta_k.end * ratio};
    }
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
  if (c.shared_expert_dim > 0) s.shared_expert_dim = r.shared.size();
  if (c.has_delta()) s.delta.n_k_heads = r.delta_k.size(), s.delta.n_v_heads = r.delta_v.size();
  if (r.own_experts.size() > 0) {  // whole experts: this rank's share of the router's experts
    s.n_experts = r.own_experts.size();
    s.router_experts = c.n_experts, s.expert_begin = r.own_experts.begin;
  }
  return s;
}

namespace {
// A DeltaNet layer's shard: the rank's key heads [k0, k1) and their value heads [v0, v1).
// qkv rows are [q (key heads) | k (key heads) | v (value heads)] and the conv channels follow
// them; z, b, a, A_log and dt_bias are per value head; out is row-parallel (its columns).
DeltaNetWeights shard_delta(const ModelConfig& c, const DeltaNetWeights& D, const TpRank& r,
                            int world, std::vector<std::vector<uint8_t>>& owned) {
  const DeltaNetConfig& d = c.delta;
  const int64_t K = d.key_dim(), kd = d.k_head_dim, vd = d.v_head_dim;
  const std::vector<TpRange> pieces = {{r.delta_k.begin * kd, r.delta_k.end * kd},
                                       {K + r.delta_k.begin * kd, K + r.delta_k.end * kd},
                                       {2 * K + r.delta_v.begin * vd, 2 * K + r.delta_v.end * vd}};
  DeltaNetWeights s;
  s.qkv = gather_rows(D.qkv, pieces, "the DeltaNet in_proj_qkv", world, owned);
  s.conv = gather(D.conv, pieces, d.conv_kernel);
  s.z = row_slice(D.z, r.delta_v.begin * vd, r.delta_v.end * vd, "the DeltaNet in_proj_z", world);
  s.b = row_slice(D.b, r.delta_v.begin, r.delta_v.end, "the DeltaNet in_proj_b", world);
  s.a = row_slice(D.a, r.delta_v.begin, r.delta_v.end, "the DeltaNet in_proj_a", world);
  s.a_log = gather(D.a_log, {r.delta_v}, 1);
  s.dt_bias = gather(D.dt_bias, {r.delta_v}, 1);
  s.norm = D.norm;  // [v_head_dim], the same for every head
  check_columns(D.out, r.delta_v.begin * vd, r.delta_v.end * vd, "the DeltaNet out_proj", world);
  s.out = slice_columns(D.out, r.delta_v.begin * vd, r.delta_v.end * vd, owned);
  return s;
}
}  // namespace

TensorView slice_columns(const TensorView& t, int64_t c0, int64_t c1,
                         std::vector<std::vector<uint8_t>>& owned) {
  FT_CHECK(t.ndim >= 2 && c0 >= 0 && c0 < c1 && c1 <= t.inner(), "{}: columns {}..{} of {}",
           t.name, c0, c1, t.shape_str());
  if (c0 == 0 && c1 == t.inner()) return t;  // every column: the tensor itself (whole experts)
  const int64_t block = column_unit(t);
  FT_CHECK(c0 % block == 0 && (c1 % block == 0 || c1 == t.inner()),
           "{}: columns {}..{} split blocks", t.name, c0, c1);
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
  if (t.scale_inv) {  // FP8: the tile columns of every tile row (of every stacked plane)
    const int64_t tc = (t.inner() + 127) / 128, t0 = c0 / 128, t1 = (c1 + 127) / 128;
    const int64_t planes = t.numel() / (t.shape[t.ndim - 2] * t.inner());
    const int64_t tile_rows = planes * ((t.shape[t.ndim - 2] + 127) / 128);
    std::vector<uint8_t>& sb = owned.emplace_back(tile_rows * (t1 - t0) * sizeof(float));
    auto* dst = reinterpret_cast<float*>(sb.data());
    for (int64_t i = 0; i < tile_rows; ++i)
      std::copy(t.scale_inv + i * tc + t0, t.scale_inv + i * tc + t1, dst + i * (t1 - t0));
    v.scale_inv = dst;
  }
  return v;
}

std::unique_ptr<Model> shard_model(const Model& model, const TpPlan& plan, int rank) {
  const ModelConfig& c = model.config();
  FT_CHECK(rank >= 0 && rank < plan.world, "shard_model: rank {} of {}", rank, plan.world);
  const TpRank& r = plan.ranks[rank];
  const int world = plan.world;
  const ModelWeights& w = model.weights();
  ModelWeights s;
  s.embed = w.embed, s.lm_head = w.lm_head, s.final_norm = w.final_norm;
  if (r.vocab.size() > 0) s.lm_head = w.lm_head.rows(r.vocab.begin, r.vocab.end);  // tp_vocab.cpp
  const int64_t hd = c.head_dim;
  auto rows = [world](const TensorView& t, TpRange g, int64_t unit, const char* what) {
    return row_slice(t, g.begin * unit, g.end * unit, what, world);
  };
  auto vec = [](const std::vector<float>& v, TpRange g, int64_t unit) {
    if (v.empty()) return v;
    return std::vector<float>(v.begin() + g.begin * unit, v.begin() + g.end * unit);
  };
  auto cols = [&](const TensorView& t, TpRange g, int64_t unit, const char* what) {
    if (t.empty()) return t;
    check_columns(t, g.begin * unit, g.end * unit, what, world);
    return slice_columns(t, g.begin * unit, g.end * unit, s.owned);
  };
  // Gated attention: q_proj rows per head are [query | gate], so a head is 2 * head_dim rows.
  const int64_t q_unit = c.attn_output_gate ? 2 * hd : hd;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = w.layers[l];
    LayerWeights d;
    d.attn_norm = L.attn_norm, d.ffn_norm = L.ffn_norm;
    d.q.w = rows(L.q.w, r.q_heads, q_unit, "q_proj"), d.q.bias = vec(L.q.bias, r.q_heads, q_unit);
    d.k.w = rows(L.k.w, r.kv_heads, hd, "k_proj"), d.k.bias = vec(L.k.bias, r.kv_heads, hd);
    d.v.w = rows(L.v.w, r.kv_heads, hd, "v_proj"), d.v.bias = vec(L.v.bias, r.kv_heads, hd);
    d.o.w = cols(L.o.w, r.q_heads, hd, "o_proj");
    if (r.adds_biases) d.o.bias = L.o.bias;
    if (c.qk_norm == QkNorm::FULL) {
      d.q_norm = vec(L.q_norm, r.q_heads, hd), d.k_norm = vec(L.k_norm, r.kv_heads, hd);
    } else {
      d.q_norm = L.q_norm, d.k_norm = L.k_norm;
    }
    d.sinks = vec(L.sinks, r.q_heads, 1);  // gpt-oss: one sink logit per q head
    if (!L.gate.empty()) {
      d.gate = rows(L.gate, r.ffn, 1, "the dense gate_proj");
      d.up = rows(L.up, r.ffn, 1, "the dense up_proj");
      d.down = cols(L.down, r.ffn, 1, "the dense down_proj");
    }
    d.router = L.router, d.router_bias = L.router_bias;
    for (const ExpertWeights& e : L.experts)
      d.experts.push_back({.gate = rows(e.gate, r.expert, 1, "the experts' gate_proj"),
                           .up = rows(e.up, r.expert, 1, "the experts' up_proj"),
                           .down = cols(e.down, r.expert, 1, "the experts' down_proj")});
    // gpt-oss expert biases: gate/up [E, I] slice with the expert columns; the down bias
    // [E, hidden] is row-parallel (rank 0 adds it, weighted like its expert's output).
    const int64_t E = static_cast<int64_t>(L.experts.size()), I = c.expert_dim;
    for (auto [src, dst] : {std::pair{&L.expert_gate_bias, &d.expert_gate_bias},
                            std::pair{&L.expert_up_bias, &d.expert_up_bias}}) {
      if (src->empty()) continue;
      FT_CHECK(static_cast<int64_t>(src->size()) == E * I, "expert bias of {} floats",
               src->size());
      for (int64_t e = 0; e < E; ++e)
        dst->insert(dst->end(), src->begin() + e * I + r.expert.begin,
                    src->begin() + e * I + r.expert.end);
    }
    if (r.adds_biases) d.expert_down_bias = L.expert_down_bias;
    // Shared expert: sliced like a dense MLP; its sigmoid gate (a scalar per token from the
    // full hidden state) is replicated, so every rank scales its partial by the same factor.
    if (!L.shared_gate.empty()) {
      d.shared = {.gate = rows(L.shared.gate, r.shared, 1, "the shared expert's gate_proj"),
                  .up = rows(L.shared.up, r.shared, 1, "the shared expert's up_proj"),
                  .down = cols(L.shared.down, r.shared, 1, "the shared expert's down_proj")};
      d.shared_gate = L.shared_gate;
    }
    if (!L.delta.qkv.empty()) d.delta = shard_delta(c, L.delta, r, world, s.owned);
    if (r.own_experts.size() > 0) own_expert_layer(c, L, r, d);  // whole experts (tp_experts.cpp)
    s.layers.push_back(std::move(d));
  }
  return Model::from_weights(shard_config(c, r), std::move(s),
                             fmt::format("{} (tp {}/{})", model.dir(), rank, world));
}

}  // namespace ft
