// Non-owning tensor view (dtype, shape, data) and the element types the engine reads.
#pragma once
#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace ft {

enum class DType : uint8_t {
  F32, F16, BF16, I8, U8, I16, I32, I64, F64, BOOL, F8_E4M3, F8_E5M2,
  // Block-quantized weights (quant/quant.h): rows are whole blocks, see dtype_row_bytes.
  Q4_0, Q4_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4, NVFP4,
  F8_E4M3_B128,  // e4m3 bytes + TensorView::scale_inv per 128x128 block
};

// Bytes per element, or 0 for sub-byte and block formats.
size_t dtype_size(DType t);
// Elements and bytes of one block (1 and dtype_size for plain types).
struct DTypeBlock {
  int32_t elems, bytes;
};
DTypeBlock dtype_block(DType t);
bool dtype_is_quant(DType t);
// Bytes of a row of n elements; n must be a multiple of the block size (FT_CHECK).
size_t dtype_row_bytes(DType t, int64_t n);
std::string_view dtype_name(DType t);
// Parses a safetensors dtype string ("BF16", "F32", ...); false if unknown.
bool dtype_from_safetensors(std::string_view s, DType* out);

// A view of memory owned elsewhere (an mmapped file, an arena). Row-major, contiguous.
// shape[0] is the outermost dimension; unused dims are 1. ndim <= 4.
// Block-quantized dtypes store each innermost row as whole blocks (dtype_row_bytes).
struct TensorView {
  DType dtype = DType::F32;
  int ndim = 0;
  std::array<int64_t, 4> shape{1, 1, 1, 1};
  const void* data = nullptr;
  std::string name;
  // F8_E4M3_B128 only: weight_scale_inv f32 [ceil(rows/128), ceil(cols/128)] per 2-D matrix
  // (stacked [E, rows, cols] tensors: E such planes back to back). w = e4m3 * scale_inv.
  const float* scale_inv = nullptr;
  // NVFP4 only: the per-tensor fp32 scale (ModelOpt weight_scale_2). w = e2m1 * e4m3 * global.
  float global_scale = 1.f;

  bool empty() const { return data == nullptr; }
  int64_t numel() const { return shape[0] * shape[1] * shape[2] * shape[3]; }
  int64_t inner() const { return ndim > 0 ? shape[ndim - 1] : 1; }
  size_t nbytes() const {
    return static_cast<size_t>(numel() / inner()) * dtype_row_bytes(dtype, inner());
  }
  int64_t dim(int i) const { return shape[i]; }
  template <typename T>
  const T* as() const { return static_cast<const T*>(data); }
  // The i-th slice along dim 0, as a view of rank ndim-1.
  TensorView slice0(int64_t i) const;
  // Rows [r0, r1) along dim 0, same rank.
  TensorView rows(int64_t r0, int64_t r1) const;
  std::string shape_str() const;
};

}  // namespace ft
