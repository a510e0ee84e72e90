// GGUF architectures <-> our model families, and GGUF's tensor names. Adding an architecture is
// one line in k_gguf_archs (model/gguf_arch.cpp) plus, when its family reads config fields the
// common GGUF keys do not cover, a few lines in its hf_config hook.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/gguf.h"
#include "model/config.h"

namespace ft {

struct GgufArch {
  const char* arch;        // general.architecture ("qwen3moe")
  const char* model_type;  // our family ("qwen3_moe")
  // convert_hf_to_gguf permutes q/k rows of this arch for GPT-J-style (interleaved) RoPE;
  // the loader undoes it and the writer applies it.
  bool permuted_qk;
  // Expert weights renormalised after top-k when <arch>.expert_weights_norm is absent.
  bool norm_topk_default;
  // Adds the family's own config.json fields (family configure() reads them) from metadata.
  void (*hf_config)(const GgufSet& g, const std::string& arch, nlohmann::json& j);
  // The FFN block's pre-norm (llama.cpp's gpt-oss calls it post_attention_norm).
  const char* ffn_norm = "ffn_norm";
  // YaRN of this arch rounds its ramp bounds (transformers' truncate; gpt-oss does not).
  bool yarn_truncate = true;
};

// nullptr when unsupported; `n_experts` picks between same-named archs (llama = mixtral only
// with experts).
const GgufArch* find_gguf_arch(const std::string& arch);
const GgufArch* gguf_arch_for_model_type(const std::string& model_type);
std::string supported_gguf_archs();

// GGUF tensor names (llama.cpp's gguf-py constants).
namespace gguf_names {
inline const char* const embed = "token_embd.weight";
inline const char* const final_norm = "output_norm.weight";
inline const char* const lm_head = "output.weight";
// Per-layer: "blk.{l}." + one of these (+ ".weight" / ".bias").
inline const char *const attn_norm = "attn_norm", *const q = "attn_q", *const k = "attn_k",
                         *const v = "attn_v", *const o = "attn_output",
                         *const q_norm = "attn_q_norm", *const k_norm = "attn_k_norm",
                         *const ffn_norm = "ffn_norm", *const router = "ffn_gate_inp",
                         *const gate_exps = "ffn_gate_exps", *const up_exps = "ffn_up_exps",
                         *const down_exps = "ffn_down_exps", *const gate = "ffn_gate",
                         *const up = "ffn_up", *const down = "ffn_down",
                         *const sinks = "attn_sinks";  // [n_heads] (gpt-oss)
// gpt-oss's extra tensors: ffn_gate_inp.bias [E], ffn_{gate,up}_exps.bias [E, I] and
// ffn_down_exps.bias [E, H] (suffix "bias" on the names above).
std::string layer(int64_t l, const char* name, const char* suffix = "weight");
}  // namespace gguf_names

// Reorders the rows of each head of a [n_heads * head_dim, cols] matrix between HF order
// (halves) and llama.cpp's interleaved order. `to_gguf` permutes; otherwise undoes it.
// row_bytes: bytes of one row in the matrix's own type.
void permute_qk_rows(const char* src, char* dst, int64_t n_heads, int64_t head_dim,
                     size_t row_bytes, bool to_gguf);

// ModelConfig from GGUF metadata and tensor shapes (family configure() applied, validated).
ModelConfig gguf_model_config(const GgufSet& g, const GgufArch** arch_out = nullptr);

}  // namespace ft
