// Host sampling cost per token at a 152k vocabulary (Qwen3's), for the samplers' parameter
// sets clients send: greedy, temperature only, top-p, min-p, top-k, Qwen's recommended
// top-k 20 + top-p 0.95. Two logit shapes: flat (normal, std 3: large top-p sets, the worst
// case) and peaked (a dozen strong tokens over a normal tail, as a language model's). The bound
// is one read of the logits at the bandwidth a vectorised sum over them reaches here.
//   build/bench/sampler_bench [vocab]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "backend/cpu/kernels.h"
#include "engine/sampler.h"

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

int main(int argc, char** argv) {
  const int64_t V = argc > 1 ? std::atoll(argv[1]) : 151936;
  std::vector<float> l(V);
  // One read of the logits: the best of 200 vectorised sums.
  double read_s = 1e9;
  volatile float sink = 0;
  for (int rep = 0; rep < 200; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    float a[16] = {};
    for (int64_t i = 0; i + 16 <= V; i += 16)
      for (int j = 0; j < 16; ++j) a[j] += l[i + j];
    sink = sink + a[0] + a[15];
    read_s = std::min(read_s, seconds_since(t0));
  }
  std::printf("vocab %lld, CPU kernels %s; one read of the logits (%.0f KB): %.1f us (%.1f GB/s)\n",
              static_cast<long long>(V), ft::cpu::kernels().isa, V * 4 / 1e3, read_s * 1e6,
              V * 4 / read_s / 1e9);
  struct Case {
    const char* name;
    ft::SamplingParams p;
  };
  const Case cases[] = {{"greedy", {.temperature = 0.f}},
                        {"temperature 1", {.temperature = 1.f}},
                        {"temperature 0.7, top-p 0.95", {.temperature = 0.7f, .top_p = 0.95f}},
                        {"temperature 1, top-p 0.95", {.temperature = 1.f, .top_p = 0.95f}},
                        {"temperature 1, min-p 0.05", {.temperature = 1.f, .min_p = 0.05f}},
                        {"temperature 1, top-k 20", {.temperature = 1.f, .top_k = 20}},
                        {"Qwen: 0.6, top-k 20, top-p 0.95",
                         {.temperature = 0.6f, .top_k = 20, .top_p = 0.95f}}};
  for (int shape = 0; shape < 2; ++shape) {
    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0.f, shape == 0 ? 3.f : 2.5f);
    for (auto& x : l) x = nd(rng);
    if (shape == 1)
      for (int i = 0; i < 12; ++i) l[rng() % V] = 20.f + static_cast<float>(i % 5);
    std::printf("\n%s logits\n| parameters | us per token | x one read |\n|---|---|---|\n",
                shape == 0 ? "flat (normal, std 3)" : "peaked (12 strong over a normal tail)");
    for (const Case& c : cases) {
      ft::Sampler s(c.p);
      double best = 1e9;
      for (int rep = 0; rep < 5; ++rep) {  // the best of 5 batches of 20 draws
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < 20; ++i) sink = sink + static_cast<float>(s.sample(l.data(), V));
        best = std::min(best, seconds_since(t0) / 20);
      }
      std::printf("| %s | %.1f | %.1f |\n", c.name, best * 1e6, best / read_s);
    }
  }
  return 0;
}
