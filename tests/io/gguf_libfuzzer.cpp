// libFuzzer target for the GGUF parser (optional, clang): every input must parse or throw
// ft::Error. Build: cmake -DCMAKE_CXX_COMPILER=clang++ -DFT_LIBFUZZER=ON, then
// ./gguf_libfuzzer -max_total_time=60 [corpus dir of .gguf files].
#include <cstddef>
#include <cstdint>

#include "base/error.h"
#include "io/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    ft::GgufFile f(reinterpret_cast<const char*>(data), size, "fuzz.gguf");
    size_t sum = 0;
    for (const auto& t : f.tensors()) {  // touch every accepted tensor's first and last byte
      const auto* p = static_cast<const unsigned char*>(t.data);
      if (t.nbytes) sum += p[0] + p[t.nbytes - 1];
      sum += static_cast<size_t>(t.numel());
      ft::DType d;
      if (ft::ggml_plain_dtype(t.type, &d)) sum += t.view().nbytes();
    }
    for (const auto& [k, v] : f.metadata()) sum += k.size() + v.items.size() + v.s.size();
    return sum == 1 ? 1 : 0;
  } catch (const ft::Error&) {
    return 0;
  }
}
