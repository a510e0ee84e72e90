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
    default: return 0;
  }
}

DTypeBlock dtype_block(DType t) {
  switch (t) {  // must match quant/formats.h (checked by quant_format_test)
    case DType::Q4_0: return {32, 18};
    case DType::Q4_1: return {32, 20};
    case DType::Q8_0: return {32, 34};
    case DType::Q2_K: return {256, 84};
    case DType::Q3_K: return {256, 110};
    case DType::Q4_K: return {256, 144};
    case DType::Q5_K: return {256, 176};
    case DType::Q6_K: return {256, 210};
    case DType::IQ4_NL: return {32, 18};
    case DType::IQ4_XS: return {256, 136};
    case DType::MXFP4: return {32, 17};
    case DType::NVFP4: return {16, 9};
    case DType::F8_E4M3_B128: return {1, 1};
    default: return {1, static_cast<int32_t>(dtype_size(t))};
  }
}

bool dtype_is_quant(DType t) { return t >= DType::Q4_0; }

size_t dtype_row_bytes(DType t, int64_t n) {
  const DTypeBlock b = dtype_block(t);
  FT_CHECK(n % b.elems == 0, "{} row of {} elements is not a whole number of {}-blocks",
           dtype_name(t), n, b.elems);
  return static_cast<size_t>(n / b.elems) * b.bytes;
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
// Not safetensors dtypes: named for messages only.
constexpr DTypeName k_quant_names[] = {
    {DType::Q4_0, "Q4_0"},     {DType::Q4_1, "Q4_1"},     {DType::Q8_0, "Q8_0"},
    {DType::Q2_K, "Q2_K"},     {DType::Q3_K, "Q3_K"},     {DType::Q4_K, "Q4_K"},
    {DType::Q5_K, "Q5_K"},     {DType::Q6_K, "Q6_K"},     {DType::IQ4_NL, "IQ4_NL"},
    {DType::IQ4_XS, "IQ4_XS"}, {DType::MXFP4, "MXFP4"},   {DType::NVFP4, "NVFP4"},
    {DType::F8_E4M3_B128, "F8_E4M3_B128"},
};
}  // namespace

std::string_view dtype_name(DType t) {
  for (const auto& n : k_names)
    if (n.t == t) return n.name;
  for (const auto& n : k_quant_names)
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
  v.data = static_cast<const char*>(data) + v.nbytes() * i;
  if (scale_inv && ndim == 3)  // one 128x128 scale plane per 2-D slice
    v.scale_inv = scale_inv + ((shape[1] + 127) / 128) * ((shape[2] + 127) / 128) * i;
  v.name = fmt::format("{}[{}]", name, i);
  return v;
}

TensorView TensorView::rows(int64_t r0, int64_t r1) const {
  FT_CHECK(r0 >= 0 && r1 <= shape[0] && r0 <= r1, "{} rows {}..{}", name, r0, r1);
  TensorView v = *this;
  size_t row = shape[0] ? nbytes() / shape[0] : 0;
  if (scale_inv) {  // F8_E4M3_B128: scale rows move in whole 128-row blocks
    FT_CHECK(ndim == 2 && r0 % 128 == 0, "{}: block-scaled rows must start at a multiple of 128",
             name);
    v.scale_inv = scale_inv + (r0 / 128) * ((shape[1] + 127) / 128);
  }
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
