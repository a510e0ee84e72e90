// CudaTransformer: embed -> [attention block, FFN block] x layers -> norm -> lm_head on the GPU,
// mirroring model/transformer.cpp op for op.
#include "model/cuda_transformer.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "experts/gpu_expert_store.h"

namespace ft {

void rope_tables(const Rope& rope, int64_t max_pos, std::vector<float>& cos,
                 std::vector<float>& sin) {
  const auto& f = rope.inv_freq();
  const int64_t half = static_cast<int64_t>(f.size());
  cos.resize(max_pos * half);
  sin.resize(max_pos * half);
  for (int64_t p = 0; p < max_pos; ++p)
    for (int64_t i = 0; i < half; ++i) {
      const float angle = f[i] * static_cast<float>(p);
      cos[p * half + i] = std::cos(angle) * rope.attention_factor();
      sin[p * half + i] = std::sin(angle) * rope.attention_factor();
    }
}

namespace {
cuda::DeviceBuffer floats(int64_t count) { return cuda::DeviceBuffer(count * sizeof(float)); }

constexpr int64_t k_logit_rows = 64;  // lm_head runs on at most this many tokens at a time

// Bytes of every weight the transformer keeps resident (all but routed experts).
size_t resident_bytes(const ModelWeights& w) {
  // lm_head is uploaded on its own even when tied to the embedding.
  size_t b = w.embed.nbytes() + w.lm_head.nbytes() + w.final_norm.size() * sizeof(float);
  for (const auto& L : w.layers) {
    for (const Linear* l : {&L.q, &L.k, &L.v, &L.o}) b += l->w.nbytes() + l->bias.size() * 4;
    for (const TensorView* t : {&L.gate, &L.up, &L.down, &L.router}) b += t->nbytes();
    for (const auto* v : {&L.attn_norm, &L.ffn_norm, &L.q_norm, &L.k_norm}) b += v->size() * 4;
  }
  return b;
}
}  // namespace

MemoryRequest cuda_offload_request(const Model& model, const HostExperts& experts, int64_t capacity,
                                   int64_t max_chunk, size_t budget) {
  const ModelConfig& c = model.config();
  const int64_t T = max_chunk, H = c.hidden, I = experts.inter, k = c.top_k, f = 4;
  const int64_t widest = std::max({H, c.q_dim(), c.ffn_dim, I});
  const int64_t rot = c.head_dim;  // upper bound of the rotary width
  size_t scratch = T * 4 + f * T *
                               (3 * H + 2 * c.q_dim() + 2 * c.kv_dim() +
                                2 * std::max<int64_t>(c.ffn_dim, 1) + c.n_experts + 2 * k);
  scratch += f * std::min(T, k_logit_rows) * c.vocab_size;                      // logits
  scratch += 2 * T * widest * 2 + cuda::Blas::k_dequant_elems * f;              // Blas
  scratch += f * T * k * (2 * H + 2 * I) + 12 * T * k + 4 * (c.n_experts + 1);  // MoeWorkspace
  scratch +=
      f * cuda::k_gemv_max_tokens * k * (2 * H + 2 * I) + 4 * experts.moe_layers * c.n_experts;
  scratch += f * capacity * rot;  // cos/sin
  // cuBLAS workspaces and allocation rounding: measured ~10 MB beyond the terms above on an
  // H200 (bench offload reports the VRAM it used beside the budget); 160 MB of headroom.
  scratch += size_t{160} << 20;
  return {.budget = budget,
          .resident_weights = resident_bytes(model.weights()),
          .scratch = scratch,
          .kv_bytes_per_token = static_cast<size_t>(2 * c.n_layers * c.kv_dim() * f),
          .kv_reserve_tokens = capacity,
          .expert_bytes = experts.expert_bytes(),
          .moe_layers = experts.moe_layers,
          .experts = experts.n_experts};
}

CudaTransformer::~CudaTransformer() = default;

CudaTransformer::CudaTransformer(const Model& model, int64_t capacity, int64_t max_chunk,
                                 const CudaOffload& offload)
    : model_(model),
      c_(model.config()),
      capacity_(capacity),
      max_chunk_(max_chunk),
      rope_(c_.rope, c_.head_dim) {
  FT_CHECK(capacity > 0 && max_chunk > 0, "CudaTransformer: bad sizes");
  if (cuda::device_count() == 0) fail("no CUDA device: run on the CPU backend instead");
  const auto& w = model.weights();
  const HostExperts* host = offload.experts;
  if (host) {
    FT_CHECK(host->n_layers == c_.n_layers && host->n_experts == c_.n_experts &&
                 host->hidden == c_.hidden,
             "offload: host experts do not match the model");
    for (int64_t l = 0; l < c_.n_layers; ++l)
      FT_CHECK(host->has_layer(l) == bool(c_.layer_is_moe[l]), "offload: layer {}", l);
  }
  const int64_t inter = host ? host->inter : c_.expert_dim;
  embed_ = upload(w.embed);
  lm_head_ = upload(w.lm_head);
  final_norm_ = upload(w.final_norm);
  for (const auto& L : w.layers) {
    Layer d{};
    d.attn_norm = upload(L.attn_norm);
    d.ffn_norm = upload(L.ffn_norm);
    d.q_norm = upload(L.q_norm);
    d.k_norm = upload(L.k_norm);
    d.q = upload(L.q.w), d.k = upload(L.k.w), d.v = upload(L.v.w), d.o = upload(L.o.w);
    d.q_bias = upload(L.q.bias), d.k_bias = upload(L.k.bias), d.v_bias = upload(L.v.bias);
    d.o_bias = upload(L.o.bias);
    if (!L.gate.empty()) d.gate = upload(L.gate), d.up = upload(L.up), d.down = upload(L.down);
    if (!L.router.empty()) {
      d.router = upload(L.router);
      if (!host) d.experts = upload_experts(L.experts);
    }
    layers_.push_back(d);
  }
  const int64_t T = max_chunk, H = c_.hidden, kvd = c_.kv_dim();
  const int64_t widest = std::max({H, c_.q_dim(), c_.ffn_dim, inter});
  blas_ = std::make_unique<cuda::Blas>(T, widest);
  if (c_.n_experts > 0)
    moe_ = std::make_unique<cuda::MoeWorkspace>(T, c_.top_k, c_.n_experts, H, inter);
  if (host) {
    store_ = std::make_unique<GpuExpertStore>(*host, offload.slots);
    if (!store_->all_resident())
      moe_pool_ = std::make_unique<cuda::MoeWorkspace>(cuda::k_gemv_max_tokens, c_.top_k,
                                                       offload.slots, H, inter);
    slot_ids_ = cuda::DeviceBuffer(cuda::k_gemv_max_tokens * c_.top_k * sizeof(int32_t));
  }
  kv_k_ = floats(c_.n_layers * capacity * kvd);
  kv_v_ = floats(c_.n_layers * capacity * kvd);
  std::vector<float> cs, sn;
  rope_tables(rope_, capacity, cs, sn);
  cos_ = floats(static_cast<int64_t>(cs.size()));
  sin_ = floats(static_cast<int64_t>(sn.size()));
  cos_.upload(cs.data(), cs.size() * sizeof(float));
  sin_.upload(sn.data(), sn.size() * sizeof(float));
  ids_ = cuda::DeviceBuffer(T * sizeof(int32_t));
  x_ = floats(T * H), xn_ = floats(T * H), tmp_ = floats(T * H);
  q_ = floats(T * c_.q_dim()), att_ = floats(T * c_.q_dim());
  k_ = floats(T * kvd), v_ = floats(T * kvd);
  gate_ = floats(T * std::max<int64_t>(c_.ffn_dim, 1)),
  up_ = floats(T * std::max<int64_t>(c_.ffn_dim, 1));
  if (c_.n_experts > 0) {
    router_ = floats(T * c_.n_experts);
    route_ids_ = cuda::DeviceBuffer(T * c_.top_k * sizeof(int32_t));
    route_w_ = floats(T * c_.top_k);
  }
  logit_rows_ = std::min(T, k_logit_rows);
  logits_ = floats(logit_rows_ * c_.vocab_size);
}

cuda::DeviceMatrix CudaTransformer::upload(const TensorView& t) {
  if (t.empty()) return {};
  FT_CHECK(t.ndim == 2, "{}: expected a matrix, got {}", t.name, t.shape_str());
  cuda::DeviceBuffer& b = storage_.emplace_back(t.nbytes());
  b.upload(t.data, t.nbytes());
  weight_bytes_ += t.nbytes();
  return {.data = b.data(), .dtype = t.dtype, .rows = t.shape[0], .cols = t.shape[1]};
}

const float* CudaTransformer::upload(const std::vector<float>& v) {
  if (v.empty()) return nullptr;
  cuda::DeviceBuffer& b = storage_.emplace_back(v.size() * sizeof(float));
  b.upload(v.data(), v.size() * sizeof(float));
  weight_bytes_ += b.bytes();
  return b.as<float>();
}

// Stacks the experts of one layer: gate/up [E, I, H], down [E, H, I] in one dtype.
cuda::DeviceExperts CudaTransformer::upload_experts(const std::vector<ExpertWeights>& experts) {
  FT_CHECK(!experts.empty(), "MoE layer without experts");
  const ExpertWeights& e0 = experts[0];
  cuda::DeviceExperts d{.dtype = e0.gate.dtype,
                        .n_experts = static_cast<int64_t>(experts.size()),
                        .hidden = e0.gate.shape[1],
                        .inter = e0.gate.shape[0]};
  auto stack = [&](auto member) {
    const size_t each = (experts[0].*member).nbytes();
    cuda::DeviceBuffer& b = storage_.emplace_back(each * experts.size());
    for (size_t i = 0; i < experts.size(); ++i) {
      const TensorView& t = experts[i].*member;
      FT_CHECK(t.dtype == d.dtype && t.nbytes() == each, "{}: experts differ in dtype or shape",
               t.name);
      b.upload(t.data, each, i * each);
    }
    weight_bytes_ += b.bytes();
    return static_cast<const void*>(b.data());
  };
  d.gate = stack(&ExpertWeights::gate);
  d.up = stack(&ExpertWeights::up);
  d.down = stack(&ExpertWeights::down);
  FT_CHECK(e0.down.shape[0] == d.hidden && e0.down.shape[1] == d.inter,
           "{}: down is {}, expected [{}, {}]", e0.down.name, e0.down.shape_str(), d.hidden,
           d.inter);
  return d;
}

float* CudaTransformer::k_cache(int64_t l) const {
  return kv_k_.as<float>() + l * capacity_ * c_.kv_dim();
}
float* CudaTransformer::v_cache(int64_t l) const {
  return kv_v_.as<float>() + l * capacity_ * c_.kv_dim();
}

void CudaTransformer::forward(const int32_t* ids, int64_t n, int64_t pos0, float* logits,
                              bool all_logits) {
  if (n <= 0) fail("forward: no tokens");
  if (pos0 < 0 || pos0 + n > capacity_)
    fail("sequence of {} tokens exceeds the context size {}", pos0 + n, capacity_);
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= c_.vocab_size)
      fail("token id {} is out of range [0, {})", ids[i], c_.vocab_size);
  const int64_t H = c_.hidden, V = c_.vocab_size;
  float* x = x_.as<float>();
  float* xn = xn_.as<float>();
  float* lg = logits_.as<float>();
  for (int64_t s = 0; s < n; s += max_chunk_) {
    const int64_t m = std::min(max_chunk_, n - s);
    cuda::copy_to_device(ids_.data(), ids + s, m * sizeof(int32_t));
    run_layers(m, pos0 + s);
    if (all_logits) {
      cuda::rmsnorm(x, m, H, final_norm_, c_.rms_eps, xn);
      for (int64_t r = 0; r < m; r += logit_rows_) {
        const int64_t rows = std::min(logit_rows_, m - r);
        cuda::matmul(*blas_, xn + r * H, rows, lm_head_, lg);
        cuda::copy_to_host(logits + (s + r) * V, lg, rows * V * sizeof(float));
      }
    } else if (s + m == n) {
      cuda::rmsnorm(x + (m - 1) * H, 1, H, final_norm_, c_.rms_eps, xn);
      cuda::matmul(*blas_, xn, 1, lm_head_, lg);
      cuda::copy_to_host(logits, lg, V * sizeof(float));
    }
  }
}

void CudaTransformer::run_layers(int64_t n, int64_t pos0) {
  cuda::embed(embed_, ids_.as<int32_t>(), n, x_.as<float>());
  // Offloaded prefill streams every MoE layer's experts (the next layer's copy overlaps this
  // layer's compute); decode-sized passes go through the slot cache instead.
  streaming_ = store_ && !store_->all_resident() && n > cuda::k_gemv_max_tokens;
  if (streaming_) {
    std::vector<int64_t> order;
    for (int64_t l = 0; l < c_.n_layers; ++l)
      if (c_.layer_is_moe[l]) order.push_back(l);
    store_->stream_begin(order);
  }
  for (int64_t l = 0; l < c_.n_layers; ++l) {
    attention_block(l, n, pos0);
    ffn_block(l, n);
  }
}

void CudaTransformer::attention_block(int64_t l, int64_t n, int64_t pos0) {
  const Layer& L = layers_[l];
  const int64_t H = c_.hidden, qd = c_.q_dim(), kvd = c_.kv_dim(), hd = c_.head_dim;
  float *x = x_.as<float>(), *xn = xn_.as<float>(), *q = q_.as<float>(), *k = k_.as<float>(),
        *v = v_.as<float>();
  cuda::rmsnorm(x, n, H, L.attn_norm, c_.rms_eps, xn);
  cuda::matmul(*blas_, xn, n, L.q, q, L.q_bias);
  cuda::matmul(*blas_, xn, n, L.k, k, L.k_bias);
  cuda::matmul(*blas_, xn, n, L.v, v, L.v_bias);
  if (c_.qk_norm == QkNorm::PER_HEAD) {
    cuda::rmsnorm(q, n * c_.n_heads, hd, L.q_norm, c_.rms_eps, q);
    cuda::rmsnorm(k, n * c_.n_kv_heads, hd, L.k_norm, c_.rms_eps, k);
  } else if (c_.qk_norm == QkNorm::FULL) {
    cuda::rmsnorm(q, n, qd, L.q_norm, c_.rms_eps, q);
    cuda::rmsnorm(k, n, kvd, L.k_norm, c_.rms_eps, k);
  }
  if (c_.clip_qkv > 0) {
    cuda::clamp(q, n * qd, c_.clip_qkv);
    cuda::clamp(k, n * kvd, c_.clip_qkv);
    cuda::clamp(v, n * kvd, c_.clip_qkv);
  }
  const int64_t rot = static_cast<int64_t>(rope_.inv_freq().size()) * 2;
  for (auto [p, heads] : {std::pair{q, c_.n_heads}, std::pair{k, c_.n_kv_heads}})
    cuda::rope({.x = p,
                .n = n,
                .n_heads = heads,
                .head_dim = hd,
                .rot_dim = rot,
                .pos0 = pos0,
                .interleaved = c_.rope.interleaved,
                .cos = cos_.as<float>(),
                .sin = sin_.as<float>()});
  cuda::copy_on_device(k_cache(l) + pos0 * kvd, k, n * kvd * sizeof(float));
  cuda::copy_on_device(v_cache(l) + pos0 * kvd, v, n * kvd * sizeof(float));
  cuda::attention({.q = q,
                   .n_tokens = n,
                   .pos0 = pos0,
                   .k_cache = k_cache(l),
                   .v_cache = v_cache(l),
                   .n_heads = c_.n_heads,
                   .n_kv_heads = c_.n_kv_heads,
                   .head_dim = hd,
                   .scale = 1.f / std::sqrt(static_cast<float>(hd)),
                   .out = att_.as<float>()});
  cuda::matmul(*blas_, att_.as<float>(), n, L.o, tmp_.as<float>(), L.o_bias);
  cuda::add_inplace(x, tmp_.as<float>(), n * H);
}

void CudaTransformer::ffn_block(int64_t l, int64_t n) {
  const Layer& L = layers_[l];
  const int64_t H = c_.hidden;
  float *x = x_.as<float>(), *xn = xn_.as<float>(), *tmp = tmp_.as<float>();
  cuda::rmsnorm(x, n, H, L.ffn_norm, c_.rms_eps, xn);
  if (c_.layer_is_moe[l]) {
    moe_block(l, n);
  } else {
    float *g = gate_.as<float>(), *u = up_.as<float>();
    cuda::matmul(*blas_, xn, n, L.gate, g);
    cuda::matmul(*blas_, xn, n, L.up, u);
    cuda::silu_mul(g, u, n * c_.ffn_dim, g);
    cuda::matmul(*blas_, g, n, L.down, tmp);
  }
  cuda::add_inplace(x, tmp, n * H);
}

// Router -> top-k -> experts into tmp_. Offloaded: all resident (a layer view of the pool),
// streaming (wait for the layer's copy, free its buffer after), or decode through the cache
// (the step's ids to the host, ensure, slot ids back, wait for the fetches).
void CudaTransformer::moe_block(int64_t l, int64_t n) {
  const Layer& L = layers_[l];
  int32_t* ids = route_ids_.as<int32_t>();
  cuda::matmul(*blas_, xn_.as<float>(), n, L.router, router_.as<float>());
  cuda::route_topk_softmax(router_.as<float>(), n, c_.n_experts, c_.top_k, c_.norm_topk_prob, ids,
                           route_w_.as<float>());
  cuda::MoeArgs a{.x = xn_.as<float>(),
                  .n = n,
                  .ids = ids,
                  .weights = route_w_.as<float>(),
                  .top_k = c_.top_k,
                  .out = tmp_.as<float>()};
  if (!store_) {
    cuda::moe_experts(*blas_, L.experts, a, *moe_);
  } else if (store_->all_resident()) {
    cuda::moe_experts(*blas_, store_->resident(l), a, *moe_);
  } else if (streaming_) {
    cuda::moe_experts(*blas_, store_->stream_acquire(l), a, *moe_);
    store_->stream_release(l);
  } else {
    const int64_t count = n * c_.top_k;
    host_ids_.resize(count);
    host_slots_.resize(count);
    // Synchronous: also guarantees no earlier kernel still reads a slot this step evicts.
    cuda::copy_to_host(host_ids_.data(), ids, count * sizeof(int32_t));
    store_->ensure(l, host_ids_.data(), count, host_slots_.data());
    cuda::copy_to_device(slot_ids_.data(), host_slots_.data(), count * sizeof(int32_t));
    a.ids = slot_ids_.as<int32_t>();
    cuda::moe_experts(*blas_, store_->pool(), a, *moe_pool_);
  }
}

}  // namespace ft
