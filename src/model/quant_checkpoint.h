// Quantized Hugging Face checkpoints -> quantized TensorViews: FP8 e4m3 with 128x128 block
// scales (config quantization_config {quant_method: fp8, weight_block_size: [128, 128]}; the
// -FP8 Qwen and DeepSeek releases), ModelOpt NVFP4 and ModelOpt per-tensor FP8
// (hf_quant_config.json or quantization_config {quant_method: modelopt}).
#pragma once
#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/tensor.h"
#include "io/safetensors.h"

namespace ft {

// The quantization a checkpoint declares: "" (none), "fp8" (128x128 blocks), "modelopt:NVFP4",
// "modelopt:FP8". A method, algorithm or block size this engine cannot read is an ft::Error
// naming what is supported. `config` is config.json; hf_quant_config.json is read from dir.
std::string checkpoint_quant_scheme(const std::string& dir, const nlohmann::json& config);

// `name` is a "<module>.weight" tensor whose canonical (unpacked) shape is `shape` (2-D matrix
// or 3-D stacked experts). Returns false when it is stored as plain F32/F16/BF16. Otherwise *out
// is the quantized view, told apart by its sibling tensors:
//   FP8 block:  weight F8_E4M3 + weight_scale_inv [.., ceil(r/128), ceil(c/128)] (F32 stays a
//               view of the file; BF16/F16 scales become f32 in `owned`) -> F8_E4M3_B128
//   FP8 tensor: weight F8_E4M3 + weight_scale (one value, ModelOpt FP8) -> F8_E4M3_B128 with a
//               uniform scale plane in `owned`
//   NVFP4:      weight U8 [.., r, c/2] + weight_scale F8_E4M3 [.., r, c/16] + weight_scale_2
//               (one f32) -> NVFP4 rows repacked into `owned`, global_scale = weight_scale_2
// The weight bytes of FP8 stay zero-copy. Bad dtypes or shapes are an ft::Error naming the file.
bool quantized_view(const SafetensorsSet& files, const std::string& name,
                    std::initializer_list<int64_t> shape, std::vector<std::vector<uint8_t>>& owned,
                    TensorView* out);

// A quantized matrix as plain f32 in `owned` (embedding tables: the lookup reads floats).
TensorView dequantized_f32(const TensorView& q, std::vector<std::vector<uint8_t>>& owned);

}  // namespace ft
