// Single-sequence generation: prefill the prompt in one pass, then decode token by token.
#pragma once
#include <functional>
#include <vector>

#include "engine/sampler.h"
#include "model/transformer.h"

namespace ft {

struct GenerateParams {
  int64_t max_new_tokens = 16;
  SamplingParams sampling;
  std::vector<int64_t> stop_ids;  // generation ends after emitting one of these
};

struct GenerateStats {
  int64_t prompt_tokens = 0, new_tokens = 0;
  double prefill_s = 0, decode_s = 0;
};

// Returns the new ids. on_token (optional) sees each id as it is produced; returning false stops.
std::vector<int32_t> generate(Transformer& tf, const std::vector<int32_t>& prompt,
                              const GenerateParams& p, GenerateStats* stats = nullptr,
                              const std::function<bool(int32_t)>& on_token = {});

}  // namespace ft
