// Reference quantizers: round to nearest with a small least-squares scale search per block
// (K-quants, IQ4) and the format's scale rule elsewhere. Host only; not bit-matched to ggml.
#include "quant/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "base/half.h"

namespace ft::quant {

namespace {
uint16_t to_half(float v) { return f32_to_f16(v); }
int nearest(float v) { return static_cast<int>(std::nearbyint(v)); }
int clampi(int v, int lo, int hi) { return std::min(hi, std::max(lo, v)); }

// The signed element of largest magnitude.
float signed_amax(const float* x, int n) {
  float v = 0.f;
  for (int i = 0; i < n; ++i)
    if (std::fabs(x[i]) > std::fabs(v)) v = x[i];
  return v;
}

// w ~= s * q - mn with q in [0, nmax], s >= 0, mn >= 0: candidate scales around the range,
// each followed by a least-squares solve for (s, mn) on its rounded codes; keeps the best.
void fit_affine(const float* x, int n, int nmax, float* s_out, float* mn_out) {
  float lo = 0.f, hi = x[0];
  for (int i = 0; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  *s_out = 0.f;
  *mn_out = -lo;
  if (hi <= lo) return;
  float best = std::numeric_limits<float>::max();
  for (int step = 0; step <= 24; ++step) {
    const float s0 = (hi - lo) / (static_cast<float>(nmax) + 0.0625f * (step - 8));
    if (s0 <= 0.f) continue;
    double sq = 0, sqq = 0, sx = 0, sqx = 0;
    int q[256];
    for (int i = 0; i < n; ++i) {
      q[i] = clampi(nearest((x[i] - lo) / s0), 0, nmax);
      sq += q[i];
      sqq += double(q[i]) * q[i];
      sx += x[i];
      sqx += double(q[i]) * x[i];
    }
    const double det = n * sqq - sq * sq;
    if (det <= 0) continue;
    double s = (n * sqx - sq * sx) / det, b = (sx - s * sq) / n;
    if (b > 0) {  // the offset is stored as a non-negative min: refit through the origin
      b = 0;
      s = sqq > 0 ? sqx / sqq : 0;
    }
    if (s <= 0) continue;
    double err = 0;
    for (int i = 0; i < n; ++i) {
      const double e = s * q[i] + b - x[i];
      err += e * e;
    }
    if (err < best) {
      best = static_cast<float>(err);
      *s_out = static_cast<float>(s);
      *mn_out = static_cast<float>(-b);
    }
  }
}

// w ~= s * q with q in [qmin, qmax] (s may be negative): same search, origin-constrained.
float fit_symmetric(const float* x, int n, int qmin, int qmax) {
  const float vmax = signed_amax(x, n);
  if (vmax == 0.f) return 0.f;
  float best = std::numeric_limits<float>::max(), best_s = vmax / static_cast<float>(qmin);
  for (int end : {qmin, qmax})
    for (int step = -6; step <= 6; ++step) {
      const float s0 = vmax / (static_cast<float>(end) + 0.1f * step * (end < 0 ? -1 : 1));
      double sqq = 0, sqx = 0;
      int q[256];
      for (int i = 0; i < n; ++i) {
        q[i] = clampi(nearest(x[i] / s0), qmin, qmax);
        sqq += double(q[i]) * q[i];
        sqx += double(q[i]) * x[i];
      }
      if (sqq == 0) continue;
      const double s = sqx / sqq;
      double err = 0;
      for (int i = 0; i < n; ++i) err += (s * q[i] - x[i]) * (s * q[i] - x[i]);
      if (err < best) {
        best = static_cast<float>(err);
        best_s = static_cast<float>(s);
      }
    }
  return best_s;
}

int nearest_code(const int8_t* book, float v) {
  int best = 0;
  float bd = std::fabs(v - book[0]);
  for (int i = 1; i < 16; ++i) {
    const float dd = std::fabs(v - book[i]);
    if (dd < bd) {
      bd = dd;
      best = i;
    }
  }
  return best;
}

// IQ4_NL codebook scale for n values: candidates mapping the largest value to either end,
// each refined by least squares on its codes.
float fit_iq4(const float* x, int n) {
  const float vmax = signed_amax(x, n);
  if (vmax == 0.f) return 0.f;
  float best = std::numeric_limits<float>::max(), best_d = vmax / -127.f;
  for (float end : {-127.f, 113.f})
    for (int step = -8; step <= 8; ++step) {
      const float d0 = vmax / end * (1.f + 0.02f * step);
      double skk = 0, skx = 0;
      int c[32];
      for (int i = 0; i < n; ++i) {
        c[i] = nearest_code(k_iq4nl, x[i] / d0);
        skk += double(k_iq4nl[c[i]]) * k_iq4nl[c[i]];
        skx += double(k_iq4nl[c[i]]) * x[i];
      }
      const double d = skx / skk;
      double err = 0;
      for (int i = 0; i < n; ++i) err += (d * k_iq4nl[c[i]] - x[i]) * (d * k_iq4nl[c[i]] - x[i]);
      if (err < best) {
        best = static_cast<float>(err);
        best_d = static_cast<float>(d);
      }
    }
  return best_d;
}

// Packs 32 values as IQ4_NL nibbles at scale d (element i low nibble, i + 16 high).
void pack_iq4(const float* x, float d, uint8_t* qs) {
  const float id = d != 0.f ? 1.f / d : 0.f;
  for (int i = 0; i < 16; ++i)
    qs[i] = static_cast<uint8_t>(nearest_code(k_iq4nl, x[i] * id) |
                                 (nearest_code(k_iq4nl, x[i + 16] * id) << 4));
}

// 6-bit (or 4-bit) super-block quantization of non-negative sub-block values.
void quantize_scales(const float* v, int n, int max_code, uint16_t* dh, int* codes) {
  float vmax = 0.f;
  for (int i = 0; i < n; ++i) vmax = std::max(vmax, v[i]);
  *dh = to_half(vmax / static_cast<float>(max_code));
  const float d = half_f32(*dh);
  for (int i = 0; i < n; ++i) codes[i] = d > 0 ? clampi(nearest(v[i] / d), 0, max_code) : 0;
}

// Signed super-block scale so the largest |v| maps to code `lo` (-32 or -128).
void quantize_signed_scales(const float* v, int n, int lo, int hi, uint16_t* dh, int* codes) {
  const float vmax = signed_amax(v, n);
  *dh = to_half(vmax / static_cast<float>(lo));
  const float d = half_f32(*dh);
  for (int i = 0; i < n; ++i) codes[i] = d != 0.f ? clampi(nearest(v[i] / d), lo, hi) : 0;
}

// Codes of an affine K-quant sub-block at the stored scale and min.
void affine_codes(const float* x, int n, float d, float mn, int nmax, int* q) {
  for (int i = 0; i < n; ++i) q[i] = d > 0 ? clampi(nearest((x[i] + mn) / d), 0, nmax) : 0;
}

float mx_error(const float* x, int n, float scale) {
  float err = 0.f;
  for (int i = 0; i < n; ++i) {
    const float v = 0.5f * k_e2m1_x2[f32_to_e2m1(x[i] / scale)] * scale - x[i];
    err += v * v;
  }
  return err;
}
}  // namespace

uint8_t f32_to_e4m3(float v) {
  if (std::isnan(v)) return 0x7f;
  const uint8_t sign = std::signbit(v) ? 0x80 : 0;
  const float a = std::fabs(v);
  if (a >= 448.f) return sign | 0x7e;
  int lo = 0, hi = 0x7e;  // largest code with value <= a
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (e4m3_f32(static_cast<uint8_t>(mid)) <= a) lo = mid; else hi = mid - 1;
  }
  const float below = e4m3_f32(static_cast<uint8_t>(lo));
  if (below == a) return sign | lo;
  const float above = e4m3_f32(static_cast<uint8_t>(lo + 1));
  const float db = a - below, da = above - a;
  const int code = db < da ? lo : da < db ? lo + 1 : ((lo & 1) ? lo + 1 : lo);
  return static_cast<uint8_t>(sign | code);
}

uint8_t f32_to_e2m1(float v) {
  static constexpr float k_mag[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
  const uint8_t sign = std::signbit(v) ? 8 : 0;
  const float a = std::fabs(v);
  if (!(a < 6.f)) return sign | 7;  // saturate (and NaN)
  int c = 0;
  while (c < 7 && k_mag[c + 1] <= a) ++c;
  if (k_mag[c] == a) return sign | c;
  const float db = a - k_mag[c], da = k_mag[c + 1] - a;
  const int code = db < da ? c : da < db ? c + 1 : ((c & 1) ? c + 1 : c);
  return static_cast<uint8_t>(sign | code);
}

void quantize_block(const float* x, BlockQ4_0* b) {
  const float d = signed_amax(x, 32) / -8.f;
  b->d = to_half(d);
  const float dh = half_f32(b->d), id = dh != 0.f ? 1.f / dh : 0.f;
  for (int i = 0; i < 16; ++i)
    b->qs[i] = static_cast<uint8_t>(clampi(nearest(x[i] * id) + 8, 0, 15) |
                                    (clampi(nearest(x[i + 16] * id) + 8, 0, 15) << 4));
}

void quantize_block(const float* x, BlockQ4_1* b) {
  float lo = x[0], hi = x[0];
  for (int i = 0; i < 32; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  b->d = to_half((hi - lo) / 15.f);
  b->m = to_half(lo);
  const float dh = half_f32(b->d), mh = half_f32(b->m), id = dh != 0.f ? 1.f / dh : 0.f;
  for (int i = 0; i < 16; ++i)
    b->qs[i] = static_cast<uint8_t>(clampi(nearest((x[i] - mh) * id), 0, 15) |
                                    (clampi(nearest((x[i + 16] - mh) * id), 0, 15) << 4));
}

void quantize_block(const float* x, BlockQ8_0* b) {
  b->d = to_half(std::fabs(signed_amax(x, 32)) / 127.f);
  const float dh = half_f32(b->d), id = dh != 0.f ? 1.f / dh : 0.f;
  for (int i = 0; i < 32; ++i) b->qs[i] = static_cast<int8_t>(clampi(nearest(x[i] * id), -127, 127));
}

void quantize_block(const float* x, BlockQ2_K* b) {
  float s[16], mn[16];
  for (int g = 0; g < 16; ++g) fit_affine(x + 16 * g, 16, 3, &s[g], &mn[g]);
  int sc[16], mc[16];
  quantize_scales(s, 16, 15, &b->d, sc);
  quantize_scales(mn, 16, 15, &b->dmin, mc);
  const float d = half_f32(b->d), dmin = half_f32(b->dmin);
  std::memset(b->qs, 0, sizeof(b->qs));
  for (int g = 0; g < 16; ++g) {
    b->scales[g] = static_cast<uint8_t>(sc[g] | (mc[g] << 4));
    int q[16];
    affine_codes(x + 16 * g, 16, d * sc[g], dmin * mc[g], 3, q);
    for (int i = 0; i < 16; ++i) {
      const int e = 16 * g + i, n = e >> 7, j = (e >> 5) & 3, l = e & 31;
      b->qs[32 * n + l] |= static_cast<uint8_t>(q[i] << (2 * j));
    }
  }
}

void quantize_block(const float* x, BlockQ3_K* b) {
  float s[16];
  for (int g = 0; g < 16; ++g) s[g] = fit_symmetric(x + 16 * g, 16, -4, 3);
  int sc[16];
  quantize_signed_scales(s, 16, -32, 31, &b->d, sc);
  const float d = half_f32(b->d);
  std::memset(b->hmask, 0, sizeof(b->hmask));
  std::memset(b->qs, 0, sizeof(b->qs));
  std::memset(b->scales, 0, sizeof(b->scales));
  for (int g = 0; g < 16; ++g) {
    const int v = sc[g] + 32;
    b->scales[g & 7] |= static_cast<uint8_t>((v & 0xf) << (g < 8 ? 0 : 4));
    b->scales[8 + (g & 3)] |= static_cast<uint8_t>((v >> 4) << (2 * (g >> 2)));
    const float dl = d * sc[g];
    for (int i = 0; i < 16; ++i) {
      const int e = 16 * g + i, n = e >> 7, j = (e >> 5) & 3, l = e & 31;
      const int u = dl != 0.f ? clampi(nearest(x[e] / dl), -4, 3) + 4 : 4;
      b->qs[32 * n + l] |= static_cast<uint8_t>((u & 3) << (2 * j));
      b->hmask[l] |= static_cast<uint8_t>((u >> 2) << (4 * n + j));
    }
  }
}

namespace {
// Shared by Q4_K and Q5_K: 8 sub-blocks of 32, 6-bit scales and mins packed into 12 bytes.
void k4_fit(const float* x, int nmax, uint16_t* dh, uint16_t* dminh, uint8_t* scales,
            int q[256]) {
  float s[8], mn[8];
  for (int j = 0; j < 8; ++j) fit_affine(x + 32 * j, 32, nmax, &s[j], &mn[j]);
  int sc[8], mc[8];
  quantize_scales(s, 8, 63, dh, sc);
  quantize_scales(mn, 8, 63, dminh, mc);
  std::memset(scales, 0, 12);
  for (int j = 0; j < 4; ++j) {
    scales[j] = static_cast<uint8_t>(sc[j]);
    scales[j + 4] = static_cast<uint8_t>(mc[j]);
  }
  for (int j = 4; j < 8; ++j) {
    scales[j + 4] = static_cast<uint8_t>((sc[j] & 0xf) | ((mc[j] & 0xf) << 4));
    scales[j - 4] |= static_cast<uint8_t>((sc[j] >> 4) << 6);
    scales[j] |= static_cast<uint8_t>((mc[j] >> 4) << 6);
  }
  const float d = half_f32(*dh), dmin = half_f32(*dminh);
  for (int j = 0; j < 8; ++j) affine_codes(x + 32 * j, 32, d * sc[j], dmin * mc[j], nmax, q + 32 * j);
}
}  // namespace

void quantize_block(const float* x, BlockQ4_K* b) {
  int q[256];
  k4_fit(x, 15, &b->d, &b->dmin, b->scales, q);
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l)
      b->qs[32 * c + l] = static_cast<uint8_t>(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
}

void quantize_block(const float* x, BlockQ5_K* b) {
  int q[256];
  k4_fit(x, 31, &b->d, &b->dmin, b->scales, q);
  std::memset(b->qh, 0, sizeof(b->qh));
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) {
      const int lo = q[64 * c + l], hi = q[64 * c + 32 + l];
      b->qs[32 * c + l] = static_cast<uint8_t>((lo & 0xf) | ((hi & 0xf) << 4));
      b->qh[l] |= static_cast<uint8_t>(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
    }
}

void quantize_block(const float* x, BlockQ6_K* b) {
  float s[16];
  for (int g = 0; g < 16; ++g) s[g] = fit_symmetric(x + 16 * g, 16, -32, 31);
  int sc[16];
  quantize_signed_scales(s, 16, -128, 127, &b->d, sc);
  const float d = half_f32(b->d);
  std::memset(b->ql, 0, sizeof(b->ql));
  std::memset(b->qh, 0, sizeof(b->qh));
  for (int g = 0; g < 16; ++g) {
    b->scales[g] = static_cast<int8_t>(sc[g]);
    const float dl = d * sc[g];
    for (int k = 0; k < 16; ++k) {
      const int e = 16 * g + k, n = e >> 7, i = (e >> 5) & 3, l = e & 31;
      const int u = dl != 0.f ? clampi(nearest(x[e] / dl), -32, 31) + 32 : 32;
      b->ql[64 * n + l + 32 * (i & 1)] |= static_cast<uint8_t>((u & 0xf) << (4 * (i >> 1)));
      b->qh[32 * n + l] |= static_cast<uint8_t>((u >> 4) << (2 * i));
    }
  }
}

void quantize_block(const float* x, BlockIQ4_NL* b) {
  b->d = to_half(fit_iq4(x, 32));
  pack_iq4(x, half_f32(b->d), b->qs);
}

void quantize_block(const float* x, BlockIQ4_XS* b) {
  float s[8];
  for (int j = 0; j < 8; ++j) s[j] = fit_iq4(x + 32 * j, 32);
  int ls[8];
  quantize_signed_scales(s, 8, -32, 31, &b->d, ls);
  const float d = half_f32(b->d);
  b->scales_h = 0;
  std::memset(b->scales_l, 0, sizeof(b->scales_l));
  for (int j = 0; j < 8; ++j) {
    const int v = ls[j] + 32;
    b->scales_l[j >> 1] |= static_cast<uint8_t>((v & 0xf) << (4 * (j & 1)));
    b->scales_h |= static_cast<uint16_t>((v >> 4) << (2 * j));
    pack_iq4(x + 32 * j, d * ls[j], b->qs + 16 * j);
  }
}

void quantize_block(const float* x, BlockMXFP4* b) {
  const float amax = std::fabs(signed_amax(x, 32));
  int e = 0;  // OCP rule: 2^(floor(log2 amax) - emax(e2m1) = 2); also try one step up
  if (amax > 0.f) e = clampi(std::ilogb(amax) - 2 + 127, 0, 253);
  float best = mx_error(x, 32, e8m0_f32(static_cast<uint8_t>(e)));
  if (amax > 0.f && mx_error(x, 32, e8m0_f32(static_cast<uint8_t>(e + 1))) < best) ++e;
  b->e = static_cast<uint8_t>(e);
  const float scale = e8m0_f32(b->e);
  for (int i = 0; i < 16; ++i)
    b->qs[i] = static_cast<uint8_t>(f32_to_e2m1(x[i] / scale) | (f32_to_e2m1(x[i + 16] / scale) << 4));
}

void quantize_block(const float* x, BlockNVFP4* b, float global_scale) {
  float v[16], amax = 0.f;
  for (int i = 0; i < 16; ++i) {
    v[i] = x[i] / global_scale;
    amax = std::max(amax, std::fabs(v[i]));
  }
  uint8_t code = f32_to_e4m3(amax / 6.f);
  // The rounded scale may clip the largest value or waste range: keep the better neighbour.
  float best = std::numeric_limits<float>::max();
  const uint8_t c0 = code;
  for (int c = std::max(0, c0 - 1); c <= std::min(0x7e, c0 + 1); ++c) {
    const float s = e4m3_f32(static_cast<uint8_t>(c));
    if (s == 0.f && amax > 0.f) continue;
    const float err = s > 0.f ? mx_error(v, 16, s) : 0.f;
    if (err < best) {
      best = err;
      code = static_cast<uint8_t>(c);
    }
  }
  b->d = code;
  const float s = e4m3_f32(code), is = s > 0.f ? 1.f / s : 0.f;
  for (int j = 0; j < 8; ++j)
    b->qs[j] = static_cast<uint8_t>(f32_to_e2m1(v[2 * j] * is) | (f32_to_e2m1(v[2 * j + 1] * is) << 4));
}

}  // namespace ft::quant
