// Host side of quant_codes_test: the CUDA decoders of quant_device.cuh (code_words, code_group,
// dot_u8s8, with the byte permute / funnel shift / dp4a emulated on the host) over one row of
// blocks and the int8-activation dot product the chunked GEMV computes from them, and
// quant_dot32.cuh's units (the one-token streaming GEMV) at every block alignment.
#include <cmath>

#include <cstring>
#include <vector>

#include "backend/cuda/quant_device.cuh"
#include "backend/cuda/quant_dot32.cuh"
#include "quant_codes.h"

namespace ft::cuda_checks {

namespace {
// The row's activations rounded as the streaming GEMV's quantize step (per 16, or per 32 for
// NIBBLE_PAIRS formats): unit u's XUnit.
template <class F>
cuda::XUnit x_unit(const float* x, int64_t u, double* xr) {
  cuda::XUnit xu{};
  float a[2] = {0, 0};
  for (int i = 0; i < 32; ++i) a[i / 16] = std::fmax(a[i / 16], std::fabs(x[32 * u + i]));
  if (cuda::x_order<F>() == cuda::XOrder::NIBBLE_PAIRS) a[0] = a[1] = std::fmax(a[0], a[1]);
  const float dx[2] = {a[0] * (1.f / 127.f), a[1] * (1.f / 127.f)};
  int q[32], sum[2] = {0, 0};
  for (int i = 0; i < 32; ++i) {
    const float inv = a[i / 16] > 0 ? 127.f / a[i / 16] : 0.f;
    q[i] = static_cast<int>(std::nearbyint(x[32 * u + i] * inv));
    sum[i / 16] += q[i];
    xr[i] = static_cast<double>(dx[i / 16]) * q[i];
  }
  for (int p = 0; p < 32; ++p)
    xu.q[p / 4] |= static_cast<uint32_t>(q[cuda::x_element(cuda::x_order<F>(), p)] & 0xff) << (8 * (p % 4));
  xu.dx0 = dx[0], xu.dx1 = dx[1];
  xu.s0 = dx[0] * cuda::i2f(sum[0]), xu.s1 = dx[1] * cuda::i2f(sum[1]);
  return xu;
}

// dot_units (dot32, or the format's unit groups) over the row at alignment A: the row copied to every A-aligned offset from a 16-byte
// boundary (A = 1: the funnel path at every misalignment), against the f64 dot.
template <class F, int A>
void check_dot32(const uint8_t* row, const float* x, const float* w, int64_t cols, CodesResult& res) {
  constexpr int bb = sizeof(typename F::Block);
  constexpr int upb = cuda::units_per_block<F>(), bpu = cuda::blocks_per_unit<F>();
  const int64_t nb = cols / F::kElems, bytes = nb * bb;
  for (int shift = 0; shift < 16; shift += A) {
    std::vector<uint8_t> buf(bytes + 64);
    uint8_t* base = buf.data() + ((16 - reinterpret_cast<uintptr_t>(buf.data()) % 16) % 16) + shift;
    std::memcpy(base, row, bytes);
    double got = 0, want = 0, mag = 0;
    constexpr int G = cuda::unit_group<F>();  // units dotted at once (dot_units)
    for (int64_t u = 0; u < cols / 32; u += G) {
      cuda::XUnit xu[G];
      for (int k = 0; k < G; ++k) {
        double xr[32];
        xu[k] = x_unit<F>(x, u + k, xr);
        for (int i = 0; i < 32; ++i) {
          want += double(w[32 * (u + k) + i]) * xr[i];
          mag += std::fabs(double(w[32 * (u + k) + i]) * xr[i]);
        }
      }
      const int64_t blk = u / upb * bpu;  // the unit's first block
      auto xk = [&](int k) { return xu[k]; };
      got += cuda::dot_units<F, A>(base + blk * bb, static_cast<int>(u % upb), xk, cuda::tables<F>(0));
    }
    res.dot32 = got, res.dot32_acts = want;
    res.dot32_err = std::max(res.dot32_err, std::fabs(got - want) / (mag > 0 ? mag : 1.0));
  }
}

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
  constexpr int al = cuda::block_align<F>();
  check_dot32<F, 1>(row, x, w, cols, res);
  if constexpr (al >= 2) check_dot32<F, al>(row, x, w, cols, res);
  if constexpr (cuda::has_wide<F>()) {  // the wider lane groups too, into the same error
    using W = cuda::Wide<F>;
    constexpr int wal = cuda::block_align<W>();
    check_dot32<W, 1>(row, x, w, cols, res);
    if constexpr (wal >= 2) check_dot32<W, wal>(row, x, w, cols, res);
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
