// The Gated DeltaNet mixer block of the shared transformer (Qwen3-Next, Qwen3.5/3.6 linear
// attention layers), following transformers' Qwen3NextGatedDeltaNet / Qwen3_5MoeGatedDeltaNet:
//   qkv, z, b, a = x W_qkv, x W_z, x W_b, x W_a        (x = input-normed hidden)
//   q|k|v = silu(causal_conv1d(qkv))                  (per-sequence conv state)
//   q, k = l2norm per head; q *= k_head_dim^-1/2
//   beta = sigmoid(b), g = -exp(A_log) * softplus(a + dt_bias)
//   o = gated delta rule(q, k, v, g, beta)            (per-sequence recurrent state)
//   x += W_out (rmsnorm(o) * w * silu(z))             (per value head)
#include <cmath>

#include "backend/cpu/kernels.h"
#include "model/transformer.h"
#include "ops/delta_net.h"
#include "ops/ops.h"

namespace ft {

namespace {
float softplus(float x) { return x > 20.f ? x : std::log1p(std::exp(x)); }

void l2norm(float* x, int64_t n) {
  float ss = 0.f;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const float inv = 1.f / std::sqrt(ss + 1e-6f);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}
}  // namespace

void Transformer::delta_net_block(int64_t l, std::span<const SeqStep> seqs, int64_t n) {
  const auto& L = model_.weights().layers[l];
  const DeltaNetWeights& D = L.delta;
  const DeltaNetConfig& d = c_.delta;
  const int64_t H = c_.hidden, cd = d.conv_dim(), K = d.key_dim(), V = d.value_dim();
  const int64_t nv = d.n_v_heads, dk = d.k_head_dim, dv = d.v_head_dim;
  const auto& kr = cpu::kernels();

  ops::rmsnorm(pool_, x_.data(), n, H, L.attn_norm.data(), c_.rms_eps, xn_.data());
  const ops::GemmProblem proj[] = {{xn_.data(), n, &D.qkv, dn_qkv_.data()},
                                   {xn_.data(), n, &D.z, dn_z_.data()},
                                   {xn_.data(), n, &D.b, dn_b_.data()},
                                   {xn_.data(), n, &D.a, dn_a_.data()}};
  ops::matmul_grouped(pool_, proj);

  int64_t t0 = 0;
  for (const auto& s : seqs) {
    ops::causal_conv1d_silu(pool_, dn_qkv_.data() + t0 * cd, s.n, cd, D.conv.data(), d.conv_kernel,
                            s.kv->conv_at(l), dn_conv_.data() + t0 * cd);
    t0 += s.n;
  }
  const float q_scale = 1.f / std::sqrt(static_cast<float>(dk));
  for (int64_t t = 0; t < n; ++t) {
    float* row = dn_conv_.data() + t * cd;  // [q | k | v]
    for (int64_t h = 0; h < d.n_k_heads; ++h) {
      float* q = row + h * dk;
      l2norm(q, dk);
      for (int64_t i = 0; i < dk; ++i) q[i] *= q_scale;
      l2norm(row + K + h * dk, dk);
    }
    for (int64_t h = 0; h < nv; ++h) {
      float& b = dn_b_[t * nv + h];
      float& a = dn_a_[t * nv + h];
      b = 1.f / (1.f + std::exp(-b));                          // beta
      a = -std::exp(D.a_log[h]) * softplus(a + D.dt_bias[h]);  // g
    }
  }

  std::vector<ops::DeltaRuleArgs> rule;
  t0 = 0;
  for (const auto& s : seqs) {
    const float* row = dn_conv_.data() + t0 * cd;
    rule.push_back({.q = row,
                    .k = row + K,
                    .v = row + 2 * K,
                    .qkv_stride = cd,
                    .g = dn_a_.data() + t0 * nv,
                    .beta = dn_b_.data() + t0 * nv,
                    .n = s.n,
                    .n_k_heads = d.n_k_heads,
                    .n_v_heads = nv,
                    .k_dim = dk,
                    .v_dim = dv,
                    .state = s.kv->ssm_at(l),
                    .out = dn_out_.data() + t0 * V});
    t0 += s.n;
  }
  ops::gated_delta_rule(pool_, rule);

  // Gated RMSNorm per value head: rmsnorm(o) * w * silu(z).
  for (int64_t i = 0; i < n * nv; ++i) {
    float* o = dn_out_.data() + i * dv;
    const float* z = dn_z_.data() + i * dv;
    kr.rmsnorm(o, D.norm.data(), c_.rms_eps, dv, o);
    for (int64_t j = 0; j < dv; ++j) o[j] *= z[j] / (1.f + std::exp(-z[j]));
  }
  ops::matmul(pool_, dn_out_.data(), n, D.out, tmp_.data());
  for (int64_t i = 0; i < n * H; ++i) x_[i] += tmp_[i];
}

}  // namespace ft
