// The shared transformer forward (model/transformer.cpp) on one CUDA device: every weight of a
// loaded Model is uploaded to VRAM once; one sequence's KV cache and all scratch are allocated
// at construction. Plain C++ over the backend/cuda entry points (no CUDA headers). In offload
// mode the routed experts stay in pinned host memory and VRAM holds a slot pool of them
// (experts/gpu_expert_store.h); everything else is resident as before.
#pragma once
#include <memory>
#include <vector>

#include "backend/cuda/cuda_ops.h"
#include "cache/memory_plan.h"
#include "model/model.h"
#include "model/rope.h"

namespace ft {

// cos/sin tables [max_pos, rot_dim / 2] computed exactly as Rope::apply does (float angle
// inv_freq[i] * pos, times the attention factor), so both backends rotate identically.
void rope_tables(const Rope& rope, int64_t max_pos, std::vector<float>& cos,
                 std::vector<float>& sin);

class HostExperts;
class GpuExpertStore;

// Offload mode: experts (not owned; outlive the transformer) and the VRAM slot count, in
// [n_experts, moe_layers * n_experts] (see plan_cuda_offload). The Model's own expert tensors
// are not read (a benchmark model may carry stand-ins).
struct CudaOffload {
  const HostExperts* experts = nullptr;
  int64_t slots = 0;
};

// What an offloaded CudaTransformer(model, capacity, max_chunk) will allocate, as the
// planner's request: resident = every non-expert weight, scratch = activations, workspaces
// and rope tables, KV for `capacity` tokens. plan_memory(request).expert_slots is the slot
// count for the budget; it throws ft::Error with the numbers when the budget cannot work.
MemoryRequest cuda_offload_request(const Model& model, const HostExperts& experts, int64_t capacity,
                                   int64_t max_chunk, size_t budget);

class CudaTransformer {
 public:
  // capacity: positions the KV cache holds; max_chunk: most tokens per pass (longer inputs
  // are chunked). Uploads the weights and allocates everything here, once.
  CudaTransformer(const Model& model, int64_t capacity, int64_t max_chunk = 256,
                  const CudaOffload& offload = {});
  ~CudaTransformer();

  // Transformer::forward's contract on the owned cache: runs ids[0..n) at positions pos0..
  // (the cache must hold 0..pos0-1). logits (host): [n, vocab] when all_logits, else [vocab]
  // for the last token. Throws ft::Error for an id out of range or a cache overflow.
  void forward(const int32_t* ids, int64_t n, int64_t pos0, float* logits, bool all_logits);

  int64_t capacity() const { return capacity_; }
  int64_t max_chunk() const { return max_chunk_; }
  const Model& model() const { return model_; }
  size_t weight_bytes() const { return weight_bytes_; }
  // The expert slot pool in offload mode, else nullptr.
  const GpuExpertStore* expert_store() const { return store_.get(); }

 private:
  // Device views of one layer's weights (nullptr / empty where the layer has none).
  struct Layer {
    const float *attn_norm, *ffn_norm, *q_norm, *k_norm;
    cuda::DeviceMatrix q, k, v, o;
    const float *q_bias, *k_bias, *v_bias, *o_bias;
    cuda::DeviceMatrix gate, up, down, router;  // dense FFN or the router
    cuda::DeviceExperts experts;
  };
  cuda::DeviceMatrix upload(const TensorView& t);
  const float* upload(const std::vector<float>& v);  // nullptr when empty
  cuda::DeviceExperts upload_experts(const std::vector<ExpertWeights>& experts);
  void run_layers(int64_t n, int64_t pos0);
  void attention_block(int64_t layer, int64_t n, int64_t pos0);
  void ffn_block(int64_t layer, int64_t n);
  void moe_block(int64_t layer, int64_t n);
  float* k_cache(int64_t layer) const;
  float* v_cache(int64_t layer) const;

  const Model& model_;
  const ModelConfig& c_;
  int64_t capacity_, max_chunk_;
  Rope rope_;
  size_t weight_bytes_ = 0;
  std::vector<cuda::DeviceBuffer> storage_;  // every uploaded weight
  std::vector<Layer> layers_;
  cuda::DeviceMatrix embed_, lm_head_;
  const float* final_norm_ = nullptr;
  std::unique_ptr<cuda::Blas> blas_;
  std::unique_ptr<cuda::MoeWorkspace> moe_;
  // Offload: the slot pool, the decode workspace over it, and whether this pass streams.
  std::unique_ptr<GpuExpertStore> store_;
  std::unique_ptr<cuda::MoeWorkspace> moe_pool_;
  bool streaming_ = false;
  std::vector<int32_t> host_ids_, host_slots_;  // decode: routed ids and their slots
  cuda::DeviceBuffer kv_k_, kv_v_;              // [n_layers, capacity, kv_dim]
  cuda::DeviceBuffer cos_, sin_;                // [capacity, rot_dim / 2]
  // Scratch, [max_chunk, width]:
  cuda::DeviceBuffer ids_, x_, xn_, q_, k_, v_, att_, tmp_, gate_, up_, router_, route_ids_,
      route_w_, slot_ids_, logits_;
  int64_t logit_rows_ = 0;  // rows of logits_ (lm_head runs in pieces of this many tokens)
};

}  // namespace ft
