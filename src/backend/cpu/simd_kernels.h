// Kernels written once over a SIMD traits type S (see kernels_avx2.cpp, kernels_avx512.cpp).
// S provides: V, W (lanes), zero(), load(const float*), load(const bf16_t*), load(const f16_t*),
// store(float*, V), set1(float), fma(a, b, c), mul, add, sub, reduce(V) and exp(V) for silu and
// the sampler.
// Include only from a translation unit compiled for S's instruction set.
#pragma once
#include <algorithm>
#include <cmath>

#include "backend/cpu/kernels.h"
#include "base/half.h"

namespace ft::cpu::simd {

inline float scalar(float v) { return v; }
inline float scalar(bf16_t v) { return bf16_to_f32(v.bits); }
inline float scalar(f16_t v) { return f16_to_f32(v.bits); }

// RO weight rows x RT tokens, full k. Accumulators stay in registers; one horizontal reduce each.
template <class S, int RO, int RT, typename W>
inline void gemm_micro(const float* x, int64_t k, const W* w, int64_t r, int64_t t, float* y,
                       int64_t ldy) {
  typename S::V acc[RO][RT];
  for (int i = 0; i < RO; ++i)
    for (int j = 0; j < RT; ++j) acc[i][j] = S::zero();
  const int64_t kv = k - k % S::W;
  for (int64_t p = 0; p < kv; p += S::W) {
    typename S::V xv[RT];
    for (int j = 0; j < RT; ++j) xv[j] = S::load(x + (t + j) * k + p);
    for (int i = 0; i < RO; ++i) {
      typename S::V wv = S::load(w + (r + i) * k + p);
      for (int j = 0; j < RT; ++j) acc[i][j] = S::fma(wv, xv[j], acc[i][j]);
    }
  }
  for (int i = 0; i < RO; ++i)
    for (int j = 0; j < RT; ++j) {
      float s = S::reduce(acc[i][j]);
      for (int64_t p = kv; p < k; ++p) s += x[(t + j) * k + p] * scalar(w[(r + i) * k + p]);
      y[(t + j) * ldy + r + i] = s;
    }
}

template <class S, int RO, typename W>
inline void gemm_rows(const float* x, int64_t t0, int64_t t1, int64_t k, const W* w, int64_t r,
                      float* y, int64_t ldy) {
  int64_t t = t0;
  for (; t + 4 <= t1; t += 4) gemm_micro<S, RO, 4>(x, k, w, r, t, y, ldy);
  switch (t1 - t) {
    case 3: gemm_micro<S, RO, 3>(x, k, w, r, t, y, ldy); break;
    case 2: gemm_micro<S, RO, 2>(x, k, w, r, t, y, ldy); break;
    case 1: gemm_micro<S, RO, 1>(x, k, w, r, t, y, ldy); break;
    default: break;
  }
}

// Tokens are blocked so a block of x stays in L2 while the weight rows stream past it.
template <class S, typename W>
void gemm(const float* x, int64_t n, int64_t k, const W* w, int64_t r0, int64_t r1, float* y,
          int64_t ldy) {
  const int64_t t_block = std::max<int64_t>(4, (256 * 1024 / 4) / std::max<int64_t>(k, 1) & ~3);
  for (int64_t tb = 0; tb < n; tb += t_block) {
    int64_t te = std::min(n, tb + t_block);
    int64_t r = r0;
    for (; r + 4 <= r1; r += 4) gemm_rows<S, 4>(x, tb, te, k, w, r, y, ldy);
    for (; r < r1; ++r) gemm_rows<S, 1>(x, tb, te, k, w, r, y, ldy);
  }
}

template <class S>
float dot(const float* a, const float* b, int64_t n) {
  typename S::V acc = S::zero();
  int64_t i = 0;
  for (; i + S::W <= n; i += S::W) acc = S::fma(S::load(a + i), S::load(b + i), acc);
  float s = S::reduce(acc);
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

template <class S>
void axpy(float a, const float* x, float* y, int64_t n) {
  typename S::V av = S::set1(a);
  int64_t i = 0;
  for (; i + S::W <= n; i += S::W) S::store(y + i, S::fma(av, S::load(x + i), S::load(y + i)));
  for (; i < n; ++i) y[i] += a * x[i];
}

template <class S>
void rmsnorm(const float* x, const float* w, float eps, int64_t n, float* y) {
  float ss = dot<S>(x, x, n);
  float inv = 1.f / std::sqrt(ss / static_cast<float>(n) + eps);
  typename S::V iv = S::set1(inv);
  int64_t i = 0;
  for (; i + S::W <= n; i += S::W) S::store(y + i, S::mul(S::mul(S::load(x + i), iv), S::load(w + i)));
  for (; i < n; ++i) y[i] = x[i] * inv * w[i];
}

template <class S>
void silu_mul(const float* g, const float* u, int64_t n, float* y) {
  int64_t i = 0;
  typename S::V one = S::set1(1.f);
  for (; i + S::W <= n; i += S::W) {
    typename S::V gv = S::load(g + i);
    typename S::V sig = S::div(one, S::add(one, S::exp(S::neg(gv))));
    S::store(y + i, S::mul(S::mul(gv, sig), S::load(u + i)));
  }
  for (; i < n; ++i) y[i] = g[i] / (1.f + std::exp(-g[i])) * u[i];
}

template <class S>
double exp_sum(const float* x, int64_t n, float sub, float scale, float* y) {
  constexpr int64_t k_chunk = 1024;  // float lanes per chunk, then a double: ~1e-7 of the sum
  const typename S::V vs = S::set1(sub), vk = S::set1(scale);
  double total = 0;
  int64_t i = 0;
  while (i + S::W <= n) {
    const int64_t end = std::min(n - (n - i) % S::W, i + k_chunk);
    typename S::V acc = S::zero();
    for (; i < end; i += S::W) {
      const typename S::V e = S::exp(S::mul(S::sub(S::load(x + i), vs), vk));
      S::store(y + i, e);
      acc = S::add(acc, e);
    }
    total += S::reduce(acc);
  }
  for (; i < n; ++i) total += y[i] = std::exp((x[i] - sub) * scale);
  return total;
}

// constexpr: the per-ISA files' tables are constant-initialized, so no code compiled for
// their instruction set runs at startup (tests/unit/isa_static_init.sh).
template <class S>
constexpr Kernels make_kernels(const char* isa) {
  return Kernels{
      .isa = isa,
      .gemm_f32 = gemm<S, float>,
      .gemm_bf16 = gemm<S, bf16_t>,
      .gemm_f16 = gemm<S, f16_t>,
      .dot = dot<S>,
      .axpy = axpy<S>,
      .rmsnorm = rmsnorm<S>,
      .silu_mul = silu_mul<S>,
      .exp_sum = exp_sum<S>,
  };
}

// exp(x) for SIMD traits with floor/ldexp-style helpers: range-reduce to 2^n * e^r and a
// degree-6 polynomial; relative error ~1e-7 over the float range, clamped at the ends.
template <class S>
typename S::V exp_approx(typename S::V x) {
  using V = typename S::V;
  x = S::max(S::min(x, S::set1(88.3762626647949f)), S::set1(-87.3365447504f));
  V n = S::round(S::mul(x, S::set1(1.44269504088896341f)));
  V r = S::fma(n, S::set1(-0.693359375f), x);
  r = S::fma(n, S::set1(2.12194440e-4f), r);
  V p = S::set1(1.9875691500e-4f);
  p = S::fma(p, r, S::set1(1.3981999507e-3f));
  p = S::fma(p, r, S::set1(8.3334519073e-3f));
  p = S::fma(p, r, S::set1(4.1665795894e-2f));
  p = S::fma(p, r, S::set1(1.6666665459e-1f));
  p = S::fma(p, r, S::set1(5.0000001201e-1f));
  p = S::fma(p, S::mul(r, r), S::add(r, S::set1(1.f)));
  return S::scale2(p, n);
}

}  // namespace ft::cpu::simd
