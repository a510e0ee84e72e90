// Host side of quant_codes_test: the CUDA decoders of quant_device.cuh (code_words, code_group,
// dot_u8s8, with the byte permute / funnel shift / dp4a emulated on the host) over one row of
// blocks, code_pair against two code_words, and the int8-activation dot product the GEMV
// kernel computes from them.
#include <cmath>

#include "backend/cuda/quant_device.cuh"
#include "quant_codes.h"

namespace ft::cuda_checks {

namespace {
template <class F>
CodesResult run(const uint8_t* row, const float* x, int64_t cols, float* w) {
  using Block = typename F::Block;
  CodesResult res;
  const Block* bl = reinterpret_cast<const Block*>(row);
  for (int64_t b = 0; b < cols / F::kElems; ++b)
    for (int g = 0; g < F::kElems / 16; ++g) {
      const int64_t c0 = b * F::kElems + 16 * g;
      uint32_t u[4];
      float d, m, f[16], du, dm;
      cuda::code_words(bl[b], g, u, d, m);
      if constexpr (F::kElems > 16) {
        if (g % 2 == 0) {  // code_pair's two groups vs code_words on each
          uint32_t p0[4], p1[4], u1[4];
          float d0, m0, d1, m1, e1, n1;
          cuda::code_pair(bl[b], g, p0, p1, d0, m0, d1, m1);
          cuda::code_words(bl[b], g + 1, u1, e1, n1);
          for (int k = 0; k < 4; ++k)
            if (p0[k] != u[k] || p1[k] != u1[k]) res.pair_vs_words = false;
          if (d0 != d || m0 != m || d1 != e1 || m1 != n1) res.pair_vs_words = false;
        }
      }
      cuda::code_group(bl[b], g, f, du, dm);
      for (int i = 0; i < 16; ++i) {
        const float code = static_cast<float>((u[i / 4] >> (8 * (i % 4))) & 0xff);
        w[c0 + i] = std::fmaf(d, code, m);
        if (code != f[i] || d != du || m != dm) res.words_vs_floats = false;
      }
      // x rounded to int8 as the kernel's quantize_acts does, then the kernel's group sum
      float a = 0;
      for (int i = 0; i < 16; ++i) a = std::fmax(a, std::fabs(x[c0 + i]));
      const float inv = a > 0 ? 127.f / a : 0.f, dx = a * (1.f / 127.f);
      uint32_t q[4] = {};
      int sq = 0;
      for (int i = 0; i < 16; ++i) {
        const int qi = static_cast<int>(std::nearbyint(x[c0 + i] * inv));
        sq += qi;
        q[i / 4] |= static_cast<uint32_t>(qi & 0xff) << (8 * (i % 4));
      }
      int su = 0;
      for (int k = 0; k < 4; ++k) su = cuda::dot_u8s8(u[k], q[k], su);
      res.dot += static_cast<double>(d) * dx * su + static_cast<double>(m) * dx * sq;
    }
  return res;
}
}  // namespace

CodesResult quant_codes(DType dt, const uint8_t* row, const float* x, int64_t cols, float* w) {
  CodesResult res;
  res.supported = cuda::dispatch_quant(dt, [&](auto f) {
    using F = decltype(f);
    if constexpr (cuda::has_code_words<F>()) res = run<F>(row, x, cols, w);
  }) && dt != DType::F8_E4M3_B128;
  return res;
}

}  // namespace ft::cuda_checks
