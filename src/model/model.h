// A loaded model: config + immutable weights (views into mmapped files or an owned arena).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "model/config.h"
#include "model/family.h"
#include "model/weights.h"

namespace ft {

class Model {
 public:
  // Loads an HF checkpoint directory (config.json + safetensors). Every tensor's dtype and
  // shape is checked; errors are ft::Error naming the file and the fix.
  static std::unique_ptr<Model> load(const std::string& dir);
  // Loads a .gguf file (or the first of its split parts): model/gguf_loader.cpp. load() calls
  // it for paths ending in .gguf.
  static std::unique_ptr<Model> load_gguf(const std::string& path);
  // Loads a fast-load checkpoint directory (model/ft_checkpoint.h: one large O_DIRECT read);
  // load() calls it for a directory holding ft_checkpoint.json. progress(done, total) bytes.
  static std::unique_ptr<Model> load_ftc(
      const std::string& dir, const std::function<void(size_t, size_t)>& progress = {});

  // A model with random bf16 weights made in memory (benchmarks; no file). Hybrid configs get
  // DeltaNet layers, gated attention and shared experts. one_expert: every routed expert of
  // every layer views one set of matrices (a stand-in where the experts are offloaded anyway
  // and only their bytes matter: 35B shapes in a few GB).
  static std::unique_ptr<Model> synthetic(const ModelConfig& config, uint64_t seed,
                                          bool one_expert = false);
  // A model over weights built elsewhere (a tensor-parallel shard: parallel/tp_plan.h). Its
  // views may point into another Model, which must outlive this one.
  static std::unique_ptr<Model> from_weights(const ModelConfig& config, ModelWeights weights,
                                             const std::string& dir);

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  const std::string& dir() const { return dir_; }
  // Bytes of all matrices (what a full pass over the weights reads).
  size_t matrix_bytes() const;

 private:
  Model() = default;
  std::string dir_;
  ModelConfig config_;
  std::unique_ptr<SafetensorsSet> files_;
  std::vector<std::vector<uint16_t>> arena_;  // synthetic weights
  std::shared_ptr<void> storage_;             // GGUF: mapped files + tensors rebuilt at load;
                                              // fast-load: the weight buffer
  ModelWeights weights_;
};

// The shape of a synthetic Qwen3-MoE-style model (benchmarks): every layer MoE, per-head qk-norm.
struct SyntheticShape {
  int64_t layers, experts, top_k, hidden, expert_dim, heads, kv_heads, head_dim, vocab;
};
ModelConfig synthetic_moe_config(const SyntheticShape& s);

// Resolves checkpoint names into the canonical weights (model/loader.cpp).
ModelWeights load_weights(const ModelConfig& c, const WeightNames& names,
                          const SafetensorsSet& files);

}  // namespace ft
