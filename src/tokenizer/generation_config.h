// generation_config.json: the model's sampling defaults and end-of-sequence ids.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ft {

class Tokenizer;

struct GenerationConfig {
  std::vector<int32_t> eos_token_ids;  // "eos_token_id": int or list
  std::optional<int32_t> bos_token_id;
  std::optional<int32_t> pad_token_id;
  std::optional<float> temperature;
  std::optional<float> top_p;
  std::optional<int32_t> top_k;
  std::optional<float> min_p;
  std::optional<float> repetition_penalty;
  std::optional<bool> do_sample;
  std::optional<int32_t> max_new_tokens;

  // Reads dir/generation_config.json; a missing file gives an empty config. A malformed one
  // throws ft::Error naming the file.
  static GenerationConfig load(const std::string& dir);
};

// Ids that end generation: generation_config's eos ids united with the tokenizer's eos, sorted.
std::vector<int32_t> stop_token_ids(const GenerationConfig& gen, const Tokenizer& tok);

}  // namespace ft
