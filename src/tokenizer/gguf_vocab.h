// Tokenizers in GGUF metadata (tokenizer.ggml.*): read into our Tokenizer (byte-level BPE
// "gpt2" with its pre-tokenizer chosen by tokenizer.ggml.pre; SentencePiece-style "llama" with
// scores) and written from a Hugging Face tokenizer directory (GGUF export, tests).
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "io/gguf.h"
#include "io/gguf_writer.h"

namespace ft {

// The tokenizer.json document equivalent to the file's tokenizer.ggml.* metadata (Tokenizer::
// from_json builds it). Throws ft::Error naming the key for a missing or malformed vocabulary,
// an unknown tokenizer.ggml.model or pre-tokenizer.
nlohmann::json gguf_tokenizer_json(const GgufSet& g);

// Special ids from metadata: bos/eos (-1 when absent) and whether encode adds bos/eos.
struct GgufSpecialTokens {
  int32_t bos = -1, eos = -1;
  bool add_bos = false, add_eos = false;
};
GgufSpecialTokens gguf_special_tokens(const GgufSet& g);

// tokenizer.chat_template and the bos/eos token strings it may use; false when the file has no
// chat template.
bool gguf_chat_template(const std::string& path, std::string* source, std::string* bos,
                        std::string* eos);

// Writes tokenizer.ggml.* (+ tokenizer.chat_template) for the HF tokenizer in dir
// (tokenizer.json, tokenizer_config.json, chat_template.jinja). Byte-level BPE becomes "gpt2"
// with a pre name for its regex (gpt2, qwen2, llama-bpe); Metaspace/byte-fallback BPE becomes
// "llama" with scores = -merge rank. Throws ft::Error for a tokenizer GGUF cannot express.
void gguf_add_hf_tokenizer(GgufWriter& w, const std::string& dir);

}  // namespace ft
