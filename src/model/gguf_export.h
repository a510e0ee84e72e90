// A loaded Model -> GGUF tensors and metadata (ft quantize, tests): llama.cpp's names and
// layouts (stacked experts, permuted q/k for llama), each matrix in the chosen type.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "io/gguf_writer.h"
#include "model/model.h"

namespace ft {

// llama.cpp-style K-quant mixtures (ft's own rule after llama.cpp's documented facts): the
// base type (Q4_K / Q5_K) everywhere, Q6_K for attn_v and ffn_down (dense and stacked experts)
// in the layers gguf_more_bits picks, output Q6_K (the K-quant rule of gguf_export_type).
enum class GgufMix { NONE, Q4_K_M, Q5_K_M };

struct GgufExportOptions {
  // ggml type for the matrices (F32/F16/BF16 or a quant type id); nullopt keeps each
  // tensor's own unquantized type (a bit-exact copy). With a mix: its base type (set by
  // gguf_mix_base).
  std::optional<uint32_t> type;
  std::string name;  // general.name
  GgufMix mix = GgufMix::NONE;
  // Tests: a per-tensor target (ggml type id) that replaces the rule above when it returns one.
  std::function<std::optional<uint32_t>(const std::string& name)> type_of;
};

// "q4_k_m" / "q5_k_m" (any case) -> the mixture; NONE for anything else.
GgufMix gguf_mix_parse(std::string_view s);
// The mixture's base type (Q4_K / Q5_K).
uint32_t gguf_mix_base(GgufMix mix);
// Whether layer i of n gets the more-bits type: the first and last eighth of the layers and every
// third layer between them (the quantization-sensitive layers of llama.cpp's use_more_bits).
bool gguf_more_bits(int64_t i, int64_t n);
// The mixture's target for tensor `name` ("blk.N.attn_v.weight", ...) of an n_layers model,
// before gguf_export_type's fallbacks.
uint32_t gguf_mix_type(GgufMix mix, const std::string& name, int64_t n_layers);

// The ggml type `target` becomes for a matrix called `name` with rows of `cols` elements:
// routers stay F32; output (and a tied token_embd) becomes Q6_K under K-quant targets; rows that
// are not whole blocks fall back (2-4-bit K-quants and IQ4_XS -> IQ4_NL, Q5_K/Q6_K -> Q8_0, then
// F16), as llama.cpp does for incompatible shapes.
uint32_t gguf_export_type(uint32_t target, const std::string& name, int64_t cols, bool tied);

// Adds the model's metadata and tensors to w. Tensor data is produced from m's weights when w is
// written, so m must outlive w.write(). Throws ft::Error if the family has no GGUF arch.
void gguf_add_model(GgufWriter& w, const Model& m, const GgufExportOptions& o);

}  // namespace ft
