// The CUDA quantized GEMV's decoders, run on the host (no GPU needed): for every format with
// integer codes, code_words (what the int8-activation kernel feeds to __dp4a) reproduces the
// scalar reference dequant exactly and agrees with code_group (the f32 kernel's and the GEMM's
// decode), the chunked kernel's int8-activation dot product stays within the
// activation-rounding bound of the f64 dot over the dequantized row, and the streaming kernel's
// 32-element units (dot32) equal the f64 dot of their rounded activations at every alignment.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "quant/quant.h"
#include "quant_codes.h"

namespace ft::cuda_checks {
namespace {

TEST(QuantCodes, WordsMatchReferenceAndInt8DotWithinBound) {
  const DType types[] = {DType::Q4_0, DType::Q4_1, DType::Q8_0,   DType::Q2_K,
                         DType::Q3_K, DType::Q4_K, DType::Q5_K,   DType::Q6_K,
                         DType::IQ4_NL, DType::IQ4_XS, DType::MXFP4, DType::NVFP4};
  const int64_t cols = 2048;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (DType dt : types) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    std::vector<float> src(cols), x(cols);
    for (auto& v : src) v = 0.05f * nd(rng);
    for (int64_t i = 0; i < cols; ++i) x[i] = nd(rng) * (i % 97 == 0 ? 8.f : 1.f);
    float amax = 0;
    for (float v : src) amax = std::max(amax, std::fabs(v));
    const float gs = dt == DType::NVFP4 ? quant::nvfp4_global_scale(amax) : 1.f;
    const quant::QuantType qt = quant::from_dtype(dt);
    std::vector<uint8_t> row(dtype_row_bytes(dt, cols) + 16);
    quant::quantize_row(qt, src.data(), row.data(), cols, gs);
    std::vector<float> ref(cols), w(cols);
    quant::dequantize_row(qt, row.data(), ref.data(), cols, gs);
    const CodesResult r = quant_codes(dt, row.data(), x.data(), cols, w.data());
    ASSERT_TRUE(r.supported);
    EXPECT_TRUE(r.words_vs_floats);
    // NVFP4's global scale is applied after the GEMV (the kernel's epilogue).
    for (int64_t i = 0; i < cols; ++i)
      ASSERT_NEAR(w[i] * gs, ref[i], 1e-6 * std::fabs(ref[i]) + 1e-12) << "element " << i;
    double exact = 0, mag = 0, act = 0;
    for (int64_t i = 0; i < cols; ++i) {
      float gmax = 0;
      for (int64_t j = i / 16 * 16; j < i / 16 * 16 + 16; ++j) gmax = std::max(gmax, std::fabs(x[j]));
      exact += double(ref[i]) * x[i], mag += std::fabs(double(ref[i]) * x[i]);
      act += std::fabs(ref[i]) * gmax / 254;  // |x - dx q| <= amax / 254 per element
    }
    EXPECT_LE(std::fabs(r.dot * gs - exact), 1.01 * act + 1e-5 * mag);
    EXPECT_GT(std::fabs(r.dot * gs - exact), 0.0);  // int8 activations: not the f32 sum
    // The streaming GEMV's 32-element units: the f64 dot of its per-32 rounded activations
    // with the reference weights, to f32 rounding (the units' sums are f32).
    EXPECT_LT(r.dot32_err, 2e-6);
    double act32 = 0;
    for (int64_t i = 0; i < cols; ++i) {
      float gmax = 0;
      for (int64_t j = i / 32 * 32; j < i / 32 * 32 + 32; ++j) gmax = std::max(gmax, std::fabs(x[j]));
      act32 += std::fabs(ref[i]) * gmax / 254;
    }
    EXPECT_LE(std::fabs(r.dot32 * gs - exact), 1.01 * act32 + 1e-5 * mag);
  }
}

}  // namespace
}  // namespace ft::cuda_checks
