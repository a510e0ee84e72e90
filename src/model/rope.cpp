// RoPE tables follow transformers' modeling_rope_utils (computed in float32 as it does).
#include "model/rope.h"

#include <algorithm>
#include <cmath>

namespace ft {

namespace {
std::vector<float> base_inv_freq(double theta, int64_t dim) {
  std::vector<float> f(dim / 2);
  for (int64_t i = 0; i < dim / 2; ++i)
    f[i] = 1.0f / std::pow(static_cast<float>(theta),
                           static_cast<float>(2 * i) / static_cast<float>(dim));
  return f;
}

double yarn_mscale(double scale, double m) { return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; }

// YaRN: blend interpolated and extrapolated frequencies with a linear ramp over the dims
// whose wavelength falls between beta_fast and beta_slow rotations of the original context.
void yarn(const RopeConfig& c, int64_t dim, std::vector<float>& inv_freq, float& attn_factor) {
  const double base = c.theta, factor = c.factor;
  auto correction_dim = [&](double rotations) {
    return (dim * std::log(c.original_max_pos / (rotations * 2 * M_PI))) / (2 * std::log(base));
  };
  double low = correction_dim(c.beta_fast), high = correction_dim(c.beta_slow);
  if (c.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;
  inv_freq.resize(dim / 2);
  for (int64_t i = 0; i < dim / 2; ++i) {
    float pos_freq = std::pow(static_cast<float>(base), static_cast<float>(2 * i) / dim);
    float extra = 1.0f / pos_freq, inter = 1.0f / (static_cast<float>(factor) * pos_freq);
    float ramp = std::clamp(static_cast<float>((i - low) / (high - low)), 0.0f, 1.0f);
    float extra_w = 1.0f - ramp;
    inv_freq[i] = inter * (1 - extra_w) + extra * extra_w;
  }
  if (c.attention_factor > 0)
    attn_factor = static_cast<float>(c.attention_factor);
  else if (c.mscale > 0 && c.mscale_all_dim > 0)
    attn_factor = static_cast<float>(yarn_mscale(factor, c.mscale) /
                                     yarn_mscale(factor, c.mscale_all_dim));
  else
    attn_factor = static_cast<float>(yarn_mscale(factor, 1.0));
}
}  // namespace

Rope::Rope(const RopeConfig& cfg, int64_t head_dim)
    : head_dim_(head_dim),
      rot_dim_(static_cast<int64_t>(static_cast<double>(head_dim) * cfg.partial_rotary_factor)),
      interleaved_(cfg.interleaved) {
  switch (cfg.type) {
    case RopeConfig::Type::DEFAULT: inv_freq_ = base_inv_freq(cfg.theta, rot_dim_); break;
    case RopeConfig::Type::LINEAR:
      inv_freq_ = base_inv_freq(cfg.theta, rot_dim_);
      for (auto& f : inv_freq_) f /= static_cast<float>(cfg.factor);
      break;
    case RopeConfig::Type::YARN: yarn(cfg, rot_dim_, inv_freq_, attention_factor_); break;
  }
}

void Rope::apply(float* x, int64_t n_heads, int64_t pos) const {
  const int64_t half = rot_dim_ / 2;
  float cs[512], sn[512];
  for (int64_t i = 0; i < half; ++i) {
    float angle = inv_freq_[i] * static_cast<float>(pos);
    cs[i] = std::cos(angle) * attention_factor_;
    sn[i] = std::sin(angle) * attention_factor_;
  }
  for (int64_t h = 0; h < n_heads; ++h) {
    float* v = x + h * head_dim_;
    for (int64_t i = 0; i < half; ++i) {
      int64_t a = interleaved_ ? 2 * i : i, b = interleaved_ ? 2 * i + 1 : i + half;
      float x1 = v[a], x2 = v[b];
      v[a] = x1 * cs[i] - x2 * sn[i];
      v[b] = x2 * cs[i] + x1 * sn[i];
    }
  }
}

}  // namespace ft
