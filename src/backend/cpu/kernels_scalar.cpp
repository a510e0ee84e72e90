// Portable scalar kernels: the reference every SIMD kernel is tested against.
#include <cmath>

#include "backend/cpu/kernels.h"
#include "base/half.h"

namespace ft::cpu {

namespace {
inline float to_f32(float v) { return v; }
inline float to_f32(bf16_t v) { return bf16_to_f32(v.bits); }
inline float to_f32(f16_t v) { return f16_to_f32(v.bits); }

template <typename W>
void gemm(const float* x, int64_t n, int64_t k, const W* w, int64_t r0, int64_t r1, float* y,
          int64_t ldy) {
  for (int64_t t = 0; t < n; ++t)
    for (int64_t r = r0; r < r1; ++r) {
      float acc = 0.f;
      for (int64_t i = 0; i < k; ++i) acc += x[t * k + i] * to_f32(w[r * k + i]);
      y[t * ldy + r] = acc;
    }
}

float dot(const float* a, const float* b, int64_t n) {
  float acc = 0.f;
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

void axpy(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void rmsnorm(const float* x, const float* w, float eps, int64_t n, float* y) {
  float ss = 0.f;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  float inv = 1.f / std::sqrt(ss / static_cast<float>(n) + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * inv * w[i];
}

void silu_mul(const float* g, const float* u, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = g[i] / (1.f + std::exp(-g[i])) * u[i];
}

double exp_sum(const float* x, int64_t n, float sub, float scale, float* y) {
  double total = 0;
  for (int64_t i = 0; i < n; ++i) total += y[i] = std::exp((x[i] - sub) * scale);
  return total;
}
}  // namespace

const Kernels k_scalar_kernels = {
    .isa = "scalar",
    .gemm_f32 = gemm<float>,
    .gemm_bf16 = gemm<bf16_t>,
    .gemm_f16 = gemm<f16_t>,
    .dot = dot,
    .axpy = axpy,
    .rmsnorm = rmsnorm,
    .silu_mul = silu_mul,
    .exp_sum = exp_sum,
};

}  // namespace ft::cpu
