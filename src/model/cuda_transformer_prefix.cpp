// CudaTransformer: a sequence's recurrent state copied to / from caller-owned device memory
// (the prefix cache's VRAM tier of state snapshots), on the transformer's stream.
#include "base/error.h"
#include "model/cuda_transformer.h"

namespace ft {

void CudaTransformer::state_to_device(int seq, void* dst) {
  FT_CHECK(seq >= 0 && seq < max_seqs_, "state_to_device: sequence {}", seq);
  if (state_bytes_per_seq() == 0) return;
  cuda::StreamScope scope(stream_);
  cuda::copy_on_device(dst, state_.as<float>() + seq * state_stride_, state_bytes_per_seq());
  cuda::stream_synchronize();  // the caller may reuse the slot's neighbour right after
}

void CudaTransformer::state_from_device(int seq, const void* src, int64_t recurrent_len) {
  FT_CHECK(seq >= 0 && seq < max_seqs_ && recurrent_len >= 0 && recurrent_len <= capacity_,
           "state_from_device: sequence {} length {}", seq, recurrent_len);
  if (state_bytes_per_seq() == 0) return;
  cuda::StreamScope scope(stream_);
  cuda::copy_on_device(state_.as<float>() + seq * state_stride_, src, state_bytes_per_seq());
  cuda::stream_synchronize();
  rec_len_[seq] = recurrent_len;
}

}  // namespace ft
