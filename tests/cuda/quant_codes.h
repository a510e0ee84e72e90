// quant_codes_test's bridge to the CUDA decoders run on the host (quant_codes.cu).
#pragma once
#include <cstdint>

#include "base/tensor.h"

namespace ft::cuda_checks {

struct CodesResult {
  bool supported = false;        // the format has integer codes (not FP8)
  bool words_vs_floats = true;   // code_words' bytes == code_group's floats, same d and m
  double dot = 0;                // the int8-activation GEMV's sum over the row
  // dot32 (the one-token streaming GEMV's unit step) over the row with activations rounded per
  // 32 (dot32_acts: that rounding's f64 dot with the reference weights): its largest
  // difference from the f64 sum, relative to sum |w x|, over every alignment the blocks allow.
  double dot32 = 0, dot32_acts = 0, dot32_err = 0;
};

// One row of cols elements in dt's blocks at row (16-byte aligned, readable 4 bytes past its end): w[cols] gets
// d * code + m per element; the result carries the kernel's int8-activation dot with x.
CodesResult quant_codes(DType dt, const uint8_t* row, const float* x, int64_t cols, float* w);

}  // namespace ft::cuda_checks
