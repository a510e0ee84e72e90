// Quantized weight formats: type ids (GGUF ggml ids), block geometry, row (de)quantization.
// The block layouts and scalar reference dequant live in quant/formats.h (one traits struct per
// format, usable from .cu files); this header is the plain C++ API the loaders and tools use.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "base/tensor.h"

namespace ft::quant {

// GGUF ggml_type ids for the GGUF formats; ids above 1000 are ours (no GGUF id).
enum class QuantType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q8_0 = 8,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  IQ4_NL = 20,
  IQ4_XS = 23,
  BF16 = 30,
  MXFP4 = 39,  // ggml block_mxfp4: e8m0 scale + 32 e2m1 (gpt-oss)
  // e4m3 bytes, row-major, with an f32 weight_scale_inv per 128x128 block (the -FP8 Qwen and
  // DeepSeek releases). 2-D: use quantize_fp8_b128 / dequantize_fp8_b128.
  FP8_E4M3_B128 = 1001,
  // ModelOpt NVFP4: per 16 elements one e4m3 scale byte + 8 bytes of e2m1 pairs (element 2j in
  // the low nibble of byte j), times a per-tensor fp32 global scale (weight_scale_2).
  NVFP4 = 1002,
};

// Every type above, in id order.
std::span<const QuantType> all_types();
// True for a ggml/our id this engine can read (e.g. a GGUF tensor's type field).
bool is_known(uint32_t id);

int64_t block_elems(QuantType t);
int64_t block_bytes(QuantType t);
// Bytes of one row of n elements; ft::fail if n is not a whole number of blocks.
size_t row_bytes(QuantType t, int64_t n);

std::string_view name(QuantType t);  // "Q4_K", "FP8_E4M3_B128", ...
// Case-insensitive name to type; ft::fail naming the supported types when unknown.
QuantType parse(std::string_view s);

// TensorView dtype of a quantized (or F32/F16/BF16) matrix, and back (ft::fail if none).
DType to_dtype(QuantType t);
QuantType from_dtype(DType d);

// One row of n elements (n a multiple of block_elems). NVFP4 rows use global_scale.
// Not for FP8_E4M3_B128 (2-D scales): ft::fail.
void dequantize_row(QuantType t, const void* src, float* dst, int64_t n,
                    float global_scale = 1.f);
// Reference quantizer (round to nearest with a per-block scale search where the format has
// one). NVFP4 rows are quantized against global_scale (see nvfp4_global_scale).
void quantize_row(QuantType t, const float* src, void* dst, int64_t n, float global_scale = 1.f);

// NVFP4 per-tensor scale for data with max |x| = amax: amax / (448 * 6), 1 when amax is 0.
float nvfp4_global_scale(float amax);

// FP8 e4m3 with 128x128 block scales. src/dst [rows, cols] row-major; scale_inv
// [ceil(rows/128), ceil(cols/128)] f32, w = e4m3(q) * scale_inv.
void quantize_fp8_b128(const float* src, int64_t rows, int64_t cols, uint8_t* q,
                       float* scale_inv);
void dequantize_fp8_b128(const uint8_t* q, const float* scale_inv, int64_t rows, int64_t cols,
                         float* dst);
inline int64_t fp8_b128_scale_count(int64_t rows, int64_t cols) {
  return ((rows + 127) / 128) * ((cols + 127) / 128);
}

// Checkpoint layouts to ours (the loader's canonicalisation step):
// gpt-oss / HF MXFP4: `*_blocks` [n_blocks, 16] bytes, element 2j in the low nibble of byte j,
// `*_scales` [n_blocks] e8m0  ->  ggml MXFP4 blocks (low nibbles are elements 0..15).
void mxfp4_from_hf(const uint8_t* blocks, const uint8_t* scales, int64_t n_blocks, void* dst);
// ModelOpt NVFP4: `weight` [rows, cols/2] (element 2j in the low nibble of byte j) and
// `weight_scale` e4m3 [rows, cols/16]  ->  NVFP4 rows. `weight_scale_2` is the view's
// global_scale.
void nvfp4_from_modelopt(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols,
                         void* dst);

// Rows [r0, r1) of a 2-D TensorView of any supported dtype (plain or quantized) to f32
// [r1 - r0, cols]. Uses the view's scale_inv / global_scale.
void dequantize_rows(const TensorView& w, int64_t r0, int64_t r1, float* dst);

}  // namespace ft::quant
