// CUDA differential checks shared by the gtest suite (cuda_ops_test) and the standalone
// validator (cuda_validate, no gtest): each check compares a CUDA op, or the whole CUDA
// forward, with the CPU op or the golden fixture, and returns "" on success or a message.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_ops.h"

namespace ft::cuda_checks {

// A device buffer's first n values, after the device finishes its work.
template <typename T = float>
std::vector<T> down(const cuda::DeviceBuffer& b, size_t n) {
  std::vector<T> v(n);
  cuda::synchronize();
  cuda::copy_to_host(v.data(), b.data(), n * sizeof(T));
  return v;
}

// Normal(0, scale) values, reproducible from the seed.
inline std::vector<float> randv(size_t n, uint32_t seed, float scale = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// A device copy of v (at least one byte, so empty inputs still get a valid pointer).
template <typename T>
cuda::DeviceBuffer up(const std::vector<T>& v) {
  cuda::DeviceBuffer b(std::max<size_t>(1, v.size() * sizeof(T)));
  b.upload(v.data(), v.size() * sizeof(T));
  return b;
}

// Seconds per launch of launch(0) .. launch(reps - 1), captured once into a graph on a
// stream of its own and replayed (one warm replay, then one timed): the kernels' own time, as
// decode's captured steps see it, without the host's launch cost.
inline double graph_seconds_per_launch(int reps, const std::function<void(int)>& launch) {
  cuda::Stream st;
  cuda::StreamScope scope(st);
  cuda::Graph g;
  g.capture_begin();
  for (int r = 0; r < reps; ++r) launch(r);
  g.capture_end();
  g.launch();
  st.synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  g.launch();
  st.synchronize();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
}

struct Check {
  std::string name;
  std::function<std::string()> run;
};

// Each CUDA op vs its CPU op over a grid of shapes (odd sizes included) and weight dtypes.
std::vector<Check> op_checks();
// The decode runtime's fused ops, device expert-cache bookkeeping (vs ExpertCache) and the
// mapped-memory fetch kernel (runtime_checks.cpp).
std::vector<Check> runtime_checks();
// The hybrid families' ops vs the CPU, and recurrent-state export/import (hybrid_checks.cpp).
std::vector<Check> hybrid_checks(const std::string& fixtures_dir);
// DeltaNet conv + delta rule timing at Qwen3-Next shapes, decode and a 256-token pass.
std::string hybrid_benchmark();

// Fixture parity of CudaTransformer: prefill logits at every position (one pass and chunked),
// token-by-token decode and the 16 greedy ids. Tolerance as tests/models/parity_test.cpp:
// max|d| <= 1e-3 * max|ref| per row.
std::vector<Check> model_checks(const std::string& fixtures_dir);
const std::vector<std::string>& fixture_names();

// Quantized weights per format: device dequant, GEMV, GEMM, MoE experts vs references and the
// CPU quant matmul; GGUF (Q8_0, Q4_K) greedy parity resident and offloaded (quant_checks.cpp).
std::vector<Check> quant_checks(const std::string& fixtures_dir);
// Experts of mixed formats (Q4_K_M GGUF, three types in a layer) and FP8 / NVFP4 experts, resident,
// offloaded and HYBRID, vs the CPU on the f32-dequantized model (mixed_checks.cpp).
std::vector<Check> mixed_checks(const std::string& fixtures_dir);
// Elastic memory: live expert-pool / KV resizes keep greedy decode, OOM throws
// (elastic_checks.cpp).
std::vector<Check> elastic_checks(const std::string& fixtures_dir);
// GEMV bandwidth per weight format beside the D2D copy bandwidth (a markdown table).
std::string quant_bandwidth();
// A bf16 decode GEMV's fixed cost and streaming rate, from DRAM and from L2, in graph replay
// (gemv_overhead.cpp).
std::string gemv_overhead_benchmark();

// Prefill attention timing, per-token vs tiled kernel (one line each).
std::string attention_benchmark();
// BF16 KV cache attention (flash prefill, flash-decoding), the bf16 cache store and
// HostExperts::copy_of's progress (attention_checks.cpp); the flash vs TF32 prefill timing.
std::vector<Check> attention_checks();
// The decode kernel with qk_rope_store fused vs the two launches (rope_decode_checks.cpp; run as
// part of attention_checks()).
std::vector<Check> rope_decode_checks();
std::string flash_attention_benchmark();

// Decode tokens/s of CudaTransformer on a fixture after a prompt prefill (n_tokens steps).
double decode_tokens_per_s(const std::string& fixture_dir, int n_tokens);

}  // namespace ft::cuda_checks
