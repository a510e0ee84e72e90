// CudaTransformer's in-pass state captures: a prefill pass copies a hybrid model's recurrent
// state at marks inside its steps (conv inputs before each mark, the chunked delta rule's state
// at chunk boundaries placed on the marks), so the prefix cache snapshots several anchors from
// one pass instead of ending the pass at each (an offloaded pass streams every expert once).
#include "base/error.h"
#include "model/cuda_transformer.h"

namespace ft {

void CudaTransformer::capture_conv(int64_t l, const float* qkv) {
  cuda::StateMarks marks{.at = mark_at_,
                         .dst = captures_.as<float>() + kv_slot_[l] * conv_size_,
                         .dst_stride = state_stride_};
  for (size_t i = 0; i < mark_at_.size(); ++i) marks.slot.push_back(static_cast<int32_t>(i));
  cuda::conv_state_capture(qkv, c_.delta.conv_dim(), c_.delta.conv_kernel, conv_state(l),
                           state_stride_, step_starts_, step_seqs_, marks);
}

void CudaTransformer::read_capture(int32_t c, float* host) {
  FT_CHECK(c >= 0 && c < static_cast<int32_t>(mark_at_.size()), "read_capture: capture {} of {}",
           c, mark_at_.size());
  cuda::StreamScope scope(stream_);
  cuda::copy_to_host(host, captures_.as<float>() + c * state_stride_, state_bytes_per_seq());
}

void CudaTransformer::capture_to_device(int32_t c, void* dst) {
  FT_CHECK(c >= 0 && c < static_cast<int32_t>(mark_at_.size()),
           "capture_to_device: capture {} of {}", c, mark_at_.size());
  cuda::StreamScope scope(stream_);
  cuda::copy_on_device(dst, captures_.as<float>() + c * state_stride_, state_bytes_per_seq());
  cuda::stream_synchronize();
}

}  // namespace ft
