// Every weight of a ModelWeights under a stable name, in one list: matrices (TensorView) and
// float vectors. Drives the fast-load checkpoint's writer and reader (model/ft_checkpoint.cpp).
#pragma once
#include <string>
#include <type_traits>

#include "model/weights.h"

namespace ft {

// fn(name, TensorView&) and fn(name, std::vector<float>&) (const for a const W); empty
// entries (absent in this family or layer) are visited too. W: ModelWeights or const.
template <class W, class Fn>
void visit_weights(W& w, Fn&& fn) {
  fn(std::string("embed"), w.embed);
  fn(std::string("final_norm"), w.final_norm);
  fn(std::string("lm_head"), w.lm_head);
  for (size_t l = 0; l < w.layers.size(); ++l) {
    auto& L = w.layers[l];
    const std::string p = "layers." + std::to_string(l) + ".";
    fn(p + "attn_norm", L.attn_norm);
    fn(p + "q.w", L.q.w);
    fn(p + "q.bias", L.q.bias);
    fn(p + "k.w", L.k.w);
    fn(p + "k.bias", L.k.bias);
    fn(p + "v.w", L.v.w);
    fn(p + "v.bias", L.v.bias);
    fn(p + "o.w", L.o.w);
    fn(p + "o.bias", L.o.bias);
    fn(p + "q_norm", L.q_norm);
    fn(p + "k_norm", L.k_norm);
    fn(p + "ffn_norm", L.ffn_norm);
    fn(p + "gate", L.gate);
    fn(p + "up", L.up);
    fn(p + "down", L.down);
    fn(p + "router", L.router);
    fn(p + "sinks", L.sinks);
    fn(p + "router_bias", L.router_bias);
    fn(p + "expert_gate_bias", L.expert_gate_bias);
    fn(p + "expert_up_bias", L.expert_up_bias);
    fn(p + "expert_down_bias", L.expert_down_bias);
    for (size_t e = 0; e < L.experts.size(); ++e) {
      const std::string x = p + "experts." + std::to_string(e) + ".";
      fn(x + "gate", L.experts[e].gate);
      fn(x + "up", L.experts[e].up);
      fn(x + "down", L.experts[e].down);
    }
    fn(p + "shared.gate", L.shared.gate);
    fn(p + "shared.up", L.shared.up);
    fn(p + "shared.down", L.shared.down);
    fn(p + "shared_gate", L.shared_gate);
    auto& d = L.delta;
    fn(p + "delta.qkv", d.qkv);
    fn(p + "delta.z", d.z);
    fn(p + "delta.b", d.b);
    fn(p + "delta.a", d.a);
    fn(p + "delta.conv", d.conv);
    fn(p + "delta.a_log", d.a_log);
    fn(p + "delta.dt_bias", d.dt_bias);
    fn(p + "delta.norm", d.norm);
    fn(p + "delta.out", d.out);
  }
}

}  // namespace ft
