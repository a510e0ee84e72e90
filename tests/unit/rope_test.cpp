// RoPE: NeoX vs interleaved layouts, partial rotary, linear scaling and norm preservation.
#include <gtest/gtest.h>

#include <cmath>

#include "model/rope.h"

namespace ft {
namespace {

TEST(Rope, NeoxRotatesHalvesByPositionTimesFrequency) {
  RopeConfig c;
  c.theta = 10000;
  Rope r(c, 8);
  std::vector<float> x{1, 2, 3, 4, 5, 6, 7, 8};
  auto y = x;
  r.apply(y.data(), 1, 3);
  for (int i = 0; i < 4; ++i) {
    double f = 1.0 / std::pow(10000.0, 2.0 * i / 8), a = 3 * f;
    EXPECT_NEAR(y[i], x[i] * std::cos(a) - x[i + 4] * std::sin(a), 1e-5);
    EXPECT_NEAR(y[i + 4], x[i + 4] * std::cos(a) + x[i] * std::sin(a), 1e-5);
  }
}

TEST(Rope, InterleavedRotatesAdjacentPairs) {
  RopeConfig c;
  c.interleaved = true;
  Rope r(c, 4);
  std::vector<float> x{1, 0, 0, 1};
  r.apply(x.data(), 1, 1);
  EXPECT_NEAR(x[0], std::cos(1.0), 1e-6);
  EXPECT_NEAR(x[1], std::sin(1.0), 1e-6);
  double a = 1.0 / 100.0;  // 10000^(-2/4)
  EXPECT_NEAR(x[2], -std::sin(a), 1e-6);
  EXPECT_NEAR(x[3], std::cos(a), 1e-6);
}

TEST(Rope, PartialRotaryLeavesTailUntouched) {
  RopeConfig c;
  c.partial_rotary_factor = 0.5;
  Rope r(c, 8);
  std::vector<float> x{1, 2, 3, 4, 5, 6, 7, 8};
  r.apply(x.data(), 1, 7);
  EXPECT_FLOAT_EQ(x[4], 5);
  EXPECT_FLOAT_EQ(x[7], 8);
  EXPECT_NE(x[0], 1);
  EXPECT_EQ(r.inv_freq().size(), 2u);
}

TEST(Rope, LinearScalingDividesFrequencies) {
  RopeConfig a, b;
  b.type = RopeConfig::Type::LINEAR;
  b.factor = 4;
  Rope ra(a, 16), rb(b, 16);
  for (size_t i = 0; i < ra.inv_freq().size(); ++i)
    EXPECT_FLOAT_EQ(rb.inv_freq()[i] * 4, ra.inv_freq()[i]);
}

TEST(Rope, YarnKeepsHighFrequenciesAndScalesAttention) {
  RopeConfig c;
  c.type = RopeConfig::Type::YARN;
  c.factor = 4;
  c.original_max_pos = 1024;
  Rope r(c, 64);
  RopeConfig d;
  Rope base(d, 64);
  EXPECT_FLOAT_EQ(r.inv_freq()[0], base.inv_freq()[0]);  // extrapolated
  EXPECT_NEAR(r.inv_freq().back(), base.inv_freq().back() / 4, 1e-9);  // interpolated
  EXPECT_NEAR(r.attention_factor(), 0.1 * std::log(4.0) + 1.0, 1e-6);
}

TEST(Rope, PreservesNorm) {
  RopeConfig c;
  Rope r(c, 64);
  std::vector<float> x(128);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(i * 0.7f);
  double before = 0, after = 0;
  for (float v : x) before += v * v;
  r.apply(x.data(), 2, 12345);
  for (float v : x) after += v * v;
  EXPECT_NEAR(before, after, 1e-3);
}

}  // namespace
}  // namespace ft
