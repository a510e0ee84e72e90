// Quant formats: geometry, scalar conversions, hand-derived dequant vectors per format (each
// expected value worked out from the block layout in formats.h), decode() agreeing with
// dequant(), and quantize -> dequantize round trips within each format's error bound.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "base/error.h"
#include "quant/formats.h"
#include "quant/quant.h"
#include "quant/quantize.h"

namespace ft::quant {
namespace {

constexpr uint16_t H_ONE = 0x3c00, H_HALF = 0x3800, H_QUARTER = 0x3400, H_TWO = 0x4000,
                   H_MINUS_ONE = 0xbc00;

TEST(QuantGeometry, TableMatchesDTypeAndStructs) {
  for (QuantType t : all_types()) {
    const DTypeBlock b = dtype_block(to_dtype(t));
    EXPECT_EQ(b.elems, block_elems(t)) << name(t);
    EXPECT_EQ(b.bytes, block_bytes(t)) << name(t);
    EXPECT_EQ(from_dtype(to_dtype(t)), t);
    EXPECT_EQ(parse(name(t)), t);
    EXPECT_TRUE(is_known(static_cast<uint32_t>(t)));
  }
  EXPECT_EQ(row_bytes(QuantType::Q4_K, 512), 288u);
  EXPECT_EQ(row_bytes(QuantType::Q8_0, 64), 68u);
  EXPECT_EQ(row_bytes(QuantType::NVFP4, 32), 18u);
  EXPECT_EQ(parse("q4_k"), QuantType::Q4_K);
  EXPECT_THROW(parse("Q7_Z"), Error);
  EXPECT_THROW(row_bytes(QuantType::Q4_K, 100), Error);
  EXPECT_FALSE(is_known(6));  // Q5_0: not supported
  EXPECT_EQ(static_cast<uint32_t>(QuantType::MXFP4), 39u);
  EXPECT_EQ(static_cast<uint32_t>(QuantType::IQ4_XS), 23u);
}

TEST(QuantGeometry, TensorViewQuantBytes) {
  TensorView v;
  v.dtype = DType::Q4_K;
  v.ndim = 3;
  v.shape = {4, 8, 512, 1};
  EXPECT_EQ(v.nbytes(), 4u * 8 * 288);
  std::vector<uint8_t> buf(v.nbytes());
  v.data = buf.data();
  TensorView e = v.slice0(2);
  EXPECT_EQ(e.data, buf.data() + 2 * 8 * 288);
  EXPECT_EQ(e.nbytes(), 8u * 288);
  TensorView r = e.rows(3, 5);
  EXPECT_EQ(r.data, buf.data() + 2 * 8 * 288 + 3 * 288);
}

TEST(QuantScalars, HalfE4M3E8M0E2M1) {
  EXPECT_EQ(half_f32(H_ONE), 1.f);
  EXPECT_EQ(half_f32(0xc000), -2.f);
  EXPECT_EQ(half_f32(0x0001), std::ldexp(1.f, -24));  // smallest subnormal
  EXPECT_EQ(half_f32(0x7bff), 65504.f);
  // e4m3: S.EEEE.MMM, bias 7
  EXPECT_EQ(e4m3_f32(0x38), 1.f);       // e=7 m=0
  EXPECT_EQ(e4m3_f32(0xb9), -1.125f);   // sign, e=7 m=1
  EXPECT_EQ(e4m3_f32(0x7e), 448.f);     // e=15 m=6: 2^8 * 1.75
  EXPECT_EQ(e4m3_f32(0x01), std::ldexp(1.f, -9));  // subnormal 1/8 * 2^-6
  EXPECT_EQ(e4m3_f32(0x08), std::ldexp(1.f, -6));  // smallest normal
  EXPECT_TRUE(std::isnan(e4m3_f32(0x7f)));
  EXPECT_EQ(e8m0_f32(127), 1.f);
  EXPECT_EQ(e8m0_f32(130), 8.f);
  EXPECT_EQ(e8m0_f32(0), std::ldexp(1.f, -127));
  for (int c = 0; c < 256; ++c) {  // constexpr table == bit conversion
    if (c == 0x7f || c == 0xff) {
      EXPECT_TRUE(std::isnan(k_e4m3.v[c]));
      continue;
    }
    EXPECT_EQ(k_e4m3.v[c], e4m3_f32(static_cast<uint8_t>(c))) << c;
  }
  // nearest-even encoders
  for (int c = 0; c < 0x7f; ++c) {
    EXPECT_EQ(f32_to_e4m3(e4m3_f32(static_cast<uint8_t>(c))), c);
    EXPECT_EQ(f32_to_e4m3(-e4m3_f32(static_cast<uint8_t>(c))), c | 0x80);
  }
  EXPECT_EQ(f32_to_e4m3(1.0625f), 0x38);  // halfway 1 and 1.125: even mantissa (1.0)
  EXPECT_EQ(f32_to_e4m3(1.1875f), 0x3a);  // halfway 1.125 and 1.25: even (1.25)
  EXPECT_EQ(f32_to_e4m3(1000.f), 0x7e);   // saturates
  EXPECT_EQ(f32_to_e2m1(0.25f), 0);       // tie -> code 0
  EXPECT_EQ(f32_to_e2m1(0.75f), 2);       // tie 0.5/1.0 -> code 2 (1.0)
  EXPECT_EQ(f32_to_e2m1(2.5f), 4);        // tie 2/3 -> code 4 (2.0)
  EXPECT_EQ(f32_to_e2m1(5.f), 6);         // tie 4/6 -> code 6 (4.0)
  EXPECT_EQ(f32_to_e2m1(-7.f), 15);
  EXPECT_EQ(f32_to_e2m1(-2.9f), 13);
}

template <class F>
std::vector<float> deq(const typename F::Block& b) {
  std::vector<float> y(F::kElems);
  F::dequant(b, y.data());
  return y;
}

TEST(QuantVectors, Q4_0) {
  BlockQ4_0 b{};
  b.d = H_HALF;
  std::memset(b.qs, 0x88, 16);  // codes 8: zero
  b.qs[0] = 0x9f;  // el 0: (15-8)*0.5, el 16: (9-8)*0.5
  b.qs[1] = 0x00;  // el 1 and 17: (0-8)*0.5
  auto y = deq<Q4_0>(b);
  EXPECT_EQ(y[0], 3.5f);
  EXPECT_EQ(y[16], 0.5f);
  EXPECT_EQ(y[1], -4.f);
  EXPECT_EQ(y[17], -4.f);
  EXPECT_EQ(y[5], 0.f);
}

TEST(QuantVectors, Q4_1) {
  BlockQ4_1 b{};
  b.d = H_QUARTER;
  b.m = H_MINUS_ONE;
  b.qs[0] = 0x3c;  // el 0: 12*0.25-1 = 2, el 16: 3*0.25-1 = -0.25
  auto y = deq<Q4_1>(b);
  EXPECT_EQ(y[0], 2.f);
  EXPECT_EQ(y[16], -0.25f);
  EXPECT_EQ(y[3], -1.f);
}

TEST(QuantVectors, Q8_0) {
  BlockQ8_0 b{};
  b.d = H_TWO;
  b.qs[0] = -3;
  b.qs[31] = 127;
  auto y = deq<Q8_0>(b);
  EXPECT_EQ(y[0], -6.f);
  EXPECT_EQ(y[31], 254.f);
  EXPECT_EQ(y[1], 0.f);
}

TEST(QuantVectors, Q2_K) {
  BlockQ2_K b{};
  b.d = H_ONE;
  b.dmin = H_HALF;
  b.scales[0] = 0x32;  // group 0: sc 2, min 3
  b.scales[2] = 0x01;  // group 2: sc 1, min 0
  b.scales[4] = 0x14;  // group 4: sc 4, min 1
  b.scales[6] = 0x23;  // group 6: sc 3, min 2
  b.scales[8] = 0x01;  // group 8: sc 1, min 0
  b.qs[0] = 0xe4;      // bits 0-1 -> el 0 (q 0), 2-3 -> el 32 (q 1), 4-5 -> el 64 (q 2), 6-7 -> el 96 (q 3)
  b.qs[32 + 5] = 0x02; // second half, bits 0-1 -> el 128 + 5 (q 2)
  auto y = deq<Q2_K>(b);
  EXPECT_EQ(y[0], -1.5f);   // 1*2*0 - 0.5*3
  EXPECT_EQ(y[32], 1.f);    // 1*1*1 - 0
  EXPECT_EQ(y[64], 7.5f);   // 1*4*2 - 0.5*1
  EXPECT_EQ(y[96], 8.f);    // 1*3*3 - 0.5*2
  EXPECT_EQ(y[133], 2.f);   // 1*1*2
  EXPECT_EQ(y[15], -1.5f);  // same group as el 0, q 0
  EXPECT_EQ(y[200], 0.f);   // group 12: scale byte 0
}

TEST(QuantVectors, Q3_K) {
  BlockQ3_K b{};
  b.d = H_ONE;
  // Scale codes (value + 32): group 0 -> 2 (34 = 0b10'0010), group 5 -> -3 (29 = 0b01'1101),
  // group 9 -> 5 (37 = 0b10'0101); every other group is code 0 -> -32.
  b.scales[0] = 0x02;                   // group 0 low nibble
  b.scales[5] = 0x0d;                   // group 5 low nibble
  b.scales[1] = 0x50;                   // group 9 low nibble (byte 1 high nibble)
  b.scales[8] = 0x02;                   // group 0 high bits (bits 0-1)
  b.scales[9] = (0x1 << 2) | (0x2 << 4);  // group 5 high bits (bits 2-3), group 9 (bits 4-5)
  b.qs[0] = 0x03;     // el 0: low bits 3
  b.hmask[0] = 0x01;  // el 0: high bit (bit 0) -> q 7
  b.qs[16] = 0x10;    // el 80 (n 0, j 2, l 16): low bits 1, hmask[16] bit 2 clear -> q 1
  b.qs[48] = 0x02;    // el 144 (n 1, j 0, l 16): low bits 2
  b.hmask[16] = 0x10; // el 144 high bit (bit 4) -> q 6
  auto y = deq<Q3_K>(b);
  EXPECT_EQ(y[0], 6.f);    // (7-4)*2
  EXPECT_EQ(y[1], -8.f);   // (0-4)*2
  EXPECT_EQ(y[80], 9.f);   // (1-4)*-3
  EXPECT_EQ(y[144], 10.f); // (6-4)*5
  EXPECT_EQ(y[40], 128.f); // group 2, scale -32, q 0: (0-4)*-32
}

TEST(QuantVectors, Q4_K_Q5_K) {
  uint8_t scales[12] = {};
  scales[0] = 3;  // sub-block 0: sc 3
  scales[4] = 1;  // sub-block 0: min 1
  // sub-block 5: sc 34 = 0b10'0010, min 23 = 0b01'0111
  scales[9] = 0x72;         // low nibbles: sc 2 | min 7 << 4
  scales[1] |= 2 << 6;      // sc high bits
  scales[5] |= 1 << 6;      // min high bits
  BlockQ4_K b{};
  b.d = H_ONE;
  b.dmin = H_ONE;
  std::memcpy(b.scales, scales, 12);
  b.qs[0] = 0xa5;   // el 0 (sub-block 0): low nibble 5; el 32 (sub-block 1, sc 0 min 0): 10
  b.qs[64] = 0x70;  // el 160 (chunk 2, high nibble, sub-block 5): 7
  auto y = deq<Q4_K>(b);
  EXPECT_EQ(y[0], 14.f);    // 3*5 - 1
  EXPECT_EQ(y[32], 0.f);
  EXPECT_EQ(y[160], 215.f); // 34*7 - 23
  EXPECT_EQ(y[128], -0.f);  // sub-block 4: sc/min from bytes 8 and 0/4 high bits: 0
  BlockQ5_K c{};
  c.d = H_ONE;
  c.dmin = H_ONE;
  std::memcpy(c.scales, scales, 12);
  std::memcpy(c.qs, b.qs, 128);
  c.qh[0] = 0x01 | 0x20;  // el 0: bit 0 (chunk 0 low); el 160: bit 5 (chunk 2 high)
  auto z = deq<Q5_K>(c);
  EXPECT_EQ(z[0], 62.f);     // 3*(5+16) - 1
  EXPECT_EQ(z[160], 759.f);  // 34*(7+16) - 23
  EXPECT_EQ(z[32], 0.f);
}

TEST(QuantVectors, Q6_K) {
  BlockQ6_K b{};
  b.d = H_HALF;
  b.scales[0] = 2;
  b.scales[4] = 1;
  b.scales[11] = -1;
  b.ql[0] = 0x0f;  // el 0 low 4 bits 15; el 64 (i 2) high nibble 0
  b.qh[0] = 0x03;  // el 0 high bits 3 -> q 63; el 64 bits 4-5: 0
  b.ql[112] = 0x01;  // el 176 (n 1, i 1, l 16): ql[64 + 16 + 32] low nibble 1, qh[48] 0
  auto y = deq<Q6_K>(b);
  EXPECT_EQ(y[0], 31.f);     // (63-32)*0.5*2
  EXPECT_EQ(y[64], -16.f);   // (0-32)*0.5*1
  EXPECT_EQ(y[176], 15.5f);  // (1-32)*0.5*-1
}

TEST(QuantVectors, IQ4_NL_IQ4_XS) {
  BlockIQ4_NL b{};
  b.d = H_HALF;
  std::memset(b.qs, 0x88, 16);
  b.qs[0] = 0xf0;  // el 0: code 0 (-127), el 16: code 15 (113)
  auto y = deq<IQ4_NL>(b);
  EXPECT_EQ(y[0], -63.5f);
  EXPECT_EQ(y[16], 56.5f);
  EXPECT_EQ(y[1], 0.5f);  // code 8 = 1
  BlockIQ4_XS x{};
  x.d = H_QUARTER;
  x.scales_l[1] = 0x40;  // sub-block 3 low 4 bits of (4 + 32) = 36 = 0b10'0100
  x.scales_h = 2 << 6;   // sub-block 3 high bits
  x.qs[49] = 0x90;       // sub-block 3, byte 1: el 96+1 code 0, el 96+17 code 9 (13)
  auto z = deq<IQ4_XS>(x);
  EXPECT_EQ(z[113], 13.f);   // 0.25 * 4 * 13
  EXPECT_EQ(z[97], -127.f);  // 0.25 * 4 * -127
  EXPECT_EQ(z[0], 1016.f);   // sub-block 0: scale code 0 -> -32; 0.25 * -32 * -127
}

TEST(QuantVectors, MXFP4_NVFP4) {
  BlockMXFP4 b{};
  b.e = 126;        // 2^-1
  b.qs[0] = 0x7a;   // el 0: code 0b1010 = -1.0, el 16: code 7 = 6.0
  b.qs[1] = 0x13;   // el 1: code 3 = 1.5, el 17: code 1 = 0.5
  auto y = deq<MXFP4>(b);
  EXPECT_EQ(y[0], -0.5f);
  EXPECT_EQ(y[16], 3.f);
  EXPECT_EQ(y[1], 0.75f);
  EXPECT_EQ(y[17], 0.25f);
  BlockNVFP4 n{};
  n.d = 0x40;       // e4m3 2.0
  n.qs[0] = 0x9f;   // el 0: code 15 = -6, el 1: code 9 = -0.5
  n.qs[7] = 0x50;   // el 14: 0, el 15: code 5 = 3
  auto z = deq<NVFP4>(n);
  EXPECT_EQ(z[0], -12.f);
  EXPECT_EQ(z[1], -1.f);
  EXPECT_EQ(z[15], 6.f);
  std::vector<float> r(16);
  dequantize_row(QuantType::NVFP4, &n, r.data(), 16, 0.5f);  // global scale
  EXPECT_EQ(r[0], -6.f);
  EXPECT_EQ(r[15], 3.f);
}

TEST(QuantVectors, FP8Block128) {
  const int64_t rows = 130, cols = 130;  // 2x2 scale blocks, partial edges
  std::vector<uint8_t> q(rows * cols, 0);
  const float s[4] = {2.f, 3.f, 5.f, 7.f};
  q[0] = 0x38;                  // 1.0 in block (0, 0)
  q[129] = 0xc0;                // -2.0 in block (0, 1)
  q[129 * cols + 0] = 0x3c;     // 1.5 in block (1, 0)
  q[129 * cols + 129] = 0x01;   // 2^-9 in block (1, 1)
  std::vector<float> y(rows * cols);
  dequantize_fp8_b128(q.data(), s, rows, cols, y.data());
  EXPECT_EQ(y[0], 2.f);
  EXPECT_EQ(y[129], -6.f);
  EXPECT_EQ(y[129 * cols], 7.5f);
  EXPECT_EQ(y[129 * cols + 129], 7.f * std::ldexp(1.f, -9));
  EXPECT_THROW(dequantize_row(QuantType::FP8_E4M3_B128, q.data(), y.data(), 128), Error);
}

TEST(QuantRepack, GptOssMxfp4AndModelOptNvfp4) {
  // HF MXFP4: element 2j low nibble of byte j. Byte 0 = 0x2a: el 0 = code 0xa (-1), el 1 = code 2 (1).
  uint8_t blocks[16] = {};
  blocks[0] = 0x2a;
  blocks[15] = 0x70;  // el 30 = 0, el 31 = code 7 (6)
  const uint8_t scales[1] = {128};  // 2^1
  BlockMXFP4 b;
  mxfp4_from_hf(blocks, scales, 1, &b);
  float y[32];
  dequantize_row(QuantType::MXFP4, &b, y, 32);
  EXPECT_EQ(y[0], -2.f);
  EXPECT_EQ(y[1], 2.f);
  EXPECT_EQ(y[31], 12.f);
  EXPECT_EQ(y[30], 0.f);
  EXPECT_EQ(y[2], 0.f);
  // ModelOpt: 2 rows x 32 cols, scales [2, 2] e4m3
  uint8_t packed[2 * 16] = {}, sc[4] = {0x38, 0x40, 0x30, 0x48};  // 1, 2, 0.5, 4
  packed[0] = 0x51;        // row 0: el 0 = 0.5, el 1 = 3
  packed[16 + 8] = 0x0f;   // row 1, second block: el 16 = -6
  std::vector<BlockNVFP4> nb(4);
  nvfp4_from_modelopt(packed, sc, 2, 32, nb.data());
  float z[64];
  dequantize_row(QuantType::NVFP4, nb.data(), z, 64, 2.f);  // global scale 2
  EXPECT_EQ(z[0], 1.f);        // 0.5 * 1 * 2
  EXPECT_EQ(z[1], 6.f);        // 3 * 1 * 2
  EXPECT_EQ(z[32 + 16], -48.f);  // -6 * 4 * 2
  EXPECT_EQ(z[32 + 17], 0.f);
}

// decode() is dequant() in the d * u + m form the int8 kernels use.
TEST(QuantDecode, MatchesDequant) {
  std::mt19937 rng(7);
  for (QuantType t : all_types()) {
    visit_format(static_cast<uint32_t>(t), [&](auto f) {
      using F = decltype(f);
      for (int rep = 0; rep < 20; ++rep) {
        typename F::Block b;
        auto* p = reinterpret_cast<uint8_t*>(&b);
        for (size_t i = 0; i < sizeof(b); ++i) p[i] = static_cast<uint8_t>(rng());
        // keep scales finite: fp16 fields with small exponents, e8m0 / e4m3 scales not NaN
        if constexpr (requires { b.d; }) {
          if constexpr (sizeof(b.d) == 2) b.d = static_cast<uint16_t>(0x3000 | (rng() & 0x3ff));
          else b.d = static_cast<uint8_t>(rng() % 0x70);
        }
        if constexpr (requires { b.dmin; }) b.dmin = static_cast<uint16_t>(0x3000 | (rng() & 0x3ff));
        if constexpr (requires { b.m; }) b.m = static_cast<uint16_t>(0xb000 | (rng() & 0x3ff));
        if constexpr (requires { b.e; }) b.e = static_cast<uint8_t>(100 + rng() % 50);
        float y[F::kElems], d[F::kElems / 16], m[F::kElems / 16];
        uint8_t u[F::kElems];
        F::dequant(b, y);
        F::decode(b, u, d, m);
        for (int i = 0; i < F::kElems; ++i) {
          const uint8_t c = code<F>(u[i]);
          ASSERT_LE(c, F::kMaxU) << name(t);
          if (F::kHasBook) ASSERT_LT(u[i], 16) << name(t);
          const float v = d[i / 16] * c + m[i / 16];
          ASSERT_NEAR(v, y[i], 1e-5f * (std::fabs(m[i / 16]) + std::fabs(y[i])) + 1e-30f)
              << name(t) << " element " << i;
        }
      }
    });
  }
}

// Gaussian rows through each quantizer: relative RMS error within the format's bound.
TEST(QuantRoundTrip, ErrorWithinBound) {
  struct Case {
    QuantType t;
    double bound;
  };
  const Case cases[] = {
      {QuantType::Q8_0, 0.0065},  {QuantType::Q6_K, 0.019},   {QuantType::Q5_K, 0.04},
      {QuantType::Q4_K, 0.08},    {QuantType::Q4_1, 0.09},    {QuantType::Q4_0, 0.11},
      {QuantType::IQ4_NL, 0.09},  {QuantType::IQ4_XS, 0.09},  {QuantType::Q3_K, 0.16},
      {QuantType::Q2_K, 0.30},    {QuantType::MXFP4, 0.16},   {QuantType::NVFP4, 0.11},
      {QuantType::F16, 0.001},    {QuantType::BF16, 0.004},
  };
  const int64_t n = 4096;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> x(n), y(n);
  for (auto& v : x) v = nd(rng) * 0.02f;
  for (const Case& c : cases) {
    std::vector<uint8_t> q(row_bytes(c.t, n));
    const float gs = c.t == QuantType::NVFP4 ? nvfp4_global_scale(0.1f) : 1.f;
    quantize_row(c.t, x.data(), q.data(), n, gs);
    dequantize_row(c.t, q.data(), y.data(), n, gs);
    double e = 0, s = 0;
    for (int64_t i = 0; i < n; ++i) {
      e += double(y[i] - x[i]) * (y[i] - x[i]);
      s += double(x[i]) * x[i];
    }
    const double rel = std::sqrt(e / s);
    EXPECT_LT(rel, c.bound) << name(c.t);
    std::printf("  %-8s relative RMS error %.4f (bound %.3f)\n", std::string(name(c.t)).c_str(),
                rel, c.bound);
  }
}

TEST(QuantRoundTrip, ExactValuesSurvive) {
  // Values on a format's grid come back unchanged.
  std::vector<float> x(32), y(32);
  std::vector<uint8_t> q(row_bytes(QuantType::Q8_0, 32));
  for (int i = 0; i < 32; ++i) x[i] = static_cast<float>(i - 16) * 0.5f;
  x[0] = 63.5f;  // amax 63.5 = 127 * 0.5: d = 0.5 and every value is on the grid
  quantize_row(QuantType::Q8_0, x.data(), q.data(), 32);
  dequantize_row(QuantType::Q8_0, q.data(), y.data(), 32);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(y[i], x[i]) << i;
  // MXFP4: e2m1 values times a power of two
  std::vector<float> m(32);
  for (int i = 0; i < 32; ++i) m[i] = 0.5f * k_e2m1_x2[i % 16] * 4.f;
  std::vector<uint8_t> qm(row_bytes(QuantType::MXFP4, 32));
  quantize_row(QuantType::MXFP4, m.data(), qm.data(), 32);
  dequantize_row(QuantType::MXFP4, qm.data(), y.data(), 32);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(y[i], m[i]) << i;
}

TEST(QuantRoundTrip, FP8Block128) {
  const int64_t rows = 200, cols = 300;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> x(rows * cols), y(rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i) x[i] = nd(rng) * (1.f + static_cast<float>(i % cols) / 50.f);
  std::vector<uint8_t> q(rows * cols);
  std::vector<float> s(fp8_b128_scale_count(rows, cols));
  quantize_fp8_b128(x.data(), rows, cols, q.data(), s.data());
  dequantize_fp8_b128(q.data(), s.data(), rows, cols, y.data());
  double e = 0, t = 0;
  for (int64_t i = 0; i < rows * cols; ++i) {
    e += double(y[i] - x[i]) * (y[i] - x[i]);
    t += double(x[i]) * x[i];
    // e4m3 has 3 mantissa bits: each value within half an ulp (2^-4 relative) or the subnormal step
    const float sc = s[(i / cols / 128) * 3 + (i % cols) / 128];
    ASSERT_LE(std::fabs(y[i] - x[i]), std::fabs(x[i]) / 16.f + sc * std::ldexp(1.f, -10)) << i;
  }
  EXPECT_LT(std::sqrt(e / t), 0.04);
}

}  // namespace
}  // namespace ft::quant
