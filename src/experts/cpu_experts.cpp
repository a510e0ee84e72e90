// CpuExperts: grouped expert SwiGLU on the CPU thread pool.
#include <algorithm>

#include "base/error.h"
#include "experts/experts.h"
#include "ops/ops.h"

namespace ft {

CpuExperts::CpuExperts(const ModelWeights& w, int64_t hidden, int64_t expert_dim,
                       ThreadPool& pool, const ExpertActivation& act)
    : w_(w), hidden_(hidden), expert_dim_(expert_dim), act_(act), pool_(pool) {}

void CpuExperts::apply(const ExpertsCall& c) {
  const auto& experts = w_.layers[c.layer].experts;
  const int64_t n_experts = static_cast<int64_t>(experts.size());
  const int64_t slots = c.n_tokens * c.top_k, H = hidden_, I = expert_dim_;
  if (static_cast<int64_t>(slot_of_.size()) < slots) {  // grows to the largest batch seen
    xs_.resize(slots * H);
    gate_.resize(slots * I);
    up_.resize(slots * I);
    down_.resize(slots * H);
    slot_of_.resize(slots);
  }
  // count -> offsets -> scatter: rows of expert e are [offset[e], offset[e+1]).
  std::vector<int64_t> offset(n_experts + 1, 0);
  for (int64_t i = 0; i < slots; ++i) {
    FT_CHECK(c.ids[i] >= 0 && c.ids[i] < n_experts, "expert id {} out of range", c.ids[i]);
    ++offset[c.ids[i] + 1];
  }
  for (int64_t e = 0; e < n_experts; ++e) offset[e + 1] += offset[e];
  std::vector<int64_t> fill(offset.begin(), offset.end() - 1);
  for (int64_t i = 0; i < slots; ++i) {
    int64_t row = fill[c.ids[i]]++;
    slot_of_[i] = static_cast<int32_t>(row);
    std::copy_n(c.x + (i / c.top_k) * H, H, xs_.data() + row * H);
  }
  std::vector<ops::GemmProblem> gate_up, down;
  for (int64_t e = 0; e < n_experts; ++e) {
    int64_t n = offset[e + 1] - offset[e];
    if (n == 0) continue;
    const float* x = xs_.data() + offset[e] * H;
    gate_up.push_back({x, n, &experts[e].gate, gate_.data() + offset[e] * I});
    gate_up.push_back({x, n, &experts[e].up, up_.data() + offset[e] * I});
    down.push_back({gate_.data() + offset[e] * I, n, &experts[e].down, down_.data() + offset[e] * H});
  }
  ops::matmul_grouped(pool_, gate_up);
  const LayerWeights& L = w_.layers[c.layer];
  // Adds bias[e] ([n_experts, width]) to the rows of expert e in y ([slots, width]).
  auto add_bias = [&](const std::vector<float>& bias, float* y, int64_t width) {
    if (bias.empty()) return;
    for (int64_t e = 0; e < n_experts; ++e)
      for (int64_t r = offset[e]; r < offset[e + 1]; ++r)
        for (int64_t j = 0; j < width; ++j) y[r * width + j] += bias[e * width + j];
  };
  add_bias(L.expert_gate_bias, gate_.data(), I);
  add_bias(L.expert_up_bias, up_.data(), I);
  if (act_.kind == ExpertActivation::Kind::SWIGLU_OAI)
    ops::swiglu_oai(pool_, gate_.data(), up_.data(), slots * I, act_.alpha, act_.limit,
                    gate_.data());
  else
    ops::silu_mul(pool_, gate_.data(), up_.data(), slots * I, gate_.data());
  ops::matmul_grouped(pool_, down);
  add_bias(L.expert_down_bias, down_.data(), H);
  for (int64_t t = 0; t < c.n_tokens; ++t) {
    float* o = c.out + t * H;
    std::fill(o, o + H, 0.f);
    for (int64_t k = 0; k < c.top_k; ++k) {
      const float wk = c.weights[t * c.top_k + k];
      const float* d = down_.data() + static_cast<int64_t>(slot_of_[t * c.top_k + k]) * H;
      for (int64_t j = 0; j < H; ++j) o[j] += wk * d[j];
    }
  }
}

}  // namespace ft
