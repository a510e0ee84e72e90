// Rotary position embedding: inverse frequencies for default/linear/yarn scaling, applied
// NeoX-style (halves) or interleaved (pairs), to the first rotary_dim dims of each head.
#pragma once
#include <cstdint>
#include <vector>

#include "model/config.h"

namespace ft {

class Rope {
 public:
  Rope(const RopeConfig& cfg, int64_t head_dim);
  // Rotates n_heads heads of x (contiguous [n_heads, head_dim]) for position pos.
  void apply(float* x, int64_t n_heads, int64_t pos) const;
  const std::vector<float>& inv_freq() const { return inv_freq_; }
  float attention_factor() const { return attention_factor_; }

 private:
  int64_t head_dim_, rot_dim_;
  bool interleaved_;
  std::vector<float> inv_freq_;  // [rot_dim / 2]
  float attention_factor_ = 1.f;  // scales cos and sin (yarn)
};

}  // namespace ft
