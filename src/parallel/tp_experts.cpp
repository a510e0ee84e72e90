// Whole-expert tensor parallelism (--tp-experts whole): rank r owns routed experts
// [E*r/N, E*(r+1)/N) at full width instead of a column slice of every expert. The router is
// replicated (every rank picks the same top-k); a rank's routing writes the ids of other ranks'
// experts as -1 (cuda::RouteLocal), so its experts layer computes only its own share and the
// FFN block's all-reduce sums the shares, as it sums the slices' partials.
#include <algorithm>

#include "base/error.h"
#include "parallel/tp_plan.h"

namespace ft {

TpExperts parse_tp_experts(const std::string& s) {
  if (s == "auto") return TpExperts::AUTO;
  if (s == "slice") return TpExperts::SLICE;
  if (s == "whole") return TpExperts::WHOLE;
  fail("--tp-experts '{}': expected auto, slice or whole", s);
}

const char* tp_experts_name(TpExperts e) {
  switch (e) {
    case TpExperts::AUTO: return "auto";
    case TpExperts::SLICE: return "slice";
    case TpExperts::WHOLE: return "whole";
  }
  return "?";
}

// The rule for decode, measured by tests/cuda/tp_bench on two H200s (48-layer Qwen3-30B-A3B
// shapes, bf16, batch 1, graphs; 2026-11-30): slices decode faster, resident and offloaded
// alike (all resident: slice 255.9 tok/s, whole 245.9; 16 GiB per GPU: 159.9 vs 151.2). A
// token's top-8 lands unevenly on whole-expert ranks (the busier rank has ~5 of the 8 on
// average) while every slice rank reads exactly 8 half experts; the step waits for the busier
// rank. Whole experts win prefill (4096 tokens: 6618 vs 6028 tok/s resident, 6441 vs 5967 at
// 16 GiB: full-width GEMMs, and over many tokens the load evens out), so `whole` stays
// available for prefill-heavy serving. Slices need the expert width to split over the GPUs;
// where it does not, whole experts are the way to run at all. `offload` does not change it.
TpExperts choose_tp_experts(TpExperts requested, const ModelConfig& c, int world, bool offload) {
  (void)offload;  // the same rule measured resident and offloaded
  if (requested != TpExperts::AUTO) return requested;
  if (world > 1 && c.n_experts >= world && c.expert_dim % world != 0) return TpExperts::WHOLE;
  return TpExperts::SLICE;
}

TpPlan plan_whole_experts(const ModelConfig& c, int world, const TpAlign& align) {
  if (c.n_experts <= 0)
    fail("--tp-experts whole: {} has no routed experts (use --tp-experts slice)", c.model_type);
  if (c.n_experts < world)
    fail("--tp-experts whole: {} experts are fewer than {} GPUs (use --tp-experts slice)",
         c.n_experts, world);
  ModelConfig unsplit = c;
  unsplit.expert_dim = 0;  // expert widths are not split: any width goes
  TpPlan p = plan_tensor_parallel(unsplit, world, align);
  for (TpRank& r : p.ranks) {
    r.expert = {0, c.expert_dim};
    r.own_experts = {c.n_experts * r.rank / world, c.n_experts * (r.rank + 1) / world};
  }
  return p;
}

TpPlan plan_tensor_parallel(const ModelConfig& c, int world, TpExperts experts) {
  FT_CHECK(experts != TpExperts::AUTO, "plan_tensor_parallel: resolve --tp-experts auto first");
  return experts == TpExperts::WHOLE ? plan_whole_experts(c, world)
                                     : plan_tensor_parallel(c, world);
}

TpPlan plan_tensor_parallel(const Model& m, int world, TpExperts experts) {
  FT_CHECK(experts != TpExperts::AUTO, "plan_tensor_parallel: resolve --tp-experts auto first");
  return experts == TpExperts::WHOLE ? plan_whole_experts(m.config(), world, tp_align(m.weights()))
                                     : plan_tensor_parallel(m, world);
}

void own_expert_layer(const ModelConfig& c, const LayerWeights& L, const TpRank& r,
                      LayerWeights& d) {
  const TpRange o = r.own_experts;
  if (L.experts.empty()) return;
  FT_CHECK(o.begin >= 0 && o.end <= static_cast<int64_t>(L.experts.size()) && o.size() > 0,
           "own_expert_layer: experts {}..{} of {}", o.begin, o.end, L.experts.size());
  d.experts.assign(L.experts.begin() + o.begin, L.experts.begin() + o.end);
  // gpt-oss biases: rows of the own experts ([E, I] gate/up, [E, hidden] down); each rank adds
  // its experts' down bias (ids of other ranks' experts are skipped).
  auto rows = [&](const std::vector<float>& v, int64_t unit) {
    if (v.empty()) return v;
    FT_CHECK(static_cast<int64_t>(v.size()) == c.n_experts * unit, "expert bias of {} floats",
             v.size());
    return std::vector<float>(v.begin() + o.begin * unit, v.begin() + o.end * unit);
  };
  d.expert_gate_bias = rows(L.expert_gate_bias, c.expert_dim);
  d.expert_up_bias = rows(L.expert_up_bias, c.expert_dim);
  d.expert_down_bias = rows(L.expert_down_bias, c.hidden);
}

}  // namespace ft
