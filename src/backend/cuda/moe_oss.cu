// moe_oss: gpt-oss expert biases and activation around moe_experts (h6g): the gate/up biases
// plus the clamped SwiGLU on the raw gate/up rows, and the routed down bias added after the
// combine (sum_k w * (d + b) = sum_k w * d + sum_k w * b). Same math as CpuExperts.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft::cuda {

namespace {
// ---- kernels
// One block per row r (expert e = ids[row_slot ? row_slot[r] : r]).
__global__ void oss_act_kernel(const MoeOss o, float* __restrict__ gate,
                               const float* __restrict__ up, int64_t inter,
                               const int32_t* __restrict__ row_slot) {
  const int64_t r = blockIdx.x;
  const int64_t e = o.expert_ids[row_slot ? row_slot[r] : r];
  if (e < 0) return;
  const float* gb = o.gate_bias ? o.gate_bias + e * inter : nullptr;
  const float* ub = o.up_bias ? o.up_bias + e * inter : nullptr;
  for (int64_t j = threadIdx.x; j < inter; j += blockDim.x) {
    float g = gate[r * inter + j] + (gb ? gb[j] : 0.f);
    float u = up[r * inter + j] + (ub ? ub[j] : 0.f);
    float a = 1.f;
    if (o.clamped) {
      g = fminf(g, o.limit);
      u = fminf(fmaxf(u, -o.limit), o.limit) + 1.f;
      a = o.alpha;
    }
    gate[r * inter + j] = g / (1.f + expf(-a * g)) * u;
  }
}

// One block per token t.
__global__ void oss_down_bias_kernel(const MoeOss o, const float* __restrict__ w, int top_k,
                                     int64_t hidden, float* __restrict__ out) {
  const int64_t t = blockIdx.x;
  for (int64_t j = threadIdx.x; j < hidden; j += blockDim.x) {
    float s = 0.f;
    for (int k = 0; k < top_k; ++k) {
      const int64_t e = o.expert_ids[t * top_k + k];
      if (e >= 0) s += w[t * top_k + k] * o.down_bias[e * hidden + j];
    }
    out[t * hidden + j] += s;
  }
}
}  // namespace

// ---- launchers
void moe_oss_act(const MoeOss& o, float* gate, const float* up, int64_t rows, int64_t inter,
                 const int32_t* row_slot) {
  FT_CHECK(o.expert_ids && rows >= 0 && inter > 0, "moe_oss_act: bad arguments");
  if (rows == 0) return;
  oss_act_kernel<<<static_cast<unsigned>(rows), 128, 0, stream()>>>(o, gate, up, inter, row_slot);
  CUDA_CHECK_LAUNCH();
}

void moe_oss_down_bias(const MoeOss& o, const float* weights, int64_t n, int64_t top_k,
                       int64_t hidden, float* out) {
  FT_CHECK(o.expert_ids && top_k > 0 && hidden > 0, "moe_oss_down_bias: bad arguments");
  if (n == 0 || !o.down_bias) return;
  oss_down_bias_kernel<<<static_cast<unsigned>(n), 256, 0, stream()>>>(
      o, weights, static_cast<int>(top_k), hidden, out);
  CUDA_CHECK_LAUNCH();
}

}  // namespace ft::cuda
