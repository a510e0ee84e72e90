// Portable scalar quant kernels: the reference the AVX2 / AVX-512 quant tables are tested against.
#include "backend/cpu/quant_simd.h"

namespace ft::cpu {

namespace {
struct ScalarQ {
  template <int MaxU>
  static float dot_groups(const uint8_t* u, const int8_t* q, const float* d, const float* dx,
                          int64_t ng) {
    float acc = 0.f;
    for (int64_t g = 0; g < ng; ++g) {
      int32_t s = 0;
      for (int i = 0; i < 16; ++i) s += static_cast<int32_t>(u[16 * g + i]) * q[16 * g + i];
      acc += d[g] * dx[g] * static_cast<float>(s);
    }
    return acc;
  }
  static void e4m3_scaled(const uint8_t* q, int64_t n, float scale, float* out) {
    const float* lut = e4m3_table();
    for (int64_t i = 0; i < n; ++i) out[i] = lut[q[i]] * scale;
  }
  static float dot_e4m3(const uint8_t* q, const float* x, int64_t n) {
    const float* lut = e4m3_table();
    float acc = 0.f;
    for (int64_t i = 0; i < n; ++i) acc += lut[q[i]] * x[i];
    return acc;
  }
  static void lut16(uint8_t* u, int64_t n, const uint8_t* book) {
    for (int64_t i = 0; i < n; ++i) u[i] = book[u[i]];
  }
  static float dot_f32(const float* a, const float* b, int64_t n) {
    float acc = 0.f;
    for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
    return acc;
  }
};
}  // namespace

constexpr QuantKernels k_scalar_quant_kernels = qsimd::make_quant_kernels<ScalarQ>("scalar");

}  // namespace ft::cpu
