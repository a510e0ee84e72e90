// CPU causal GQA attention over the KV cache: one task per (token, head), fp32 softmax,
// optional sliding window and per-head sink logits.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/kernels.h"
#include "ops/ops.h"

namespace ft::ops {

namespace {
// One (token, head) of one sequence.
void attend(const AttentionArgs& a, int64_t t, int64_t h, std::vector<float>& scores) {
  const auto& k = cpu::kernels();
  const int64_t group = a.n_heads / a.n_kv_heads, kv_dim = a.n_kv_heads * a.head_dim;
  const int64_t q_dim = a.n_heads * a.head_dim, g = h / group;
  const int64_t len = a.pos0 + t + 1;  // causal: keys 0..pos inclusive
  const int64_t first = a.window > 0 ? std::max<int64_t>(0, len - a.window) : 0;
  if (static_cast<int64_t>(scores.size()) < len) scores.resize(len);
  const float* q = a.q + t * q_dim + h * a.head_dim;
  float mx = a.sinks ? a.sinks[h] : -INFINITY;
  for (int64_t j = first; j < len; ++j) {
    scores[j] = k.dot(q, a.k_cache + j * kv_dim + g * a.head_dim, a.head_dim) * a.scale;
    mx = std::max(mx, scores[j]);
  }
  float sum = a.sinks ? std::exp(a.sinks[h] - mx) : 0.f;  // the sink takes mass, adds no value
  for (int64_t j = first; j < len; ++j) {
    scores[j] = std::exp(scores[j] - mx);
    sum += scores[j];
  }
  float* out = a.out + t * q_dim + h * a.head_dim;
  std::fill(out, out + a.head_dim, 0.f);
  const float inv = 1.f / sum;
  for (int64_t j = first; j < len; ++j)
    k.axpy(scores[j] * inv, a.v_cache + j * kv_dim + g * a.head_dim, out, a.head_dim);
}
}  // namespace

void attention(ThreadPool& pool, const AttentionArgs& a) {
  attention(pool, std::span<const AttentionArgs>(&a, 1));
}

void attention(ThreadPool& pool, std::span<const AttentionArgs> seqs) {
  std::vector<int64_t> start(seqs.size() + 1, 0);  // task offset of each sequence
  for (size_t i = 0; i < seqs.size(); ++i)
    start[i + 1] = start[i] + seqs[i].n_tokens * seqs[i].n_heads;
  pool.run(start.back(), 1, [&](int64_t b0, int64_t b1) {
    thread_local std::vector<float> scores;
    size_t s = std::upper_bound(start.begin(), start.end(), b0) - start.begin() - 1;
    for (int64_t task = b0; task < b1; ++task) {
      while (task >= start[s + 1]) ++s;
      const AttentionArgs& a = seqs[s];
      const int64_t local = task - start[s];
      attend(a, local / a.n_heads, local % a.n_heads, scores);
    }
  });
}

void route_topk_softmax(const float* logits, int64_t n, int64_t n_experts, int64_t top_k,
                        bool renormalize, int32_t* ids, float* weights) {
  std::vector<float> p(n_experts);
  std::vector<int32_t> order(n_experts);
  for (int64_t t = 0; t < n; ++t) {
    const float* l = logits + t * n_experts;
    float mx = *std::max_element(l, l + n_experts), sum = 0.f;
    for (int64_t e = 0; e < n_experts; ++e) sum += (p[e] = std::exp(l[e] - mx));
    for (int64_t e = 0; e < n_experts; ++e) p[e] /= sum;
    for (int64_t e = 0; e < n_experts; ++e) order[e] = static_cast<int32_t>(e);
    std::partial_sort(order.begin(), order.begin() + top_k, order.end(),
                      [&](int32_t x, int32_t y) { return p[x] > p[y] || (p[x] == p[y] && x < y); });
    float s = 0.f;
    for (int64_t i = 0; i < top_k; ++i) s += p[order[i]];
    for (int64_t i = 0; i < top_k; ++i) {
      ids[t * top_k + i] = order[i];
      weights[t * top_k + i] = renormalize ? p[order[i]] / s : p[order[i]];
    }
  }
}

}  // namespace ft::ops
