// CudaTransformer's KV cache addressing (f32 or bf16 elements) and the flash-decoding
// workspace of BF16 caches.
#include "base/error.h"
#include "model/cuda_transformer.h"

namespace ft {

size_t CudaTransformer::kv_elem_bytes() const { return kv_dtype_ == DType::BF16 ? 2 : 4; }

void* CudaTransformer::k_cache(int64_t seq, int64_t l) const {
  const int64_t at = seq * seq_stride_ + kv_slot_[l] * capacity_ * c_.kv_dim();
  return static_cast<char*>(kv_k_.data()) + at * kv_elem_bytes();
}
void* CudaTransformer::v_cache(int64_t seq, int64_t l) const {
  const int64_t at = seq * seq_stride_ + kv_slot_[l] * capacity_ * c_.kv_dim();
  return static_cast<char*>(kv_v_.data()) + at * kv_elem_bytes();
}

// attention_max_splits(capacity_) chunks: every length a replayed decode graph may meet is
// covered by the grid captured once. Short capacities (one chunk) need none.
void CudaTransformer::alloc_attention_split() {
  split_partial_ = {};
  split_counters_ = {};
  max_splits_ = 0;
  if (kv_dtype_ != DType::BF16) return;
  const int64_t splits = cuda::attention_max_splits(capacity_);
  if (splits <= 1) return;
  const int64_t T = cuda::k_gemv_max_tokens;
  split_partial_ = cuda::DeviceBuffer(
      cuda::attention_split_floats(T, c_.n_heads, c_.head_dim, splits) * sizeof(float));
  const std::vector<uint32_t> zero(T * c_.n_heads, 0);
  split_counters_ = cuda::DeviceBuffer(zero.size() * sizeof(uint32_t));
  split_counters_.upload(zero.data(), zero.size() * sizeof(uint32_t));
  max_splits_ = splits;
}

cuda::AttentionSplit CudaTransformer::attention_split() const {
  if (max_splits_ == 0) return {};
  return {.partial = split_partial_.as<float>(),
          .counters = split_counters_.as<uint32_t>(),
          .max_splits = max_splits_};
}

}  // namespace ft
