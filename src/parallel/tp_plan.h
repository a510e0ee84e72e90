// Tensor-parallel sharding plan (CPU, no CUDA): which attention heads, dense-MLP columns and
// expert columns each rank owns, and the rank's shard of a loaded Model (Megatron layout:
// q/k/v and gate/up row slices = column-parallel, o and down column slices = row-parallel,
// so each block ends in one all-reduce of the partial hidden states).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"

namespace ft {

struct TpRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

// One rank's share. kv_heads: when world > n_kv_heads every rank holds one KV head, replicated
// on world / n_kv_heads ranks (vLLM's rule); else n_kv_heads / world of them.
struct TpRank {
  int rank = 0, world = 1;
  TpRange q_heads, kv_heads;
  TpRange ffn;     // dense MLP intermediate columns
  TpRange expert;  // routed experts' intermediate columns (every rank owns a slice of each)
  TpRange own_experts;  // whole-expert plans: the routed experts held at full width, else empty
  TpRange vocab;        // vocab-split plans: the lm_head rows (logits) computed here, else empty
  bool adds_biases = true;  // row-parallel biases (o, the experts' down) are added by rank 0 only
  TpRange shared;           // the shared expert's intermediate columns
  TpRange delta_k, delta_v;  // DeltaNet key heads and their value heads (whole groups)
};

// Column granularity of the sliced widths: a block-quantized matrix splits only on its block
// boundaries (FP8 128x128 tiles: 128 columns and rows), so the widths go out in whole blocks,
// as evenly as they can when the blocks do not divide by the ranks. 1: plain types.
struct TpAlign {
  int64_t ffn = 1, expert = 1, shared = 1;
};
// The granularity the model's matrices need (the widest block over the layers).
TpAlign tp_align(const ModelWeights& w);

struct TpPlan {
  int world = 1;
  bool kv_replicated = false;
  std::vector<TpRank> ranks;
};

// Plans `world` ranks for the config, or throws ft::Error in one line naming what does not
// divide (heads, KV heads, widths, quantized blocks) or what is not supported yet.
TpPlan plan_tensor_parallel(const ModelConfig& c, int world, const TpAlign& align = {});
// The plan for a loaded model: its config with the granularity of its weights.
TpPlan plan_tensor_parallel(const Model& m, int world);

// The rank's config: its heads and widths (hidden, vocab, layers, routing unchanged).
ModelConfig shard_config(const ModelConfig& c, const TpRank& r);

// The rank's shard of `model` as a Model: row slices are views into `model` (which must
// outlive the shard), column slices are copies owned by the shard. Embedding, lm_head, norms
// and routers are shared views (replicated). Throws ft::Error for a model the plan refuses.
std::unique_ptr<Model> shard_model(const Model& model, const TpPlan& plan, int rank);

// Columns [c0, c1) of a 2-D or stacked matrix [.., rows, cols] as a new tensor in `owned`
// (block-quantized rows: c0 and c1 on block boundaries).
TensorView slice_columns(const TensorView& t, int64_t c0, int64_t c1,
                         std::vector<std::vector<uint8_t>>& owned);

// ---- Whole-expert ownership (parallel/tp_experts.cpp; --tp-experts)
// SLICE: every rank holds a column slice of every expert (the plan above). WHOLE: rank r holds
// experts [E*r/N, E*(r+1)/N) at full width; the router stays replicated, each rank computes
// only its experts' share of the top-k and the FFN all-reduce sums them. AUTO: the caller's
// rule (choose_tp_experts).
enum class TpExperts { AUTO, SLICE, WHOLE };
TpExperts parse_tp_experts(const std::string& s);  // auto | slice | whole, else ft::Error
const char* tp_experts_name(TpExperts e);
// AUTO resolved for decode from the measured rule (tp_experts.cpp); SLICE / WHOLE unchanged.
TpExperts choose_tp_experts(TpExperts requested, const ModelConfig& c, int world, bool offload);
// The plan with WHOLE experts: heads and dense widths as plan_tensor_parallel, expert widths
// unsplit (expert = [0, expert_dim)), own_experts set. Throws ft::Error (no routed experts,
// fewer experts than ranks, or what plan_tensor_parallel refuses).
TpPlan plan_whole_experts(const ModelConfig& c, int world, const TpAlign& align = {});
// The plan with `experts` (SLICE or WHOLE), for a config or a loaded model (its granularity).
TpPlan plan_tensor_parallel(const ModelConfig& c, int world, TpExperts experts);
TpPlan plan_tensor_parallel(const Model& m, int world, TpExperts experts);
// A whole-expert shard's layer: d's experts become the rank's own (views of L's, no copies)
// and gpt-oss's expert biases their rows (every rank adds its experts' down bias).
void own_expert_layer(const ModelConfig& c, const LayerWeights& L, const TpRank& r,
                      LayerWeights& d);

// ---- Vocab-split lm_head (parallel/tp_vocab.cpp; TpOptions::vocab_split)
// Rank r computes the logits of vocabulary rows [r * P, min(V, (r + 1) * P)) with
// P = tp_vocab_pad(V, world) = ceil(V / world) (the all-gather moves P per rank; the last
// rank's tail is padding). The embedding stays replicated.
int64_t tp_vocab_pad(int64_t vocab, int world);
TpRange tp_vocab_range(int64_t vocab, int world, int rank);
// Sets every rank's vocab range; ft::Error when there are fewer rows than ranks.
void split_vocab(TpPlan& p, int64_t vocab);

}  // namespace ft
