// AVX-512 (F, BW, VL) kernels: simd_kernels.h instantiated with 16-lane float vectors.
// Compiled with -mavx512f -mavx512bw -mavx512vl -mfma; selected only when the CPU has them.
#include <immintrin.h>

#include "backend/cpu/simd_kernels.h"

namespace ft::cpu {

namespace {
struct Avx512 {
  using V = __m512;
  static constexpr int W = 16;
  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float v) { return _mm512_set1_ps(v); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static V load(const bf16_t* p) {
    __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static V load(const f16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V div(V a, V b) { return _mm512_div_ps(a, b); }
  static V neg(V a) { return _mm512_sub_ps(_mm512_setzero_ps(), a); }
  static V min(V a, V b) { return _mm512_min_ps(a, b); }
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  static V round(V a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT); }
  static V scale2(V p, V n) { return _mm512_scalef_ps(p, n); }
  static float reduce(V v) { return _mm512_reduce_add_ps(v); }
  static V exp(V x) { return simd::exp_approx<Avx512>(x); }
};
constexpr Kernels k_avx512 = simd::make_kernels<Avx512>("avx512");
}  // namespace

const Kernels* avx512_kernels() { return &k_avx512; }

}  // namespace ft::cpu
