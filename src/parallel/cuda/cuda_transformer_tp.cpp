// CudaTransformer's tensor-parallel hooks: one rank of a sharded model. Each block's row-parallel
// projection (o, down, the experts' down) leaves a partial sum of the hidden state on every
// rank; ranks > 0 zero their copy of the residual before adding it, so the all-reduce yields
// residual + the sum of the partials on every rank (rank 0 also adds the row-parallel biases).
#include "base/error.h"
#include "model/cuda_transformer.h"
#include "parallel/tp_plan.h"

namespace ft {

void CudaTransformer::set_tp(cuda::Comm* comm, int64_t full_q_dim, int64_t full_kv_dim) {
  FT_CHECK(comm && full_q_dim >= c_.q_dim() && full_kv_dim >= c_.kv_dim(), "set_tp: bad args");
  tp_ = comm->world() > 1 ? comm : nullptr;
  tp_q_dim_ = full_q_dim, tp_kv_dim_ = full_kv_dim;
  if (tp_ && c_.qk_norm == QkNorm::FULL)
    tp_sumsq_ = cuda::DeviceBuffer(2 * max_chunk_ * sizeof(float));
}

void CudaTransformer::set_tp_vocab(int64_t pad) {
  FT_CHECK(tp_ && pad > 0, "set_tp_vocab: call set_tp first (world > 1)");
  const int64_t V = c_.vocab_size;
  const TpRange mine = tp_vocab_range(V, tp_->world(), tp_->rank());
  FT_CHECK(pad == tp_vocab_pad(V, tp_->world()) && lm_head_.rows == mine.size(),
           "set_tp_vocab: lm_head has {} rows, rank {} owns {}..{}", lm_head_.rows, tp_->rank(),
           mine.begin, mine.end);
  tp_vocab_pad_ = pad;
  tp_vpart_ = cuda::DeviceBuffer(logit_rows_ * pad * sizeof(float));
  tp_vgather_ = cuda::DeviceBuffer(tp_->world() * logit_rows_ * pad * sizeof(float));
}

// Each rank's piece [rows, its vocab rows] travels as rows * pad floats; piece r lands at
// columns tp_vocab_range(r) of y (one strided copy per rank, graph-capturable).
void CudaTransformer::lm_head_rows(const float* xn, int64_t rows, float* y) {
  if (tp_vocab_pad_ == 0) return cuda::matmul(*blas_, xn, rows, lm_head_, y);
  FT_CHECK(rows <= logit_rows_, "lm_head_rows: {} rows of {}", rows, logit_rows_);
  const int64_t V = c_.vocab_size, P = tp_vocab_pad_;
  const int W = tp_->world();
  float *part = tp_vpart_.as<float>(), *all = tp_vgather_.as<float>();
  cuda::matmul(*blas_, xn, rows, lm_head_, part);
  tp_->all_gather(part, all, rows * P);
  for (int r = 0; r < W; ++r) {
    const TpRange v = tp_vocab_range(V, W, r);
    const size_t w = v.size() * sizeof(float);
    cuda::copy_2d_on_device(y + v.begin, V * sizeof(float), all + r * rows * P, w, w, rows);
  }
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
