// Run-time ISA selection for the CPU kernel table.
#include "backend/cpu/kernels.h"

#include <cstdlib>
#include <string>

#include "base/error.h"

namespace ft::cpu {

namespace {
bool cpu_has_avx512() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma");
}
bool cpu_has_avx2() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("f16c");
}
}  // namespace

const Kernels* kernels_for(std::string_view isa) {
  if (isa == "scalar") return &k_scalar_kernels;
  if (isa == "avx2") return cpu_has_avx2() ? avx2_kernels() : nullptr;
  if (isa == "avx512") return cpu_has_avx512() ? avx512_kernels() : nullptr;
  return nullptr;
}

std::vector<std::string_view> supported_isas() {
  std::vector<std::string_view> out{"scalar"};
  for (std::string_view isa : {"avx2", "avx512"})
    if (kernels_for(isa)) out.push_back(isa);
  return out;
}

const Kernels& kernels() {
  static const Kernels* k = [] {
    if (const char* forced = std::getenv("FT_ISA")) {
      const Kernels* f = kernels_for(forced);
      if (!f) fail("FT_ISA={} is not supported on this CPU (use scalar, avx2 or avx512)", forced);
      return f;
    }
    return kernels_for(supported_isas().back());
  }();
  return *k;
}

}  // namespace ft::cpu
