// TensorView helpers and dtype tables.
#include "base/tensor.h"

#include <fmt/format.h>

#include "base/error.h"

namespace ft {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F64: case DType::I64: return 8;
    case DType::F32: case DType::I32: return 4;
    case DType::F16: case DType::BF16: case DType::I16: return 2;
    case DType::I8: case DType::U8: case DType::BOOL: case DType::F8_E4M3: case DType::F8_E5M2:
      return 1;
  }
  return 0;
}

namespace {
struct DTypeName {
  DType t;
  std::string_view name;
};
constexpr DTypeName k_names[] = {
    {DType::F32, "F32"},   {DType::F16, "F16"},         {DType::BF16, "BF16"},
    {DType::I8, "I8"},     {DType::U8, "U8"},           {DType::I16, "I16"},
    {DType::I32, "I32"},   {DType::I64, "I64"},         {DType::F64, "F64"},
    {DType::BOOL, "BOOL"}, {DType::F8_E4M3, "F8_E4M3"}, {DType::F8_E5M2, "F8_E5M2"},
};
}  // namespace

std::string_view dtype_name(DType t) {
  for (const auto& n : k_names)
    if (n.t == t) return n.name;
  return "?";
}

bool dtype_from_safetensors(std::string_view s, DType* out) {
  for (const auto& n : k_names)
    if (n.name == s) {
      *out = n.t;
      return true;
    }
  return false;
}

TensorView TensorView::slice0(int64_t i) const {
  FT_CHECK(ndim >= 2 && i >= 0 && i < shape[0], "{} slice {}", name, i);
  TensorView v;
  v.dtype = dtype;
  v.ndim = ndim - 1;
  for (int d = 1; d < 4; ++d) v.shape[d - 1] = shape[d];
  v.shape[3] = 1;
  size_t inner = static_cast<size_t>(v.numel()) * dtype_size(dtype);
  v.data = static_cast<const char*>(data) + inner * i;
  v.name = fmt::format("{}[{}]", name, i);
  return v;
}

TensorView TensorView::rows(int64_t r0, int64_t r1) const {
  FT_CHECK(r0 >= 0 && r1 <= shape[0] && r0 <= r1, "{} rows {}..{}", name, r0, r1);
  TensorView v = *this;
  size_t row = static_cast<size_t>(numel() / shape[0]) * dtype_size(dtype);
  v.shape[0] = r1 - r0;
  v.data = static_cast<const char*>(data) + row * r0;
  v.name = fmt::format("{}[{}:{}]", name, r0, r1);
  return v;
}

std::string TensorView::shape_str() const {
  std::string s = "[";
  for (int i = 0; i < ndim; ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace ft
