// Non-owning tensor view (dtype, shape, data) and the element types the engine reads.
#pragma once
#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace ft {

enum class DType : uint8_t { F32, F16, BF16, I8, U8, I16, I32, I64, F64, BOOL, F8_E4M3, F8_E5M2 };

// Bytes per element, or 0 for sub-byte formats.
size_t dtype_size(DType t);
std::string_view dtype_name(DType t);
// Parses a safetensors dtype string ("BF16", "F32", ...); false if unknown.
bool dtype_from_safetensors(std::string_view s, DType* out);

// A view of memory owned elsewhere (an mmapped file, an arena). Row-major, contiguous.
// shape[0] is the outermost dimension; unused dims are 1. ndim <= 4.
struct TensorView {
  DType dtype = DType::F32;
  int ndim = 0;
  std::array<int64_t, 4> shape{1, 1, 1, 1};
  const void* data = nullptr;
  std::string name;

  bool empty() const { return data == nullptr; }
  int64_t numel() const { return shape[0] * shape[1] * shape[2] * shape[3]; }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
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
