// CPU Gated DeltaNet ops: causal conv1d + SiLU, and the gated delta rule (recurrent and
// chunked forms) over the ISA-dispatched dot/axpy kernels, one task per (sequence, head).
#include "ops/delta_net.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/kernels.h"
#include "base/error.h"

namespace ft::ops {

void causal_conv1d_silu(ThreadPool& pool, const float* x, int64_t n, int64_t channels,
                        const float* w, int64_t kernel, float* state, float* out) {
  FT_CHECK(kernel >= 1 && n >= 1, "causal_conv1d_silu: kernel {} n {}", kernel, n);
  const int64_t hist = kernel - 1;
  auto run = [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const float* wc = w + c * kernel;
      float* sc = state + c * hist;
      // Input i of the sequence continued from the state: i < 0 reads the state.
      auto in = [&](int64_t i) { return i >= 0 ? x[i * channels + c] : sc[hist + i]; };
      for (int64_t t = 0; t < n; ++t) {
        float acc = 0.f;
        for (int64_t j = 0; j < kernel; ++j) acc += wc[j] * in(t - hist + j);
        out[t * channels + c] = acc / (1.f + std::exp(-acc));
      }
      // The last kernel - 1 inputs; slot j reads position n - hist + j >= j - hist + 1, so an
      // old state entry is read before it is overwritten.
      for (int64_t j = 0; j < hist; ++j) sc[j] = in(n - hist + j);
    }
  };
  if (n * channels < 65536)
    run(0, channels);
  else
    pool.run(channels, std::max<int64_t>(1, 65536 / (n * kernel)), run);
}

namespace {
struct Head {
  const DeltaRuleArgs& a;
  int64_t h, kh;
  float* S;  // [k_dim, v_dim]
  Head(const DeltaRuleArgs& args, int64_t head)
      : a(args),
        h(head),
        kh(head / (args.n_v_heads / args.n_k_heads)),
        S(args.state + head * args.k_dim * args.v_dim) {}
  const float* q(int64_t t) const { return a.q + t * a.qkv_stride + kh * a.k_dim; }
  const float* k(int64_t t) const { return a.k + t * a.qkv_stride + kh * a.k_dim; }
  const float* v(int64_t t) const { return a.v + t * a.qkv_stride + h * a.v_dim; }
  float g(int64_t t) const { return a.g[t * a.n_v_heads + h]; }
  float beta(int64_t t) const { return a.beta[t * a.n_v_heads + h]; }
  float* out(int64_t t) const { return a.out + (t * a.n_v_heads + h) * a.v_dim; }
};
}  // namespace

// Per token, with S the state before the decay: S^T k and S^T q in one read pass, then
// delta = beta (v - e^g S^T k), out = (e^g S + k delta^T)^T q = e^g S^T q + (k.q) delta, and
// the state update S = e^g S + k delta^T in one read-write pass.
void gated_delta_rule_recurrent(const DeltaRuleArgs& a, int64_t head) {
  const auto& kr = cpu::kernels();
  const Head hd(a, head);
  const int64_t dk = a.k_dim, dv = a.v_dim;
  thread_local std::vector<float> delta;
  delta.resize(dv);
  for (int64_t t = 0; t < a.n; ++t) {
    const float *q = hd.q(t), *k = hd.k(t), *v = hd.v(t);
    const float decay = std::exp(hd.g(t)), beta = hd.beta(t);
    float* o = hd.out(t);
    std::fill(delta.begin(), delta.end(), 0.f);
    std::fill(o, o + dv, 0.f);
    for (int64_t i = 0; i < dk; ++i) {
      kr.axpy(k[i], hd.S + i * dv, delta.data(), dv);  // S^T k
      kr.axpy(q[i], hd.S + i * dv, o, dv);             // S^T q
    }
    const float kq = kr.dot(k, q, dk);
    for (int64_t j = 0; j < dv; ++j) {
      delta[j] = beta * (v[j] - decay * delta[j]);
      o[j] = decay * o[j] + kq * delta[j];
    }
    for (int64_t i = 0; i < dk; ++i) {
      float* row = hd.S + i * dv;
      kr.axpy(decay - 1.f, row, row, dv);  // row *= decay (axpy is elementwise, so x may be y)
      kr.axpy(k[i], delta.data(), row, dv);
    }
  }
}

// Within a chunk starting from state S0, with gamma_t the cumulative log decay since the chunk
// start: delta_t = beta_t (v_t - e^gamma_t S0^T k_t) - beta_t sum_{s<t} e^(gamma_t - gamma_s)
// (k_t.k_s) delta_s (forward substitution), out_t = e^gamma_t S0^T q_t + sum_{s<=t}
// e^(gamma_t - gamma_s) (q_t.k_s) delta_s, and S = e^gamma_last S0 + sum_s e^(gamma_last -
// gamma_s) k_s delta_s^T.
// The chunk's products are small matrix products on the f32 GEMM kernel (y = x w^T), with
// S^T, U^T and the decayed K^T transposed into scratch; only the forward substitution is
// sequential in t.
void gated_delta_rule_chunked(const DeltaRuleArgs& a, int64_t head, int64_t chunk) {
  FT_CHECK(chunk >= 1, "gated_delta_rule_chunked: chunk {}", chunk);
  const auto& kr = cpu::kernels();
  const Head hd(a, head);
  const int64_t dk = a.k_dim, dv = a.v_dim, C = std::min(chunk, a.n);
  thread_local std::vector<float> gam, Kc, Qc, St, U, Ut, O, KK, QK, A, KdT, tmp;
  gam.resize(C);
  for (auto* v : {&Kc, &Qc}) v->resize(C * dk);
  for (auto* v : {&U, &Ut, &O}) v->resize(C * dv);
  for (auto* v : {&KK, &QK, &A}) v->resize(C * C);
  KdT.resize(dk * C);
  St.resize(dv * dk);
  tmp.resize(std::max(C, dk) * dv);
  for (int64_t c0 = 0; c0 < a.n; c0 += C) {
    const int64_t L = std::min(C, a.n - c0);
    float cum = 0.f;
    for (int64_t t = 0; t < L; ++t) {
      gam[t] = (cum += hd.g(c0 + t));
      std::copy_n(hd.k(c0 + t), dk, Kc.data() + t * dk);
      std::copy_n(hd.q(c0 + t), dk, Qc.data() + t * dk);
    }
    for (int64_t i = 0; i < dk; ++i)
      for (int64_t j = 0; j < dv; ++j) St[j * dk + i] = hd.S[i * dv + j];
    kr.gemm_f32(Kc.data(), L, dk, St.data(), 0, dv, U.data(), dv);  // U = K S0
    kr.gemm_f32(Qc.data(), L, dk, St.data(), 0, dv, O.data(), dv);  // O = Q S0
    kr.gemm_f32(Kc.data(), L, dk, Kc.data(), 0, L, KK.data(), L);   // k_t . k_s
    kr.gemm_f32(Qc.data(), L, dk, Kc.data(), 0, L, QK.data(), L);   // q_t . k_s
    for (int64_t t = 0; t < L; ++t) {
      const float e = std::exp(gam[t]), beta = hd.beta(c0 + t);
      const float* v = hd.v(c0 + t);
      float *u = U.data() + t * dv, *o = O.data() + t * dv;
      for (int64_t j = 0; j < dv; ++j) {
        u[j] = beta * (v[j] - e * u[j]);
        o[j] *= e;
      }
      for (int64_t s = 0; s < t; ++s)
        kr.axpy(-beta * std::exp(gam[t] - gam[s]) * KK[t * L + s], U.data() + s * dv, u, dv);
      for (int64_t s = 0; s < L; ++s)
        A[t * L + s] = s <= t ? std::exp(gam[t] - gam[s]) * QK[t * L + s] : 0.f;
    }
    for (int64_t t = 0; t < L; ++t)
      for (int64_t j = 0; j < dv; ++j) Ut[j * L + t] = U[t * dv + j];
    kr.gemm_f32(A.data(), L, L, Ut.data(), 0, dv, tmp.data(), dv);  // intra-chunk: A U
    for (int64_t t = 0; t < L; ++t) {
      float* o = hd.out(c0 + t);
      for (int64_t j = 0; j < dv; ++j) o[j] = O[t * dv + j] + tmp[t * dv + j];
    }
    const float e_last = std::exp(gam[L - 1]);
    for (int64_t s = 0; s < L; ++s) {
      const float w = std::exp(gam[L - 1] - gam[s]);
      for (int64_t i = 0; i < dk; ++i) KdT[i * L + s] = w * Kc[s * dk + i];
    }
    kr.gemm_f32(KdT.data(), dk, L, Ut.data(), 0, dv, tmp.data(), dv);  // sum_s k_s u_s^T
    for (int64_t i = 0; i < dk * dv; ++i) hd.S[i] = e_last * hd.S[i] + tmp[i];
  }
}

void gated_delta_rule(ThreadPool& pool, std::span<const DeltaRuleArgs> seqs) {
  std::vector<int64_t> start(seqs.size() + 1, 0);  // task offset of each sequence
  for (size_t i = 0; i < seqs.size(); ++i) {
    const DeltaRuleArgs& a = seqs[i];
    FT_CHECK(a.n_k_heads > 0 && a.n_v_heads % a.n_k_heads == 0, "delta rule heads {} / {}",
             a.n_v_heads, a.n_k_heads);
    start[i + 1] = start[i] + a.n_v_heads;
  }
  pool.run(start.back(), 1, [&](int64_t b0, int64_t b1) {
    size_t s = std::upper_bound(start.begin(), start.end(), b0) - start.begin() - 1;
    for (int64_t task = b0; task < b1; ++task) {
      while (task >= start[s + 1]) ++s;
      const DeltaRuleArgs& a = seqs[s];
      if (a.n == 1)
        gated_delta_rule_recurrent(a, task - start[s]);
      else
        gated_delta_rule_chunked(a, task - start[s]);
    }
  });
}

}  // namespace ft::ops
