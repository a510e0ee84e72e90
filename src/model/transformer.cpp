// Transformer forward: embed -> [attention or DeltaNet block, FFN block] x layers -> norm ->
// lm_head.
#include "model/transformer.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/kernels.h"
#include "base/error.h"
#include "ops/ops.h"

namespace ft {

KVCache::KVCache(const ModelConfig& c, int64_t cap)
    : capacity(cap), kv_dim(c.kv_dim()), slot(c.n_layers) {
  int64_t n_attention = 0, n_delta = 0;
  for (int64_t l = 0; l < c.n_layers; ++l) slot[l] = c.is_delta(l) ? n_delta++ : n_attention++;
  k.resize(n_attention * cap * kv_dim);
  v.resize(n_attention * cap * kv_dim);
  if (n_delta > 0) {
    const DeltaNetConfig& d = c.delta;
    conv_size = d.conv_dim() * (d.conv_kernel - 1);
    ssm_size = d.n_v_heads * d.k_head_dim * d.v_head_dim;
    conv.resize(n_delta * conv_size);
    ssm.resize(n_delta * ssm_size);
  }
}

Transformer::Transformer(const Model& model, ThreadPool& pool, int64_t max_chunk)
    : model_(model), c_(model.config()), pool_(pool), max_chunk_(max_chunk),
      rope_(c_.rope, c_.head_dim) {
  const int64_t T = max_chunk_, H = c_.hidden;
  x_.resize(T * H);
  xn_.resize(T * H);
  tmp_.resize(T * H);
  q_.resize(T * c_.q_dim());
  att_.resize(T * c_.q_dim());
  k_.resize(T * c_.kv_dim());
  v_.resize(T * c_.kv_dim());
  gate_.resize(T * c_.ffn_dim);
  up_.resize(T * c_.ffn_dim);
  if (c_.attn_output_gate) {
    q_gate_.resize(T * 2 * c_.q_dim());
    attn_gate_.resize(T * c_.q_dim());
  }
  if (c_.shared_expert_dim > 0) {
    sh_gate_.resize(T * c_.shared_expert_dim);
    sh_up_.resize(T * std::max(c_.shared_expert_dim, H));
    sh_logit_.resize(T);
  }
  if (c_.has_delta()) {
    const DeltaNetConfig& d = c_.delta;
    dn_qkv_.resize(T * d.conv_dim());
    dn_conv_.resize(T * d.conv_dim());
    dn_z_.resize(T * d.value_dim());
    dn_out_.resize(T * d.value_dim());
    dn_b_.resize(T * d.n_v_heads);
    dn_a_.resize(T * d.n_v_heads);
  }
  if (c_.n_experts > 0) {
    router_.resize(T * c_.n_experts);
    route_ids_.resize(T * c_.top_k);
    route_w_.resize(T * c_.top_k);
    experts_ = std::make_unique<CpuExperts>(model.weights(), H, c_.expert_dim, pool,
                                            c_.expert_act);
  }
}

void Transformer::forward(const int32_t* ids, int64_t n, int64_t pos0, KVCache& kv,
                          float* logits, bool all_logits) {
  if (n <= 0) fail("forward: no tokens");
  const int64_t H = c_.hidden, V = c_.vocab_size;
  const auto& w = model_.weights();
  for (int64_t s = 0; s < n; s += max_chunk_) {
    const int64_t m = std::min(max_chunk_, n - s);
    const SeqStep step{.kv = &kv, .ids = ids + s, .n = m, .pos0 = pos0 + s, .logits = nullptr};
    run_layers(std::span<const SeqStep>(&step, 1));
    if (all_logits) {
      ops::rmsnorm(pool_, x_.data(), m, H, w.final_norm.data(), c_.rms_eps, xn_.data());
      ops::matmul(pool_, xn_.data(), m, w.lm_head, logits + s * V);
    } else if (s + m == n) {
      ops::rmsnorm(pool_, x_.data() + (m - 1) * H, 1, H, w.final_norm.data(), c_.rms_eps,
                   xn_.data());
      ops::matmul(pool_, xn_.data(), 1, w.lm_head, logits);
    }
  }
}

void Transformer::forward_batch(std::span<const SeqStep> seqs) {
  const int64_t H = c_.hidden, V = c_.vocab_size;
  const auto& w = model_.weights();
  run_layers(seqs);
  // Final norm + lm_head only for the rows whose logits are wanted.
  int64_t rows = 0, t = 0;
  for (const auto& s : seqs) {
    t += s.n;
    if (s.logits) std::copy_n(x_.data() + (t - 1) * H, H, tmp_.data() + (rows++) * H);
  }
  if (rows == 0) return;
  ops::rmsnorm(pool_, tmp_.data(), rows, H, w.final_norm.data(), c_.rms_eps, xn_.data());
  if (logits_.empty()) logits_.resize(max_chunk_ * V);
  ops::matmul(pool_, xn_.data(), rows, w.lm_head, logits_.data());
  rows = 0;
  for (const auto& s : seqs)
    if (s.logits) std::copy_n(logits_.data() + (rows++) * V, V, s.logits);
}

void Transformer::run_layers(std::span<const SeqStep> seqs) {
  int64_t n = 0;
  for (const auto& s : seqs) {
    if (s.n <= 0) fail("forward: a sequence has no tokens");
    if (s.pos0 + s.n > s.kv->capacity)
      fail("sequence of {} tokens exceeds the context size {}", s.pos0 + s.n, s.kv->capacity);
    for (int64_t i = 0; i < s.n; ++i)
      if (s.ids[i] < 0 || s.ids[i] >= c_.vocab_size)
        fail("token id {} is out of range [0, {})", s.ids[i], c_.vocab_size);
    n += s.n;
  }
  if (n > max_chunk_) fail("batch of {} tokens exceeds the chunk size {}", n, max_chunk_);
  if (c_.has_delta()) {  // recurrent state: a sequence continues where it stopped, or restarts
    for (const auto& s : seqs)
      if (s.pos0 != 0 && s.pos0 != s.kv->recurrent_len)
        fail("the recurrent state holds {} tokens; a step cannot start at position {}",
             s.kv->recurrent_len, s.pos0);
    for (const auto& s : seqs)
      if (s.pos0 == 0) {
        std::fill(s.kv->conv.begin(), s.kv->conv.end(), 0.f);
        std::fill(s.kv->ssm.begin(), s.kv->ssm.end(), 0.f);
      }
  }
  ids_.clear();
  for (const auto& s : seqs) ids_.insert(ids_.end(), s.ids, s.ids + s.n);
  ops::embed(model_.weights().embed, ids_.data(), n, x_.data());
  for (int64_t l = 0; l < c_.n_layers; ++l) {
    if (c_.is_delta(l))
      delta_net_block(l, seqs, n);
    else
      attention_block(l, seqs, n);
    ffn_block(l, n);
  }
  for (const auto& s : seqs) s.kv->recurrent_len = s.pos0 + s.n;
}

void Transformer::attention_block(int64_t l, std::span<const SeqStep> seqs, int64_t n) {
  const auto& L = model_.weights().layers[l];
  const int64_t H = c_.hidden, qd = c_.q_dim(), kvd = c_.kv_dim(), hd = c_.head_dim;
  const auto& k = cpu::kernels();
  ops::rmsnorm(pool_, x_.data(), n, H, L.attn_norm.data(), c_.rms_eps, xn_.data());
  const bool gated = c_.attn_output_gate;
  ops::matmul(pool_, xn_.data(), n, L.q.w, gated ? q_gate_.data() : q_.data(),
              L.q.bias.empty() ? nullptr : L.q.bias.data());
  if (gated)  // q_proj rows per head: [query | gate]
    for (int64_t t = 0; t < n; ++t)
      for (int64_t h = 0; h < c_.n_heads; ++h) {
        const float* src = q_gate_.data() + (t * c_.n_heads + h) * 2 * hd;
        std::copy_n(src, hd, q_.data() + t * qd + h * hd);
        std::copy_n(src + hd, hd, attn_gate_.data() + t * qd + h * hd);
      }
  ops::matmul(pool_, xn_.data(), n, L.k.w, k_.data(), L.k.bias.empty() ? nullptr : L.k.bias.data());
  ops::matmul(pool_, xn_.data(), n, L.v.w, v_.data(), L.v.bias.empty() ? nullptr : L.v.bias.data());
  std::vector<ops::AttentionArgs> att;
  int64_t t = 0;
  for (const auto& s : seqs) {
    att.push_back({.q = q_.data() + t * qd, .n_tokens = s.n, .pos0 = s.pos0,
                   .k_cache = s.kv->k_at(l, 0), .v_cache = s.kv->v_at(l, 0),
                   .n_heads = c_.n_heads, .n_kv_heads = c_.n_kv_heads, .head_dim = hd,
                   .scale = 1.f / std::sqrt(static_cast<float>(hd)), .out = att_.data() + t * qd,
                   .window = c_.window(l), .sinks = L.sinks.empty() ? nullptr : L.sinks.data()});
    for (int64_t i = 0; i < s.n; ++i, ++t) {
      float* q = q_.data() + t * qd;
      float* kk = k_.data() + t * kvd;
      float* vv = v_.data() + t * kvd;
      if (c_.qk_norm == QkNorm::PER_HEAD) {
        for (int64_t h = 0; h < c_.n_heads; ++h)
          k.rmsnorm(q + h * hd, L.q_norm.data(), c_.rms_eps, hd, q + h * hd);
        for (int64_t h = 0; h < c_.n_kv_heads; ++h)
          k.rmsnorm(kk + h * hd, L.k_norm.data(), c_.rms_eps, hd, kk + h * hd);
      } else if (c_.qk_norm == QkNorm::FULL) {
        k.rmsnorm(q, L.q_norm.data(), c_.rms_eps, qd, q);
        k.rmsnorm(kk, L.k_norm.data(), c_.rms_eps, kvd, kk);
      }
      if (c_.clip_qkv > 0) {
        auto clip = [&](float* p, int64_t m) {
          for (int64_t j = 0; j < m; ++j) p[j] = std::clamp(p[j], -c_.clip_qkv, c_.clip_qkv);
        };
        clip(q, qd);
        clip(kk, kvd);
        clip(vv, kvd);
      }
      rope_.apply(q, c_.n_heads, s.pos0 + i);
      rope_.apply(kk, c_.n_kv_heads, s.pos0 + i);
      std::copy_n(kk, kvd, s.kv->k_at(l, s.pos0 + i));
      std::copy_n(vv, kvd, s.kv->v_at(l, s.pos0 + i));
    }
  }
  ops::attention(pool_, att);
  if (gated)
    for (int64_t i = 0; i < n * qd; ++i) att_[i] /= 1.f + std::exp(-attn_gate_[i]);
  ops::matmul(pool_, att_.data(), n, L.o.w, tmp_.data(), L.o.bias.empty() ? nullptr : L.o.bias.data());
  for (int64_t i = 0; i < n * H; ++i) x_[i] += tmp_[i];
}

void Transformer::ffn_block(int64_t l, int64_t n) {
  const auto& L = model_.weights().layers[l];
  const int64_t H = c_.hidden;
  ops::rmsnorm(pool_, x_.data(), n, H, L.ffn_norm.data(), c_.rms_eps, xn_.data());
  if (c_.layer_is_moe[l]) {
    ops::matmul(pool_, xn_.data(), n, L.router, router_.data(),
                L.router_bias.empty() ? nullptr : L.router_bias.data());
    ops::route_topk_softmax(router_.data(), n, c_.n_experts, c_.top_k, c_.norm_topk_prob,
                            route_ids_.data(), route_w_.data());
    experts_->apply({.layer = l, .x = xn_.data(), .n_tokens = n, .ids = route_ids_.data(),
                     .weights = route_w_.data(), .top_k = c_.top_k, .out = tmp_.data()});
    if (!L.shared_gate.empty()) shared_expert(l, n);
  } else {
    ops::matmul(pool_, xn_.data(), n, L.gate, gate_.data());
    ops::matmul(pool_, xn_.data(), n, L.up, up_.data());
    ops::silu_mul(pool_, gate_.data(), up_.data(), n * c_.ffn_dim, gate_.data());
    ops::matmul(pool_, gate_.data(), n, L.down, tmp_.data());
  }
  for (int64_t i = 0; i < n * H; ++i) x_[i] += tmp_[i];
}

// Shared expert (Qwen3-Next, Qwen3.5): tmp_ += sigmoid(x . g) * SwiGLU_shared(x), x = xn_.
void Transformer::shared_expert(int64_t l, int64_t n) {
  const auto& L = model_.weights().layers[l];
  const int64_t H = c_.hidden, S = c_.shared_expert_dim;
  const ops::GemmProblem proj[] = {{xn_.data(), n, &L.shared.gate, sh_gate_.data()},
                                   {xn_.data(), n, &L.shared.up, sh_up_.data()},
                                   {xn_.data(), n, &L.shared_gate, sh_logit_.data()}};
  ops::matmul_grouped(pool_, proj);
  ops::silu_mul(pool_, sh_gate_.data(), sh_up_.data(), n * S, sh_gate_.data());
  ops::matmul(pool_, sh_gate_.data(), n, L.shared.down, sh_up_.data());
  for (int64_t t = 0; t < n; ++t) {
    const float g = 1.f / (1.f + std::exp(-sh_logit_[t]));
    for (int64_t j = 0; j < H; ++j) tmp_[t * H + j] += g * sh_up_[t * H + j];
  }
}

}  // namespace ft
