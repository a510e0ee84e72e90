// Gated attention (Qwen3-Next, Qwen3.5): q_proj rows per head are [query | gate]. split_q_gate
// copies the queries out for the q/k norm + rope path; attn_output_gate scales the attention
// output by sigmoid(gate) before o_proj (as model/transformer.cpp: att / (1 + exp(-gate))).
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft::cuda {

namespace {
// ---- kernels
// Element i of [n, n_heads, head_dim] reads qg at (row i / head_dim) * 2 head_dim + offset.
__global__ void split_q_kernel(const float* qg, int64_t count, int64_t hd, float* q) {
  pdl_wait();
  pdl_trigger();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x)
    q[i] = qg[(i / hd) * 2 * hd + i % hd];
}

__global__ void output_gate_kernel(float* att, const float* qg, int64_t count, int64_t hd) {
  pdl_wait();
  pdl_trigger();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x)
    att[i] /= 1.f + expf(-qg[(i / hd) * 2 * hd + hd + i % hd]);
}

unsigned blocks_for(int64_t count) {
  const int64_t b = (count + 255) / 256;
  return static_cast<unsigned>(b < 65535 ? b : 65535);
}
}  // namespace

// ---- launchers
void split_q_gate(const float* qg, int64_t n, int64_t n_heads, int64_t head_dim, float* q) {
  FT_CHECK(n >= 0 && n_heads > 0 && head_dim > 0 && qg && q, "split_q_gate: bad arguments");
  const int64_t count = n * n_heads * head_dim;
  if (count == 0) return;
  launch_kernel(split_q_kernel, dim3(blocks_for(count)), dim3(256), 0, qg, count, head_dim, q);
}

void attn_output_gate(float* att, const float* qg, int64_t n, int64_t n_heads, int64_t head_dim) {
  FT_CHECK(n >= 0 && n_heads > 0 && head_dim > 0 && qg && att, "attn_output_gate: bad arguments");
  const int64_t count = n * n_heads * head_dim;
  if (count == 0) return;
  launch_kernel(output_gate_kernel, dim3(blocks_for(count)), dim3(256), 0, att, qg, count,
                head_dim);
}

}  // namespace ft::cuda
