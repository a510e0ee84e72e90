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
  bool adds_biases = true;  // row-parallel biases (o) are added by rank 0 only
};

struct TpPlan {
  int world = 1;
  bool kv_replicated = false;
  std::vector<TpRank> ranks;
};

// Plans `world` ranks for the config, or throws ft::Error in one line naming what does not
// divide (heads, KV heads, widths, quantized blocks) or what is not supported yet.
TpPlan plan_tensor_parallel(const ModelConfig& c, int world);

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

}  // namespace ft
