// The experts seam: an MoE layer asks for "these tokens x these expert ids x these weights" and
// an Experts implementation decides where each expert runs (CPU now; GPU cache / offload later).
#pragma once
#include <cstdint>
#include <vector>

#include "backend/cpu/thread_pool.h"
#include "model/config.h"
#include "model/weights.h"

namespace ft {

struct ExpertsCall {
  int64_t layer;
  const float* x;         // [n_tokens, hidden]
  int64_t n_tokens;
  const int32_t* ids;     // [n_tokens, top_k] expert ids
  const float* weights;   // [n_tokens, top_k] routing weights
  int64_t top_k;
  float* out;             // [n_tokens, hidden], overwritten with sum_k w_k * expert_k(x)
};

class Experts {
 public:
  virtual ~Experts() = default;
  virtual void apply(const ExpertsCall& call) = 0;
};

// All experts computed on the CPU from the canonical weights: tokens grouped by expert
// (count -> offsets -> gather), one grouped GEMM for gate+up of every active expert, SiLU*up,
// one grouped GEMM for down, then a weighted gather back in top-k order (deterministic).
class CpuExperts : public Experts {
 public:
  // act: the experts' activation (gpt-oss's clamped SwiGLU); the layer's expert biases
  // (LayerWeights::expert_*_bias) are added when present.
  CpuExperts(const ModelWeights& w, int64_t hidden, int64_t expert_dim, ThreadPool& pool,
             const ExpertActivation& act = {});
  void apply(const ExpertsCall& call) override;

 private:
  const ModelWeights& w_;
  int64_t hidden_, expert_dim_;
  ExpertActivation act_;
  ThreadPool& pool_;
  std::vector<float> xs_, gate_, up_, down_;  // [slots, hidden|expert_dim]
  std::vector<int32_t> slot_of_;              // [n_tokens * top_k] -> row in xs_
};

}  // namespace ft
