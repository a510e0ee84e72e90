// CudaTransformer's tensor-parallel hooks: one rank of a sharded model. Each block's row-parallel
// projection (o, down, the experts' down) leaves a partial sum of the hidden state on every
// rank; ranks > 0 zero their copy of the residual before adding it, so the all-reduce yields
// residual + the sum of the partials on every rank (rank 0 also adds the row-parallel biases).
#include "base/error.h"
#include "model/cuda_transformer.h"

namespace ft {

void CudaTransformer::set_tp(cuda::Comm* comm, int64_t full_q_dim, int64_t full_kv_dim) {
  FT_CHECK(comm && full_q_dim >= c_.q_dim() && full_kv_dim >= c_.kv_dim(), "set_tp: bad args");
  tp_ = comm->world() > 1 ? comm : nullptr;
  tp_q_dim_ = full_q_dim, tp_kv_dim_ = full_kv_dim;
  if (tp_ && c_.qk_norm == QkNorm::FULL)
    tp_sumsq_ = cuda::DeviceBuffer(2 * max_chunk_ * sizeof(float));
}

cuda::RouteLocal CudaTransformer::route_local() const {
  if (c_.router_experts <= 0) return {};
  return {.begin = static_cast<int32_t>(c_.expert_begin),
          .count = static_cast<int32_t>(c_.n_experts)};
}

void CudaTransformer::tp_zero_residual(int64_t n) {
  if (tp_ && tp_->rank() > 0) cuda::memset_async(x_.data(), 0, n * c_.hidden * sizeof(float));
}

void CudaTransformer::tp_reduce(int64_t n) {
  if (tp_) tp_->all_reduce_sum(x_.as<float>(), n * c_.hidden);
}

// q [n, q_dim] and k [n, kv_dim] hold this rank's heads: the row norms need every rank's
// squares, so the local sums ([q | k] x n) are all-reduced first (one collective for both).
void CudaTransformer::tp_qk_norm(const float* q_norm, const float* k_norm, int64_t n) {
  float* ss = tp_sumsq_.as<float>();
  float *q = q_.as<float>(), *k = k_.as<float>();
  cuda::row_sumsq(q, n, c_.q_dim(), ss);
  cuda::row_sumsq(k, n, c_.kv_dim(), ss + n);
  tp_->all_reduce_sum(ss, 2 * n);
  cuda::rmsnorm_from_sumsq(q, n, c_.q_dim(), ss, tp_q_dim_, q_norm, c_.rms_eps, q);
  cuda::rmsnorm_from_sumsq(k, n, c_.kv_dim(), ss + n, tp_kv_dim_, k_norm, c_.rms_eps, k);
}

}  // namespace ft
