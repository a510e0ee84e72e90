// Each SIMD kernel table vs the scalar reference over many shapes, odd sizes and misaligned
// pointers; bf16/f16 conversions vs their definitions.
#include <gtest/gtest.h>

#include <algorithm>

#include <cmath>
#include <random>

#include "backend/cpu/kernels.h"
#include "base/half.h"

namespace ft::cpu {
namespace {

std::vector<float> random_vec(size_t n, uint32_t seed, float scale = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// tolerance: |got - ref| <= 1e-5 * sum|terms| + 1e-6 (reassociation error of a length-k sum)
template <typename W>
void check_gemm(const Kernels& simd, GemmFn<W> simd_fn, GemmFn<W> ref_fn, W (*conv)(float)) {
  for (int64_t n : {1, 2, 3, 4, 5, 9}) {
    for (int64_t k : {1, 7, 8, 15, 16, 17, 33, 64, 100, 257}) {
      for (int64_t rows : {1, 3, 4, 5, 13}) {
        for (int64_t misalign : {0, 1, 3}) {
          auto xv = random_vec(n * k + misalign, 1 + k, 1.f);
          auto wf = random_vec(rows * k + misalign, 2 + k, 0.5f);
          std::vector<W> w(wf.size());
          for (size_t i = 0; i < w.size(); ++i) w[i] = conv(wf[i]);
          const float* x = xv.data() + misalign;
          const W* wp = w.data() + misalign;
          std::vector<float> got(n * rows, -1.f), ref(n * rows, -2.f);
          int64_t r0 = rows > 2 ? 1 : 0;  // a partial row range, as threads use
          simd_fn(x, n, k, wp, r0, rows, got.data(), rows);
          ref_fn(x, n, k, wp, r0, rows, ref.data(), rows);
          for (int64_t t = 0; t < n; ++t)
            for (int64_t r = r0; r < rows; ++r) {
              float bound = 0;
              for (int64_t i = 0; i < k; ++i) bound += std::fabs(x[t * k + i] * 2.f);
              ASSERT_NEAR(got[t * rows + r], ref[t * rows + r], 1e-5f * bound + 1e-6f)
                  << simd.isa << " n=" << n << " k=" << k << " rows=" << rows << " t=" << t
                  << " r=" << r << " misalign=" << misalign;
            }
        }
      }
    }
  }
}

float id(float v) { return v; }
bf16_t to_bf16(float v) { return {f32_to_bf16(v)}; }
f16_t to_f16(float v) { return {f32_to_f16(v)}; }

class SimdKernels : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!kernels_for(GetParam())) GTEST_SKIP() << GetParam() << " not supported on this CPU";
  }
  const Kernels* k() { return kernels_for(GetParam()); }
};

TEST_P(SimdKernels, GemmF32) {
  if (auto* s = k()) check_gemm<float>(*s, s->gemm_f32, k_scalar_kernels.gemm_f32, id);
}
TEST_P(SimdKernels, GemmBf16) {
  if (auto* s = k()) check_gemm<bf16_t>(*s, s->gemm_bf16, k_scalar_kernels.gemm_bf16, to_bf16);
}
TEST_P(SimdKernels, GemmF16) {
  if (auto* s = k()) check_gemm<f16_t>(*s, s->gemm_f16, k_scalar_kernels.gemm_f16, to_f16);
}

TEST_P(SimdKernels, VectorOps) {
  const Kernels* s = k();
  if (!s) return;
  for (int64_t n : {1, 5, 8, 16, 17, 31, 64, 129, 1000}) {
    for (int misalign : {0, 1}) {
      auto a = random_vec(n + 1, n, 2.f), b = random_vec(n + 1, n + 7, 2.f);
      auto w = random_vec(n + 1, n + 9, 1.f);
      const float *ap = a.data() + misalign, *bp = b.data() + misalign;
      float bound = 0;
      for (int64_t i = 0; i < n; ++i) bound += std::fabs(ap[i] * bp[i]);
      EXPECT_NEAR(s->dot(ap, bp, n), k_scalar_kernels.dot(ap, bp, n), 1e-5f * bound + 1e-6f);

      std::vector<float> y1(bp, bp + n), y2(bp, bp + n);
      s->axpy(0.37f, ap, y1.data(), n);
      k_scalar_kernels.axpy(0.37f, ap, y2.data(), n);
      for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(y1[i], y2[i], 1e-5f * (1 + std::fabs(y2[i])));

      std::vector<float> r1(n), r2(n);
      s->rmsnorm(ap, w.data(), 1e-6f, n, r1.data());
      k_scalar_kernels.rmsnorm(ap, w.data(), 1e-6f, n, r2.data());
      for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(r1[i], r2[i], 1e-5f * (1 + std::fabs(r2[i])));

      std::vector<float> g(ap, ap + n);
      for (int64_t i = 0; i < n; ++i) g[i] *= 20.f;  // cover exp's range, both tails
      s->silu_mul(g.data(), bp, n, r1.data());
      k_scalar_kernels.silu_mul(g.data(), bp, n, r2.data());
      for (int64_t i = 0; i < n; ++i)
        EXPECT_NEAR(r1[i], r2[i], 2e-6f * (1 + std::fabs(r2[i]))) << "g=" << g[i];

      // The sampler's weights: exp((x - max) / T) in (0, 1], a few masked (-inf) ones at ~0.
      std::vector<float> lg(ap, ap + n);
      for (int64_t i = 0; i < n; ++i) lg[i] *= 15.f;
      if (n > 3) lg[n / 2] = -INFINITY;
      const float mx = *std::max_element(lg.begin(), lg.end());
      const double s1 = s->exp_sum(lg.data(), n, mx, 1.f / 0.7f, r1.data());
      const double s2 = k_scalar_kernels.exp_sum(lg.data(), n, mx, 1.f / 0.7f, r2.data());
      EXPECT_NEAR(s1, s2, 1e-6 * s2);
      for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(r1[i], r2[i], 1e-6f * r2[i] + 1e-30f) << lg[i];
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, SimdKernels, ::testing::Values("avx2", "avx512"));

TEST(Half, Bf16RoundTripAndRounding) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(f32_to_bf16(1.00390625f), 0x3f80);  // halfway, rounds to even
  EXPECT_EQ(f32_to_bf16(1.01171875f), 0x3f82);  // halfway, rounds to even (up)
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
  for (float v : {0.f, -2.5f, 3.14159f, 1e-20f, 6.5e4f})
    EXPECT_NEAR(bf16_to_f32(f32_to_bf16(v)), v, std::fabs(v) / 128);
}

TEST(Half, F16Definitions) {
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_TRUE(std::isinf(f16_to_f32(0x7c00)));
  for (uint32_t h = 0; h < 0x7c00; h += 7)  // every finite positive value class round-trips
    ASSERT_EQ(f32_to_f16(f16_to_f32(static_cast<uint16_t>(h))), h);
  EXPECT_EQ(f32_to_f16(1e6f), 0x7c00);  // overflow -> inf
}

TEST(Dispatch, ScalarAlwaysAvailableAndBestSelected) {
  ASSERT_NE(kernels_for("scalar"), nullptr);
  EXPECT_EQ(kernels_for("nonsense"), nullptr);
  EXPECT_STREQ(kernels().isa, supported_isas().back().data());
}

}  // namespace
}  // namespace ft::cpu
