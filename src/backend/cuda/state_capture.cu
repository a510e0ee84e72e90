// conv_state_capture: a DeltaNet layer's conv state at in-pass marks (the last kernel - 1 conv
// inputs before each mark), read from the pass's inputs and, before the pass, from the step's
// conv state; the prefix cache snapshots it with the delta rule's captured state.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft::cuda {

namespace {
struct CaptureParams {
  const float* x;      // [n, channels]
  const float* state;  // sequence 0's [channels, hist]; + seq * seq_stride
  int64_t seq_stride, channels, hist;
  int32_t at[k_max_state_marks], start[k_max_state_marks], seq[k_max_state_marks],
      slot[k_max_state_marks];
  float* dst;
  int64_t dst_stride;
};

// ---- kernels
// Block (element block, mark): element e = c * hist + j is the input at pass row at - hist + j.
__global__ void conv_capture_kernel(const __grid_constant__ CaptureParams p) {
  pdl_wait();
  pdl_trigger();
  const int m = blockIdx.y;
  const int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (e >= p.channels * p.hist) return;
  const int64_t c = e / p.hist, j = e % p.hist, r = p.at[m] - p.hist + j;
  const float* old = p.state + p.seq[m] * p.seq_stride;
  p.dst[p.slot[m] * p.dst_stride + e] =
      r >= p.start[m] ? p.x[r * p.channels + c] : old[c * p.hist + p.hist + (r - p.start[m])];
}
}  // namespace

// ---- launcher
void conv_state_capture(const float* x, int64_t channels, int64_t kernel, const float* state,
                        int64_t seq_stride, const std::vector<int64_t>& starts,
                        const std::vector<int32_t>& seqs, const StateMarks& marks) {
  const int n = static_cast<int>(marks.at.size());
  FT_CHECK(n <= k_max_state_marks && marks.slot.size() == marks.at.size() &&
               seqs.size() + 1 == starts.size() && kernel >= 1,
           "conv_state_capture: {} marks, {} steps", n, seqs.size());
  if (n == 0 || kernel == 1) return;
  CaptureParams p{.x = x, .state = state, .seq_stride = seq_stride, .channels = channels,
                  .hist = kernel - 1, .dst = marks.dst, .dst_stride = marks.dst_stride};
  for (int i = 0; i < n; ++i) {  // the step holding mark i
    size_t s = 0;
    while (s + 1 < seqs.size() && starts[s + 1] < marks.at[i]) ++s;
    FT_CHECK(marks.at[i] > starts[s] && marks.at[i] < starts[s + 1],
             "conv_state_capture: mark {} is not inside a step", marks.at[i]);
    p.at[i] = marks.at[i], p.start[i] = static_cast<int32_t>(starts[s]), p.seq[i] = seqs[s];
    p.slot[i] = marks.slot[i];
  }
  const int64_t elems = channels * p.hist;
  const dim3 grid(static_cast<unsigned>((elems + 255) / 256), static_cast<unsigned>(n));
  launch_kernel(conv_capture_kernel, grid, dim3(256), 0, p);
}

}  // namespace ft::cuda
