// A loaded Model -> GGUF tensors and metadata (ft quantize, tests): llama.cpp's names and
// layouts (stacked experts, permuted q/k for llama), each matrix in the chosen type.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "io/gguf_writer.h"
#include "model/model.h"

namespace ft {

struct GgufExportOptions {
  // ggml type for the matrices (F32/F16/BF16 or a quant type id); nullopt keeps each
  // tensor's own unquantized type (a bit-exact copy).
  std::optional<uint32_t> type;
  std::string name;  // general.name
};

// The ggml type `target` becomes for a matrix called `name` with rows of `cols` elements:
// routers stay F32; output (and a tied token_embd) becomes Q6_K under K-quant targets; rows that
// are not whole blocks fall back (2-4-bit K-quants and IQ4_XS -> IQ4_NL, Q5_K/Q6_K -> Q8_0, then
// F16), as llama.cpp does for incompatible shapes.
uint32_t gguf_export_type(uint32_t target, const std::string& name, int64_t cols, bool tied);

// Adds the model's metadata and tensors to w. Tensor data is produced from m's weights when w is
// written, so m must outlive w.write(). Throws ft::Error if the family has no GGUF arch.
void gguf_add_model(GgufWriter& w, const Model& m, const GgufExportOptions& o);

}  // namespace ft
