// Backend-neutral ops the model blocks call. Activations are f32 row-major [n, dim];
// weights are TensorViews in F32/F16/BF16. The CPU implementation is ops/cpu_ops.cpp.
#pragma once
#include <cstdint>
#include <span>

#include "backend/cpu/thread_pool.h"
#include "base/tensor.h"

namespace ft::ops {

// y[n, rows] = x[n, cols] W^T (+ bias[rows]); w: [rows, cols].
void matmul(ThreadPool& pool, const float* x, int64_t n, const TensorView& w, float* y,
            const float* bias = nullptr);

// Several independent matmuls scheduled as one parallel region (MoE experts).
struct GemmProblem {
  const float* x;  // [n, w.cols]
  int64_t n;
  const TensorView* w;
  float* y;  // [n, w.rows]
};
void matmul_grouped(ThreadPool& pool, std::span<const GemmProblem> problems);

// y[i] = rmsnorm(x[i]) * w for each of n rows of width dim (y may alias x).
void rmsnorm(ThreadPool& pool, const float* x, int64_t n, int64_t dim, const float* w, float eps,
             float* y);

// y = silu(g) * u elementwise over n*dim (y may alias g).
void silu_mul(ThreadPool& pool, const float* g, const float* u, int64_t count, float* y);

// gpt-oss's clamped SwiGLU: g' = min(g, limit), u' = clamp(u, -limit, limit),
// y = g' * sigmoid(alpha * g') * (u' + 1), elementwise (y may alias g).
void swiglu_oai(ThreadPool& pool, const float* g, const float* u, int64_t count, float alpha,
                float limit, float* y);

// out[i, :] = embedding row ids[i] as f32.
void embed(const TensorView& table, const int32_t* ids, int64_t n, float* out);

}  // namespace ft::ops

namespace ft::ops {

// Causal grouped-query attention of n new tokens at positions pos0.. over a KV cache that
// already holds their keys/values. q/out: [n, n_heads * head_dim]; caches: [>= pos0+n, kv_dim].
struct AttentionArgs {
  const float* q;
  int64_t n_tokens, pos0;
  const float* k_cache;
  const float* v_cache;
  int64_t n_heads, n_kv_heads, head_dim;
  float scale;
  float* out;
  int64_t window = 0;            // > 0: a query at p sees keys (p - window, p] (sliding window)
  const float* sinks = nullptr;  // [n_heads]: a logit per head added to the softmax denominator
};
void attention(ThreadPool& pool, const AttentionArgs& a);
// Several sequences' attention as one parallel region (a batch step).
void attention(ThreadPool& pool, std::span<const AttentionArgs> seqs);

// Softmax over each row of logits [n, n_experts], then the top_k largest (ties: lower index
// first) with their probabilities, renormalised to sum 1 when `renormalize`.
void route_topk_softmax(const float* logits, int64_t n, int64_t n_experts, int64_t top_k,
                        bool renormalize, int32_t* ids, float* weights);

}  // namespace ft::ops
