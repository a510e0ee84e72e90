// AVX2 quant kernels: quant_simd.h instantiated with 16-bit multiply-add group dots
// (vpmaddubsw when the codes fit 7 bits, so pairs cannot saturate; widened vpmaddwd otherwise).
// Compiled with -mavx2 -mfma -mf16c; selected only when the CPU has them.
#include <immintrin.h>

#include <type_traits>

#include "backend/cpu/quant_fp4_avx2.h"
#include "backend/cpu/quant_fp8_avx2.h"
#include "backend/cpu/quant_fused.h"
#include "backend/cpu/quant_kq_avx2.h"
#include "backend/cpu/quant_simd.h"

namespace ft::cpu {

namespace {
struct Avx2Q : qsimd::Ymm<Avx2Q> {
  // The fused GEMV (quant_fused.h) for up to 4 tokens; more tokens decode each row once.
  template <int MaxU>
  static __m256i dot(__m256i u, __m256i q) {
    return pair<MaxU>(u, q);
  }
  // Offset-128 codes (quant_fused.h's k_offset128): sum of (u - 128) * q per 4 bytes, with
  // |u - 128| as the unsigned operand and q carrying its sign: pairs stay within 2 * 128 * 127.
  static __m256i dot_signed(__m256i u, __m256i q) {
    const __m256i v = _mm256_xor_si256(u, _mm256_set1_epi8(static_cast<char>(0x80)));
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(v), _mm256_sign_epi8(q, v)),
                             _mm256_set1_epi16(1));
  }
  template <class F>
  static bool gemm_small(const QActs& x, int64_t n, int64_t k, const uint8_t* w, size_t row_bytes,
                         int64_t r0, int64_t r1, float post, float* y, int64_t ldy) {
    if (n > 4) return false;
    if constexpr (std::is_same_v<F, quant::NVFP4>)
      if (n == 1) {  // dedicated one-token kernel (quant_fp4_avx2.h)
        fp4avx2::gemv_nvfp4(x, k, w, row_bytes, r0, r1, post, y);
        return true;
      }
    if constexpr (kqavx2::k_has<F>)
      if (n == 1) {  // dedicated one-token kernel (quant_kq_avx2.h)
        kqavx2::gemv<F>(x, k, w, row_bytes, r0, r1, post, y);
        return true;
      }
    qsimd::gemm_fused<Avx2Q, F>(x, n, k, w, row_bytes, r0, r1, post, y, ldy);
    return true;
  }
  // 32 codes x 32 activations (groups g, g+1) -> 8 int32 lanes: 0-3 group g, 4-7 group g+1.
  template <int MaxU>
  static __m256i pair(const uint8_t* u, const int8_t* q) {
    return pair<MaxU>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(u)),
                      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)));
  }
  template <int MaxU>
  static __m256i pair(__m256i uv, __m256i qv) {
    if constexpr (MaxU <= 127) {
      return _mm256_madd_epi16(_mm256_maddubs_epi16(uv, qv), _mm256_set1_epi16(1));
    } else {  // widen: group g from the low 16 bytes, g+1 from the high; fold 8 lanes to 4
      const __m256i p0 = _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm256_castsi256_si128(uv)),
                                           _mm256_cvtepi8_epi16(_mm256_castsi256_si128(qv)));
      const __m256i p1 = _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm256_extracti128_si256(uv, 1)),
                                           _mm256_cvtepi8_epi16(_mm256_extracti128_si256(qv, 1)));
      // hadd within 128-bit lanes: [p0 0+1, 2+3, p1 0+1, 2+3 | p0 4+5, 6+7, p1 4+5, 6+7]
      const __m256i h = _mm256_hadd_epi32(p0, p1);
      // reorder to [p0 a, p0 b, p0 c, p0 d, p1 a, p1 b, p1 c, p1 d]
      return _mm256_permutevar8x32_epi32(h, _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7));
    }
  }
  template <int MaxU>
  static float dot_groups(const uint8_t* u, const int8_t* q, const float* d, const float* dx,
                          int64_t ng) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t g = 0;
    for (; g + 8 <= ng; g += 8) {
      const __m256 s = _mm256_mul_ps(_mm256_loadu_ps(d + g), _mm256_loadu_ps(dx + g));
      for (int c = 0; c < 4; c += 2) {
        const __m256 s0 = _mm256_permutevar8x32_ps(
            s, _mm256_setr_epi32(2 * c, 2 * c, 2 * c, 2 * c, 2 * c + 1, 2 * c + 1, 2 * c + 1, 2 * c + 1));
        const __m256 s1 = _mm256_permutevar8x32_ps(
            s, _mm256_setr_epi32(2 * c + 2, 2 * c + 2, 2 * c + 2, 2 * c + 2, 2 * c + 3, 2 * c + 3,
                                 2 * c + 3, 2 * c + 3));
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(pair<MaxU>(u + 16 * g + 32 * c, q + 16 * g + 32 * c)), s0, acc0);
        acc1 = _mm256_fmadd_ps(
            _mm256_cvtepi32_ps(pair<MaxU>(u + 16 * g + 32 * c + 32, q + 16 * g + 32 * c + 32)), s1, acc1);
      }
    }
    const __m256 a = _mm256_add_ps(acc0, acc1);
    __m128 r4 = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    r4 = _mm_add_ps(r4, _mm_movehl_ps(r4, r4));
    r4 = _mm_add_ss(r4, _mm_movehdup_ps(r4));
    float r = _mm_cvtss_f32(r4);
    for (; g < ng; ++g) {
      int32_t s = 0;
      for (int i = 0; i < 16; ++i) s += static_cast<int32_t>(u[16 * g + i]) * q[16 * g + i];
      r += d[g] * dx[g] * static_cast<float>(s);
    }
    return r;
  }
  // FP8: the fp16 decode and the one-token GEMV of quant_fp8_avx2.h.
  static void e4m3_scaled(const uint8_t* q, int64_t n, float scale, float* out) {
    fp8avx2::e4m3_scaled(q, n, scale, out);
  }
  static float dot_e4m3(const uint8_t* q, const float* x, int64_t n) {
    return fp8avx2::dot_e4m3(q, x, n);
  }
  static bool gemv_fp8(const float* x, int64_t k, const uint8_t* w, const float* scale_inv,
                       int64_t r0, int64_t r1, float* y) {
    fp8avx2::gemv(x, k, w, scale_inv, r0, r1, y);
    return true;
  }
  static void lut16(uint8_t* u, int64_t n, const uint8_t* book) {
    const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(book));
    const __m256i t2 = _mm256_broadcastsi128_si256(t);
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
      auto* p = reinterpret_cast<__m256i*>(u + i);
      _mm256_storeu_si256(p, _mm256_shuffle_epi8(t2, _mm256_loadu_si256(p)));
    }
    for (; i < n; i += 16) {
      auto* p = reinterpret_cast<__m128i*>(u + i);
      _mm_storeu_si128(p, _mm_shuffle_epi8(t, _mm_loadu_si128(p)));
    }
  }
  static float dot_f32(const float* a, const float* b, int64_t n) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
      acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
      acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
    }
    const __m256 s = _mm256_add_ps(acc0, acc1);
    __m128 r4 = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    r4 = _mm_add_ps(r4, _mm_movehl_ps(r4, r4));
    r4 = _mm_add_ss(r4, _mm_movehdup_ps(r4));
    float r = _mm_cvtss_f32(r4);
    for (; i < n; ++i) r += a[i] * b[i];
    return r;
  }
};
constexpr QuantKernels k_avx2q = qsimd::make_quant_kernels<Avx2Q>("avx2");
}  // namespace

const QuantKernels* avx2_quant_kernels() { return &k_avx2q; }

}  // namespace ft::cpu
