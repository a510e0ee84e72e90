// Reference quantizers, one per format (host only): f32 block in, block struct out.
#pragma once
#include <cstdint>

#include "quant/formats.h"

namespace ft::quant {

void quantize_block(const float* x, BlockQ4_0* b);
void quantize_block(const float* x, BlockQ4_1* b);
void quantize_block(const float* x, BlockQ8_0* b);
void quantize_block(const float* x, BlockQ2_K* b);
void quantize_block(const float* x, BlockQ3_K* b);
void quantize_block(const float* x, BlockQ4_K* b);
void quantize_block(const float* x, BlockQ5_K* b);
void quantize_block(const float* x, BlockQ6_K* b);
void quantize_block(const float* x, BlockIQ4_NL* b);
void quantize_block(const float* x, BlockIQ4_XS* b);
void quantize_block(const float* x, BlockMXFP4* b);
// NVFP4 blocks are quantized against the tensor's global scale (x / global is what is stored).
void quantize_block(const float* x, BlockNVFP4* b, float global_scale);

// Nearest OCP E4M3 (fn) code of v, ties to even, saturating at +-448.
uint8_t f32_to_e4m3(float v);
// Nearest E2M1 code (sign in bit 3) of v, ties to even, saturating at +-6.
uint8_t f32_to_e2m1(float v);

}  // namespace ft::quant
