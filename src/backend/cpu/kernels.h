// CPU kernel table with run-time ISA dispatch (AVX-512, AVX2+FMA, portable scalar).
// Every SIMD entry has a scalar twin in kernels_scalar.cpp that tests compare it against.
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

namespace ft::cpu {

// Weight element tags: bf16 and fp16 share a storage type but not a meaning.
struct bf16_t { uint16_t bits; };
struct f16_t { uint16_t bits; };

// y[t * ldy + r] = dot(x[t * k ...], w[r * k ...]) for t in [0, n), r in [r0, r1).
// x: [n, k] f32, w: [rows, k] row-major. Called per thread on a slice of rows.
template <typename W>
using GemmFn = void (*)(const float* x, int64_t n, int64_t k, const W* w, int64_t r0, int64_t r1,
                        float* y, int64_t ldy);

struct Kernels {
  const char* isa;
  GemmFn<float> gemm_f32;
  GemmFn<bf16_t> gemm_bf16;
  GemmFn<f16_t> gemm_f16;
  float (*dot)(const float* a, const float* b, int64_t n);
  void (*axpy)(float a, const float* x, float* y, int64_t n);  // y += a * x
  // y = x / rms(x) * w over n elements (y may alias x).
  void (*rmsnorm)(const float* x, const float* w, float eps, int64_t n, float* y);
  // y = silu(g) * u (y may alias g).
  void (*silu_mul)(const float* g, const float* u, int64_t n, float* y);
  // y = exp((x - sub) * scale) over n elements; returns their sum (accumulated in double per
  // chunk). The sampler's softmax weights: sub = the max logit, scale = 1 / temperature.
  double (*exp_sum)(const float* x, int64_t n, float sub, float scale, float* y);
};

// The best table this CPU supports; FT_ISA=scalar|avx2|avx512 forces one (if supported).
const Kernels& kernels();
// A specific table, or nullptr when this CPU (or this build) lacks the ISA.
const Kernels* kernels_for(std::string_view isa);
// Names of the tables this CPU can run, best last.
std::vector<std::string_view> supported_isas();

extern const Kernels k_scalar_kernels;
const Kernels* avx2_kernels();    // nullptr if not compiled in
const Kernels* avx512_kernels();  // nullptr if not compiled in

}  // namespace ft::cpu
