// gpt-oss expert tensors -> the canonical per-expert gate/up/down views and the layer's expert
// biases (model/loader.cpp calls it for families with WeightNames::oss_experts).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "model/weights.h"

namespace ft {

// p: the experts' prefix ("model.layers.3.mlp.experts."). Reads gate_up_proj [E, H, 2I] and
// down_proj [E, I, H] (F32/F16/BF16, transposed and de-interleaved into [I, H] / [H, I] copies
// of the same dtype), or their MXFP4 _blocks/_scales (repacked into ggml MXFP4 rows, never
// dequantized), plus gate_up_proj_bias [E, 2I] and down_proj_bias [E, H]. Copies live in
// `owned`. Bad dtypes or shapes are an ft::Error naming the file and tensor.
void load_oss_experts(const SafetensorsSet& files, const std::string& p, int64_t E, int64_t I,
                      int64_t H, std::vector<std::vector<uint8_t>>& owned, LayerWeights& L);

}  // namespace ft
