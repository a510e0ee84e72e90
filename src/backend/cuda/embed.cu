// embed: out[i, :] = table[ids[i], :] converted to f32; one block per token.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft::cuda {

namespace {
// ---- kernels
template <typename W>
__global__ void embed_kernel(const W* __restrict__ table, const int32_t* __restrict__ ids,
                             int64_t dim, float* __restrict__ out) {
  const W* row = table + static_cast<int64_t>(ids[blockIdx.x]) * dim;
  float* o = out + blockIdx.x * dim;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) o[i] = to_f32(row[i]);
}
}  // namespace

// ---- launcher
void embed(const DeviceMatrix& table, const int32_t* ids, int64_t n, float* out) {
  FT_CHECK(n >= 0 && table.rows > 0 && table.cols > 0, "embed: bad shape");
  if (n == 0) return;
  dispatch_weight_type(table.dtype, [&](auto tag) {
    using W = typename decltype(tag)::type;
    embed_kernel<W><<<static_cast<unsigned>(n), 256, 0, stream()>>>(static_cast<const W*>(table.data), ids,
                                                       table.cols, out);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace ft::cuda
