// Test helper: a copy of a bf16 model whose attention and expert matrices are FP8 with 128x128
// block scales (the fixtures are too narrow for whole tiles), for tensor-parallel tile slices.
#pragma once
#include <memory>
#include <vector>

#include "base/half.h"
#include "model/model.h"
#include "quant/quant.h"

namespace ft::test {

// `m` must outlive the copy (embedding, norms and routers stay views into it).
inline std::unique_ptr<Model> fp8_copy(const Model& m) {
  ModelWeights w = m.weights();
  auto fp8 = [&w](TensorView& t) {
    if (t.empty() || t.dtype != DType::BF16 || t.ndim != 2) return;
    const int64_t rows = t.shape[0], cols = t.shape[1];
    std::vector<float> f(rows * cols);
    for (int64_t i = 0; i < rows * cols; ++i) f[i] = bf16_to_f32(t.as<uint16_t>()[i]);
    std::vector<uint8_t> q(rows * cols), s(quant::fp8_b128_scale_count(rows, cols) * sizeof(float));
    quant::quantize_fp8_b128(f.data(), rows, cols, q.data(), reinterpret_cast<float*>(s.data()));
    t.dtype = DType::F8_E4M3_B128;
    t.data = w.owned.emplace_back(std::move(q)).data();
    t.scale_inv = reinterpret_cast<const float*>(w.owned.emplace_back(std::move(s)).data());
  };
  for (LayerWeights& L : w.layers) {
    for (Linear* p : {&L.q, &L.k, &L.v, &L.o}) fp8(p->w);
    for (ExpertWeights& e : L.experts) fp8(e.gate), fp8(e.up), fp8(e.down);
  }
  return Model::from_weights(m.config(), std::move(w), m.dir() + " (fp8)");
}

// A small Qwen3-MoE-shaped model wide enough for whole 128 tiles: head_dim 128, 4 q / 2 KV
// heads, hidden 256, experts 384 wide (3 tiles: 2 ranks take 1 and 2).
inline ModelConfig fp8_test_config() {
  return synthetic_moe_config({.layers = 2, .experts = 4, .top_k = 2, .hidden = 256,
                               .expert_dim = 384, .heads = 4, .kv_heads = 2, .head_dim = 128,
                               .vocab = 512});
}

}  // namespace ft::test
