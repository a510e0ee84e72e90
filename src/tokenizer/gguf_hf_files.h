// A GGUF file's tokenizer written as Hugging Face files (tokenizer.json, tokenizer_config.json
// with the chat template and bos/eos flags), for checkpoints converted from GGUF.
#pragma once
#include <string>

namespace ft {

// Writes out_dir/tokenizer.json and out_dir/tokenizer_config.json from gguf's tokenizer.ggml.*
// keys; Tokenizer::load(out_dir) then encodes as Tokenizer::load(gguf). ft::Error on failure.
void write_gguf_tokenizer_as_hf(const std::string& gguf, const std::string& out_dir);

}  // namespace ft
