// Quant kernel tables: run-time selection, the shared activation quantizer and row scratch.
#include "backend/cpu/quant_kernels.h"

#include <array>
#include <cmath>
#include <vector>

#include "backend/cpu/kernels.h"
#include "quant/formats.h"

namespace ft::cpu {

void quantize_acts(const float* x, int64_t n, int64_t k, int8_t* q, float* d, float* s) {
  const int64_t ng = k / 16;
  for (int64_t t = 0; t < n; ++t)
    for (int64_t g = 0; g < ng; ++g) {
      const float* xg = x + t * k + 16 * g;
      float amax = 0.f;
      for (int i = 0; i < 16; ++i) amax = std::fmax(amax, std::fabs(xg[i]));
      const float id = amax > 0.f ? 127.f / amax : 0.f;
      int sum = 0;
      for (int i = 0; i < 16; ++i) {
        const int v = static_cast<int>(std::nearbyint(xg[i] * id));
        q[t * k + 16 * g + i] = static_cast<int8_t>(v);
        sum += v;
      }
      d[t * ng + g] = amax / 127.f;
      s[t * ng + g] = amax / 127.f * static_cast<float>(sum);
    }
}

uint8_t* quant_row_scratch(int64_t k) {
  thread_local std::vector<uint8_t> buf;
  const size_t need = static_cast<size_t>(k) + 2 * sizeof(float) * static_cast<size_t>(k / 16 + 1) + 64;
  if (buf.size() < need) buf.resize(need);
  return buf.data();
}

const float* e4m3_table() {
  static const std::array<float, 256> t = [] {
    std::array<float, 256> a{};
    for (int i = 0; i < 256; ++i) a[i] = quant::e4m3_f32(static_cast<uint8_t>(i));
    return a;
  }();
  return t.data();
}

namespace {
bool cpu_has_avx512_vnni() { return __builtin_cpu_supports("avx512vnni"); }
}  // namespace

const QuantKernels* quant_kernels_for(std::string_view isa) {
  if (!kernels_for(isa)) return nullptr;
  if (isa == "scalar") return &k_scalar_quant_kernels;
  if (isa == "avx2") return avx2_quant_kernels();
  if (isa == "avx512") return cpu_has_avx512_vnni() ? avx512_quant_kernels() : nullptr;
  return nullptr;
}

const QuantKernels& quant_kernels() {
  static const QuantKernels* k = [] {
    const std::string_view isa = kernels().isa;
    if (const QuantKernels* q = quant_kernels_for(isa)) return q;
    return isa == "avx512" && quant_kernels_for("avx2") ? quant_kernels_for("avx2")
                                                          : &k_scalar_quant_kernels;
  }();
  return *k;
}

}  // namespace ft::cpu
