// AVX-512 + VNNI quant kernels: quant_simd.h instantiated with vpdpbusd group dots.
// Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512vnni; selected only when the CPU has them.
#include <immintrin.h>

#include <type_traits>

#include "backend/cpu/quant_fused.h"
#include "backend/cpu/quant_simd.h"
#include "backend/cpu/quant_gemv512.h"

namespace ft::cpu {

namespace {
struct Avx512Q : qsimd::Ymm<Avx512Q> {
  // The fused GEMV (quant_fused.h) for up to 4 tokens, on 256-bit vpdpbusd (AVX512-VL VNNI);
  // more tokens decode each row once (dot_groups below). A 512-bit fused variant
  // (both chunks in one vpdpbusd, the group scales picked by vpermps on a zmm) measured ~20%
  // slower on Sapphire Rapids, its inserts and permutes all on port 5.
  template <int MaxU>
  static __m256i dot(__m256i u, __m256i q) {
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, q);
  }
  template <class F>
  static bool gemm_small(const QActs& x, int64_t n, int64_t k, const uint8_t* w, size_t row_bytes,
                         int64_t r0, int64_t r1, float post, float* y, int64_t ldy) {
    if (n > 4) return false;
    if (n == 1) {  // 512-bit unpack for the formats 256-bit cannot keep fed (quant_gemv512.h)
      if constexpr (std::is_same_v<F, quant::NVFP4> || std::is_same_v<F, quant::MXFP4>)
        if (vbmi_bf16_ok()) {
          (std::is_same_v<F, quant::NVFP4> ? gemv_nvfp4_vbmi : gemv_mxfp4_vbmi)(x, k, w, row_bytes,
                                                                              r0, r1, post, y);
          return true;
        }
      constexpr auto kq = std::is_same_v<F, quant::Q2_K>   ? gemv_q2k_512
                          : std::is_same_v<F, quant::Q3_K> ? gemv_q3k_512
                          : std::is_same_v<F, quant::Q4_K> ? gemv_q4k_512
                          : std::is_same_v<F, quant::Q5_K> ? gemv_q5k_512
                          : std::is_same_v<F, quant::Q6_K> ? gemv_q6k_512
                                                           : nullptr;
      if constexpr (kq != nullptr) {
        kq(x, k, w, row_bytes, r0, r1, y);
        for (int64_t r = r0; r < r1; ++r) y[r] *= post;
        return true;
      }
    }
    qsimd::gemm_fused<Avx512Q, F>(x, n, k, w, row_bytes, r0, r1, post, y, ldy);
    return true;
  }
  static bool gemv_fp8(const float* x, int64_t k, const uint8_t* w, const float* scale_inv,
                       int64_t r0, int64_t r1, float* y) {
    if (!vbmi_bf16_ok()) return false;
    gemv_fp8_vbmi(x, k, w, scale_inv, r0, r1, y);
    return true;
  }
  // 64 codes x 64 activations -> 16 int32 lanes (4 per group of 16), scaled per group.
  static __m512 chunk(const uint8_t* u, const int8_t* q, __m512 scale, __m512 acc) {
    const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_loadu_si512(u),
                                          _mm512_loadu_si512(q));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), scale, acc);
  }
  template <int MaxU>
  static float dot_groups(const uint8_t* u, const int8_t* q, const float* d, const float* dx,
                          int64_t ng) {
    // lane j of a 64-byte chunk belongs to group j / 4: spread 4 group scales over 16 lanes
    const __m512i lo = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    const __m512i hi = _mm512_add_epi32(lo, _mm512_set1_epi32(4));
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int64_t g = 0;
    for (; g + 8 <= ng; g += 8) {
      const __m512 s = _mm512_castps256_ps512(
          _mm256_mul_ps(_mm256_loadu_ps(d + g), _mm256_loadu_ps(dx + g)));
      acc0 = chunk(u + 16 * g, q + 16 * g, _mm512_permutexvar_ps(lo, s), acc0);
      acc1 = chunk(u + 16 * g + 64, q + 16 * g + 64, _mm512_permutexvar_ps(hi, s), acc1);
    }
    for (; g + 4 <= ng; g += 4) {
      const __m512 s = _mm512_castps128_ps512(_mm_mul_ps(_mm_loadu_ps(d + g), _mm_loadu_ps(dx + g)));
      acc0 = chunk(u + 16 * g, q + 16 * g, _mm512_permutexvar_ps(lo, s), acc0);
    }
    float r = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
    for (; g < ng; ++g) {
      int32_t s = 0;
      for (int i = 0; i < 16; ++i) s += static_cast<int32_t>(u[16 * g + i]) * q[16 * g + i];
      r += d[g] * dx[g] * static_cast<float>(s);
    }
    return r;
  }
  // e4m3 -> f32 lane-wise: normals rebias the exponent in the integer domain, subnormals
  // (|code| < 8) are code * 2^-9, S.1111.111 is NaN; then the sign bit.
  static __m512 e4m3_16(__m128i bytes) {
    const __m512i x = _mm512_cvtepu8_epi32(bytes), a = _mm512_and_si512(x, _mm512_set1_epi32(0x7f));
    __m512 v = _mm512_castsi512_ps(
        _mm512_add_epi32(_mm512_slli_epi32(a, 20), _mm512_set1_epi32(120 << 23)));
    const __mmask16 sub = _mm512_cmplt_epi32_mask(a, _mm512_set1_epi32(8));
    v = _mm512_mask_mul_ps(v, sub, _mm512_cvtepi32_ps(a), _mm512_set1_ps(0.001953125f));
    const __mmask16 nan = _mm512_cmpeq_epi32_mask(a, _mm512_set1_epi32(0x7f));
    v = _mm512_mask_mov_ps(v, nan, _mm512_castsi512_ps(_mm512_set1_epi32(0x7fc00000)));
    const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(x, _mm512_set1_epi32(0x80)), 24);
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(v), sign));
  }
  static void e4m3_scaled(const uint8_t* q, int64_t n, float scale, float* out) {
    const __m512 s = _mm512_set1_ps(scale);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
      _mm512_storeu_ps(out + i, _mm512_mul_ps(e4m3_16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + i))), s));
    const float* lut = e4m3_table();
    for (; i < n; ++i) out[i] = lut[q[i]] * scale;
  }
  // e4m3 / 256 as fp16, exactly: the e4m3 bits shifted into fp16's exponent/mantissa fields
  // (bias 7 -> 15 is the 2^-8; e4m3 subnormals land on fp16 subnormals), NaN kept, then
  // vcvtph2ps. Cheaper than e4m3_16's integer rebias and blends.
  static __m512 e4m3_16_over_256(__m128i bytes) {
    const __m256i b = _mm256_cvtepu8_epi16(bytes);
    const __m256i mag = _mm256_and_si256(b, _mm256_set1_epi16(0x7f));
    __m256i h = _mm256_or_si256(
        _mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0x80)), 8), _mm256_slli_epi16(mag, 7));
    h = _mm256_mask_mov_epi16(h, _mm256_cmpeq_epi16_mask(mag, _mm256_set1_epi16(0x7f)),
                              _mm256_set1_epi16(0x7e00));
    return _mm512_cvtph_ps(h);
  }
  static float dot_e4m3(const uint8_t* q, const float* x, int64_t n) {
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
      const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + i));
      acc0 = _mm512_fmadd_ps(e4m3_16_over_256(_mm256_castsi256_si128(b)), _mm512_loadu_ps(x + i),
                             acc0);
      acc1 = _mm512_fmadd_ps(e4m3_16_over_256(_mm256_extracti128_si256(b, 1)),
                             _mm512_loadu_ps(x + i + 16), acc1);
    }
    for (; i + 16 <= n; i += 16)
      acc0 = _mm512_fmadd_ps(
          e4m3_16_over_256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + i))),
          _mm512_loadu_ps(x + i), acc0);
    float r = 256.f * _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
    const float* lut = e4m3_table();
    for (; i < n; ++i) r += lut[q[i]] * x[i];
    return r;
  }
  static void lut16(uint8_t* u, int64_t n, const uint8_t* book) {
    const __m512i t = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(book)));
    int64_t i = 0;
    for (; i + 64 <= n; i += 64)
      _mm512_storeu_si512(u + i, _mm512_shuffle_epi8(t, _mm512_loadu_si512(u + i)));
    for (; i < n; i += 16) {
      auto* p = reinterpret_cast<__m128i*>(u + i);
      _mm_storeu_si128(p, _mm_shuffle_epi8(_mm512_castsi512_si128(t), _mm_loadu_si128(p)));
    }
  }
  static float dot_f32(const float* a, const float* b, int64_t n) {
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
      acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
      acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), acc1);
    }
    for (; i < n; i += 16) {
      const __mmask16 m = n - i >= 16 ? 0xffff : static_cast<__mmask16>((1u << (n - i)) - 1);
      acc0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
  }
};
constexpr QuantKernels k_avx512q = qsimd::make_quant_kernels<Avx512Q>("avx512");
}  // namespace

const QuantKernels* avx512_quant_kernels() { return &k_avx512q; }

}  // namespace ft::cpu
