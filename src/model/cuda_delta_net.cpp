// CudaTransformer's hybrid-model pieces (Qwen3-Next, Qwen3.5/3.6): the Gated DeltaNet mixer
// with per-sequence recurrent state buffers, the sigmoid-gated shared expert, the state and KV
// import/export for the prefix cache. Mirrors model/delta_net_block.cpp and
// Transformer::shared_expert op for op.
#include <algorithm>
#include <cmath>

#include "base/env.h"
#include "base/error.h"
#include "base/half.h"
#include "model/cuda_transformer.h"

namespace ft {

namespace {
cuda::DeviceBuffer floats(int64_t count) {
  return cuda::DeviceBuffer(std::max<int64_t>(1, count) * sizeof(float));
}

// Passes of at least this many tokens run the chunked delta rule (measured: hybrid_benchmark).
constexpr int64_t k_delta_chunked_min = 64;
// In-pass state captures a pass may hold (prefix-cache anchors inside one prefill chunk).
constexpr int32_t k_state_captures = 8;

int64_t delta_layers(const ModelConfig& c) {
  int64_t n = 0;
  for (int64_t l = 0; l < c.n_layers; ++l) n += c.is_delta(l);
  return n;
}

// Floats of one sequence's recurrent state: conv then ssm of every DeltaNet layer.
int64_t conv_floats(const ModelConfig& c) { return c.delta.conv_dim() * (c.delta.conv_kernel - 1); }
int64_t ssm_floats(const ModelConfig& c) {
  return c.delta.n_v_heads * c.delta.k_head_dim * c.delta.v_head_dim;
}

// One gemv_multi launch when the matrices share a dtype, else one each (same results).
void gemv_outs(const float* x, int64_t n, const cuda::GemvOut* outs, int count,
               const cuda::GemvNorm* norm) {
  bool same = true;
  for (int i = 1; i < count; ++i) same = same && outs[i].w.dtype == outs[0].w.dtype;
  if (same) return cuda::gemv_multi(x, n, outs, count, norm);
  cuda::gemv_multi(x, n, outs, 1, norm);  // the norm once; later GEMVs read its x_out
  for (int i = 1; i < count; ++i) cuda::gemv_multi(norm ? norm->x_out : x, n, outs + i, 1);
}
}  // namespace

int64_t attention_layers(const ModelConfig& c) { return c.n_layers - delta_layers(c); }

size_t hybrid_resident_bytes(const LayerWeights& L) {
  const DeltaNetWeights& D = L.delta;
  size_t b = 0;
  for (const TensorView* t : {&D.qkv, &D.z, &D.b, &D.a, &D.out, &L.shared.gate, &L.shared.up,
                              &L.shared.down, &L.shared_gate})
    b += t->nbytes();
  for (const auto* v : {&D.conv, &D.a_log, &D.dt_bias, &D.norm}) b += v->size() * sizeof(float);
  return b;
}

size_t hybrid_scratch_bytes(const ModelConfig& c, int64_t T, int max_seqs) {
  size_t f = 0;  // floats
  if (c.attn_output_gate) f += T * 2 * c.q_dim();
  if (c.has_delta()) {
    const DeltaNetConfig& d = c.delta;
    f += T * (2 * d.conv_dim() + 2 * d.value_dim() + 2 * d.n_v_heads);
    f += static_cast<size_t>(std::max(1, max_seqs) + k_state_captures) * delta_layers(c) *
         (conv_floats(c) + ssm_floats(c));
  }
  if (c.shared_expert_dim > 0) f += T * (2 * c.shared_expert_dim + 1);
  return f * sizeof(float);
}

void CudaTransformer::upload_hybrid(const LayerWeights& L) {
  HybridLayer h;
  const DeltaNetWeights& D = L.delta;
  if (!D.qkv.empty()) {
    h.qkv = upload(D.qkv), h.z = upload(D.z), h.b = upload(D.b), h.a = upload(D.a);
    h.out = upload(D.out);
    h.conv = upload(D.conv), h.a_log = upload(D.a_log), h.dt_bias = upload(D.dt_bias);
    h.norm = upload(D.norm);
  }
  if (!L.shared_gate.empty()) {
    h.sh_gate = upload(L.shared.gate), h.sh_up = upload(L.shared.up);
    h.sh_down = upload(L.shared.down), h.sh_logit = upload(L.shared_gate);
  }
  hybrid_layers_.push_back(h);
}

void CudaTransformer::alloc_hybrid(int64_t T) {
  kv_slot_.resize(c_.n_layers);
  int64_t n_attention = 0;
  n_delta_ = 0;
  for (int64_t l = 0; l < c_.n_layers; ++l)
    kv_slot_[l] = c_.is_delta(l) ? n_delta_++ : n_attention++;
  rec_len_.assign(max_seqs_, 0);
  if (c_.attn_output_gate) qg_ = floats(T * 2 * c_.q_dim());
  if (c_.shared_expert_dim > 0) {
    sh_g_ = floats(T * c_.shared_expert_dim), sh_u_ = floats(T * c_.shared_expert_dim);
    sh_logit_ = floats(T);
  }
  if (n_delta_ == 0) return;
  const DeltaNetConfig& d = c_.delta;
  FT_CHECK(d.conv_kernel >= 1 && d.conv_kernel <= 8 && d.k_head_dim <= 128,
           "CudaTransformer: DeltaNet conv kernel {} (<= 8) / key head dim {} (<= 128)",
           d.conv_kernel, d.k_head_dim);
  conv_size_ = conv_floats(c_), ssm_size_ = ssm_floats(c_);
  state_stride_ = n_delta_ * (conv_size_ + ssm_size_);
  state_ = floats(max_seqs_ * state_stride_);
  cuda::memset_async(state_.data(), 0, state_.bytes());
  cuda::synchronize();
  dn_qkv_ = floats(T * d.conv_dim()), dn_conv_ = floats(T * d.conv_dim());
  dn_z_ = floats(T * d.value_dim()), dn_out_ = floats(T * d.value_dim());
  dn_b_ = floats(T * d.n_v_heads), dn_a_ = floats(T * d.n_v_heads);
  // FT_STATE_CAPTURE=0: chunks end at anchors (A/B runs)
  delta_chunked_ = cuda::gated_delta_rule_chunked_supported(d.k_head_dim);
  n_captures_ = env_on("FT_STATE_CAPTURE") && delta_chunked_ ? k_state_captures : 0;
  if (n_captures_ > 0) captures_ = floats(n_captures_ * state_stride_);
}

float* CudaTransformer::conv_state(int64_t l) const {
  return state_.as<float>() + kv_slot_[l] * conv_size_;
}
float* CudaTransformer::ssm_state(int64_t l) const {
  return state_.as<float>() + n_delta_ * conv_size_ + kv_slot_[l] * ssm_size_;
}

void CudaTransformer::begin_recurrent(std::span<const CudaSeqStep> steps) {
  if (n_delta_ == 0) return;
  for (const CudaSeqStep& s : steps)
    if (s.pos0 != 0 && s.pos0 != rec_len_[s.seq])
      fail("the recurrent state of sequence {} holds {} tokens; a step cannot start at position {}",
           s.seq, rec_len_[s.seq], s.pos0);
  step_starts_.assign(1, 0);
  mark_at_.clear(), step_seqs_.clear();
  for (const CudaSeqStep& s : steps) {
    for (int32_t i = 0; i < s.n_marks; ++i) {
      const int64_t m = s.marks[i];
      if (m <= s.pos0 || m >= s.pos0 + s.n || (i > 0 && m <= s.marks[i - 1]))
        fail("state capture mark {} is not inside the step [{}, {}) in order", m, s.pos0,
             s.pos0 + s.n);
      mark_at_.push_back(static_cast<int32_t>(step_starts_.back() + m - s.pos0));
    }
    step_starts_.push_back(step_starts_.back() + s.n);
    step_seqs_.push_back(s.seq);
  }
  if (static_cast<int32_t>(mark_at_.size()) > n_captures_)
    fail("{} state capture marks in one pass; this runner holds {}", mark_at_.size(), n_captures_);
  for (const CudaSeqStep& s : steps) {
    if (s.pos0 == 0)
      cuda::memset_async(state_.as<float>() + s.seq * state_stride_, 0,
                         state_stride_ * sizeof(float));
    rec_len_[s.seq] = s.pos0 + s.n;
  }
}

// Gated DeltaNet mixer on the tokens of the pass (their sequences in seq_): projections (the
// input norm fused into the GEMVs for small passes), conv + SiLU, q/k L2 norm and beta/g, the
// delta rule, gated RMSNorm, output projection added into x_.
void CudaTransformer::delta_net_block(int64_t l, int64_t n) {
  const Layer& L = layers_[l];
  const HybridLayer& D = hybrid_layers_[l];
  const DeltaNetConfig& d = c_.delta;
  const int64_t H = c_.hidden, cd = d.conv_dim(), K = d.key_dim(), nv = d.n_v_heads;
  float *x = x_.as<float>(), *xn = xn_.as<float>(), *qkv = dn_qkv_.as<float>(),
        *conv = dn_conv_.as<float>(), *z = dn_z_.as<float>(), *b = dn_b_.as<float>(),
        *a = dn_a_.as<float>(), *out = dn_out_.as<float>();
  const bool small = n <= cuda::k_gemv_max_tokens;
  if (small) {
    const cuda::GemvOut proj[4] = {
        {.w = D.qkv, .y = qkv}, {.w = D.z, .y = z}, {.w = D.b, .y = b}, {.w = D.a, .y = a}};
    const cuda::GemvNorm norm{.w = L.attn_norm, .eps = c_.rms_eps, .x_out = xn};
    gemv_outs(x, n, proj, 4, &norm);
  } else {
    cuda::rmsnorm(x, n, H, L.attn_norm, c_.rms_eps, xn);
    cuda::matmul(*blas_, xn, n, D.qkv, qkv);
    cuda::matmul(*blas_, xn, n, D.z, z);
    cuda::matmul(*blas_, xn, n, D.b, b);
    cuda::matmul(*blas_, xn, n, D.a, a);
  }
  const int32_t* seq = seq_.as<int32_t>();
  if (!mark_at_.empty()) capture_conv(l, qkv);  // before the conv advances the state
  cuda::causal_conv1d_silu({.x = qkv,
                            .out = conv,
                            .n = n,
                            .channels = cd,
                            .w = D.conv,
                            .kernel = d.conv_kernel,
                            .state = conv_state(l),
                            .seq_stride = state_stride_,
                            .seq = seq});
  cuda::delta_prep({.qkv = conv,
                    .n = n,
                    .stride = cd,
                    .n_k_heads = d.n_k_heads,
                    .k_dim = d.k_head_dim,
                    .key_dim = K,
                    .q_scale = 1.f / std::sqrt(static_cast<float>(d.k_head_dim)),
                    .b = b,
                    .a = a,
                    .a_log = D.a_log,
                    .dt_bias = D.dt_bias,
                    .n_v_heads = nv});
  const cuda::DeltaRuleArgs rule{.q = conv,
                                 .k = conv + K,
                                 .v = conv + 2 * K,
                                 .qkv_stride = cd,
                                 .g = a,
                                 .beta = b,
                                 .n = n,
                                 .n_k_heads = d.n_k_heads,
                                 .n_v_heads = nv,
                                 .k_dim = d.k_head_dim,
                                 .v_dim = d.v_head_dim,
                                 .state = ssm_state(l),
                                 .seq_stride = state_stride_,
                                 .seq = seq,
                                 .out = out};
  // Prefill passes take the chunked form (chunks of 64 tokens); decode and small passes (and
  // graph captures) the recurrent form, as does every pass where the chunked form's tiles do
  // not fit the device's shared memory (delta_chunked_).
  if (!mark_at_.empty()) {
    cuda::StateMarks marks{
        .at = mark_at_,
        .dst = captures_.as<float>() + n_delta_ * conv_size_ + kv_slot_[l] * ssm_size_,
        .dst_stride = state_stride_};
    for (size_t i = 0; i < mark_at_.size(); ++i) marks.slot.push_back(static_cast<int32_t>(i));
    cuda::gated_delta_rule_chunked(rule, step_starts_, marks);
  } else if (n >= k_delta_chunked_min && delta_chunked_)
    cuda::gated_delta_rule_chunked(rule, step_starts_);
  else
    cuda::gated_delta_rule(rule);
  cuda::gated_rmsnorm(out, z, n * nv, d.v_head_dim, D.norm, c_.rms_eps);
  tp_zero_residual(n);  // tensor parallel: ranks > 0 add only their partial
  if (small) {
    const cuda::GemvOut o{.w = D.out, .y = x, .accumulate = true};
    cuda::gemv_multi(out, n, &o, 1);
  } else {
    cuda::matmul(*blas_, out, n, D.out, tmp_.as<float>());
    cuda::add_inplace(x, tmp_.as<float>(), n * H);
  }
}

// Shared expert (after the routed experts, which left xn_ = the FFN-normed input):
// x_ += sigmoid(xn_ . g) * down(silu(gate xn_) * up xn_).
void CudaTransformer::shared_expert(int64_t l, int64_t n) {
  const HybridLayer& D = hybrid_layers_[l];
  if (!D.sh_logit.data) return;
  const int64_t H = c_.hidden, S = c_.shared_expert_dim;
  float *xn = xn_.as<float>(), *g = sh_g_.as<float>(), *u = sh_u_.as<float>(),
        *logit = sh_logit_.as<float>(), *tmp = tmp_.as<float>();
  if (n <= cuda::k_gemv_max_tokens) {
    const cuda::GemvOut proj[3] = {
        {.w = D.sh_gate, .y = g}, {.w = D.sh_up, .y = u}, {.w = D.sh_logit, .y = logit}};
    gemv_outs(xn, n, proj, 3, nullptr);
    cuda::silu_mul(g, u, n * S, g);
    const cuda::GemvOut down{.w = D.sh_down, .y = tmp};
    cuda::gemv_multi(g, n, &down, 1);
  } else {
    cuda::matmul(*blas_, xn, n, D.sh_gate, g);
    cuda::matmul(*blas_, xn, n, D.sh_up, u);
    cuda::matmul(*blas_, xn, n, D.sh_logit, logit);
    cuda::silu_mul(g, u, n * S, g);
    cuda::matmul(*blas_, g, n, D.sh_down, tmp);
  }
  cuda::add_sigmoid_scaled(x_.as<float>(), tmp, logit, n, H);
}

// ---- state and KV import/export

size_t CudaTransformer::state_bytes_per_seq() const {
  return static_cast<size_t>(state_stride_) * sizeof(float);
}

void CudaTransformer::read_state(int seq, float* host) {
  FT_CHECK(seq >= 0 && seq < max_seqs_, "read_state: sequence {}", seq);
  if (state_stride_ == 0) return;
  cuda::StreamScope scope(stream_);
  cuda::copy_to_host(host, state_.as<float>() + seq * state_stride_, state_bytes_per_seq());
}

void CudaTransformer::write_state(int seq, const float* host, int64_t recurrent_len) {
  FT_CHECK(seq >= 0 && seq < max_seqs_ && recurrent_len >= 0 && recurrent_len <= capacity_,
           "write_state: sequence {} length {}", seq, recurrent_len);
  if (state_stride_ == 0) return;
  cuda::StreamScope scope(stream_);
  cuda::copy_to_device(state_.as<float>() + seq * state_stride_, host, state_bytes_per_seq());
  cuda::stream_synchronize();
  rec_len_[seq] = recurrent_len;
}

int64_t CudaTransformer::recurrent_len(int seq) const {
  FT_CHECK(seq >= 0 && seq < max_seqs_, "recurrent_len: sequence {}", seq);
  return rec_len_[seq];
}

void CudaTransformer::read_kv(int seq, int64_t pos0, int64_t n, float* k, float* v) {
  FT_CHECK(seq >= 0 && seq < max_seqs_ && pos0 >= 0 && n >= 0 && pos0 + n <= capacity_,
           "read_kv: sequence {} positions [{}, {})", seq, pos0, pos0 + n);
  if (n == 0) return;
  cuda::StreamScope scope(stream_);
  const int64_t kvd = c_.kv_dim(), es = static_cast<int64_t>(kv_elem_bytes());
  std::vector<uint16_t> h(kv_dtype_ == DType::BF16 ? n * kvd : 0);  // bf16 staging
  auto down = [&](float* dst, const void* cache) {
    const char* src = static_cast<const char*>(cache) + pos0 * kvd * es;
    if (h.empty()) return cuda::copy_to_host(dst, src, n * kvd * sizeof(float));
    cuda::copy_to_host(h.data(), src, n * kvd * sizeof(uint16_t));
    for (int64_t i = 0; i < n * kvd; ++i) dst[i] = bf16_to_f32(h[i]);
  };
  for (int64_t l = 0, a = 0; l < c_.n_layers; ++l) {
    if (c_.is_delta(l)) continue;
    down(k + a * n * kvd, k_cache(seq, l));
    down(v + a * n * kvd, v_cache(seq, l));
    ++a;
  }
}

void CudaTransformer::write_kv(int seq, int64_t pos0, int64_t n, const float* k, const float* v) {
  FT_CHECK(seq >= 0 && seq < max_seqs_ && pos0 >= 0 && n >= 0 && pos0 + n <= capacity_,
           "write_kv: sequence {} positions [{}, {})", seq, pos0, pos0 + n);
  if (n == 0) return;
  cuda::StreamScope scope(stream_);
  const int64_t kvd = c_.kv_dim(), es = static_cast<int64_t>(kv_elem_bytes());
  std::vector<uint16_t> h(kv_dtype_ == DType::BF16 ? n * kvd : 0);  // bf16 staging
  auto up = [&](void* cache, const float* src) {
    char* dst = static_cast<char*>(cache) + pos0 * kvd * es;
    if (h.empty()) return cuda::copy_to_device(dst, src, n * kvd * sizeof(float));
    for (int64_t i = 0; i < n * kvd; ++i) h[i] = f32_to_bf16(src[i]);
    cuda::copy_to_device(dst, h.data(), n * kvd * sizeof(uint16_t));  // synchronous: h reused
  };
  for (int64_t l = 0, a = 0; l < c_.n_layers; ++l) {
    if (c_.is_delta(l)) continue;
    up(k_cache(seq, l), k + a * n * kvd);
    up(v_cache(seq, l), v + a * n * kvd);
    ++a;
  }
  cuda::stream_synchronize();
}

}  // namespace ft
