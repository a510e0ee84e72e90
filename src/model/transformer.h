// The shared MoE transformer forward (attention block + dense-or-MoE FFN block) used by every
// family whose layers are "pre-norm attention, pre-norm FFN". Runs on the CPU thread pool.
#pragma once
#include <memory>
#include <span>
#include <vector>

#include "backend/cpu/thread_pool.h"
#include "experts/experts.h"
#include "model/model.h"
#include "model/rope.h"

namespace ft {

// Per-sequence state, owned by the caller, sized from the config once. Attention layers keep
// k/v [n_attention_layers, capacity, kv_dim] f32. DeltaNet layers keep a recurrent state
// instead: conv [n_delta_layers, conv_dim, kernel - 1] (the last inputs, oldest first) and
// ssm [n_delta_layers, n_v_heads, k_head_dim, v_head_dim] f32, which summarise the first
// recurrent_len tokens (a sequence only grows; position 0 starts it afresh).
struct KVCache {
  KVCache(const ModelConfig& c, int64_t capacity);
  int64_t capacity, kv_dim;
  std::vector<float> k, v;
  std::vector<int64_t> slot;  // [n_layers]: the layer's index among layers of its kind
  int64_t conv_size = 0, ssm_size = 0;  // floats per DeltaNet layer
  std::vector<float> conv, ssm;
  int64_t recurrent_len = 0;
  float* k_at(int64_t layer, int64_t pos) {
    return k.data() + (slot[layer] * capacity + pos) * kv_dim;
  }
  float* v_at(int64_t layer, int64_t pos) {
    return v.data() + (slot[layer] * capacity + pos) * kv_dim;
  }
  float* conv_at(int64_t layer) { return conv.data() + slot[layer] * conv_size; }
  float* ssm_at(int64_t layer) { return ssm.data() + slot[layer] * ssm_size; }
  size_t bytes() const { return (k.size() + v.size() + conv.size() + ssm.size()) * sizeof(float); }
};

// One sequence's part of a batched step: n tokens at positions pos0.. appended to its cache.
struct SeqStep {
  KVCache* kv;
  const int32_t* ids;
  int64_t n;
  int64_t pos0;
  float* logits;  // [vocab] for the last of the n tokens, or nullptr when not needed
};

class Transformer {
 public:
  // max_chunk: most tokens processed in one pass (longer prompts are chunked). All scratch is
  // allocated here, once.
  Transformer(const Model& model, ThreadPool& pool, int64_t max_chunk = 256);

  // Runs tokens ids[0..n) at positions pos0.. (kv must already hold positions 0..pos0-1).
  // logits: [n, vocab] when all_logits, else [1, vocab] for the last token.
  // Throws ft::Error if an id is out of range or the sequence would overflow the cache.
  void forward(const int32_t* ids, int64_t n, int64_t pos0, KVCache& kv, float* logits,
               bool all_logits);

  // One step over several sequences (continuous batching): all their tokens go through the
  // matmuls and experts together, attention stays per sequence. Total tokens <= max_chunk().
  void forward_batch(std::span<const SeqStep> seqs);

  int64_t max_chunk() const { return max_chunk_; }
  const Model& model() const { return model_; }
  ThreadPool& pool() { return pool_; }

 private:
  // Runs the layers over the tokens of seqs (concatenated), leaving hidden states in x_.
  void run_layers(std::span<const SeqStep> seqs);
  void attention_block(int64_t layer, std::span<const SeqStep> seqs, int64_t n);
  // Gated DeltaNet mixer (model/delta_net_block.cpp): projections, causal conv, delta rule per
  // sequence state, gated RMSNorm, output projection.
  void delta_net_block(int64_t layer, std::span<const SeqStep> seqs, int64_t n);
  void ffn_block(int64_t layer, int64_t n);
  void shared_expert(int64_t layer, int64_t n);  // adds the gated shared expert into tmp_

  const Model& model_;
  const ModelConfig& c_;
  ThreadPool& pool_;
  int64_t max_chunk_;
  Rope rope_;
  std::unique_ptr<Experts> experts_;
  // Scratch, [max_chunk, width]:
  std::vector<float> x_, xn_, q_, k_, v_, att_, tmp_, gate_, up_, router_, route_w_;
  std::vector<float> q_gate_, attn_gate_;  // gated attention: [max_chunk, 2 * q_dim], [.., q_dim]
  std::vector<float> sh_gate_, sh_up_, sh_logit_;  // shared expert [max_chunk, S | max(S, H) | 1]
  // DeltaNet: projections [max_chunk, conv_dim | value_dim | n_v_heads x2], conv output,
  // delta-rule output [max_chunk, value_dim].
  std::vector<float> dn_qkv_, dn_z_, dn_b_, dn_a_, dn_conv_, dn_out_;
  std::vector<int32_t> route_ids_, ids_;
  std::vector<float> logits_;  // [max_chunk, vocab] rows of a batch step
};

}  // namespace ft
