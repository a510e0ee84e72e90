// NCCL for tensor parallelism: a communicator per rank, sum all-reduce and broadcast on the
// current stream, and the device selection of a rank's thread.
#include <nccl.h>

#include <string>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

#define NCCL_CHECK(expr)                                                                  \
  do {                                                                                    \
    ncclResult_t r_ = (expr);                                                             \
    if (r_ != ncclSuccess) ft::fail("NCCL: {} failed: {}", #expr, ncclGetErrorString(r_)); \
  } while (0)

namespace ft::cuda {

void set_device(int device) {
  int n = 0;
  CUDA_CHECK(cudaGetDeviceCount(&n));
  if (device < 0 || device >= n) fail("GPU {} does not exist ({} visible)", device, n);
  CUDA_CHECK(cudaSetDevice(device));
}

bool nccl_built() { return true; }

std::string nccl_unique_id() {
  ncclUniqueId id;
  NCCL_CHECK(ncclGetUniqueId(&id));
  return std::string(id.internal, sizeof(id.internal));
}

Comm::Comm(const std::string& unique_id, int rank, int world) : rank_(rank), world_(world) {
  FT_CHECK(unique_id.size() == sizeof(ncclUniqueId::internal) && rank >= 0 && rank < world,
           "Comm: bad id or rank {} of {}", rank, world);
  ncclUniqueId id;
  std::copy(unique_id.begin(), unique_id.end(), id.internal);
  ncclComm_t c = nullptr;
  NCCL_CHECK(ncclCommInitRank(&c, world, id, rank));
  handle_ = c;
}

Comm::~Comm() {
  if (handle_) ncclCommDestroy(static_cast<ncclComm_t>(handle_));
}

void Comm::all_reduce_sum(float* x, int64_t count) {
  if (world_ == 1 || count == 0) return;
  NCCL_CHECK(ncclAllReduce(x, x, static_cast<size_t>(count), ncclFloat32, ncclSum,
                           static_cast<ncclComm_t>(handle_), stream()));
}

void Comm::all_gather(const float* send, float* recv, int64_t count) {
  if (count == 0) return;
  if (world_ == 1) return copy_on_device(recv, send, count * sizeof(float));
  NCCL_CHECK(ncclAllGather(send, recv, static_cast<size_t>(count), ncclFloat32,
                           static_cast<ncclComm_t>(handle_), stream()));
}

void Comm::broadcast(void* buf, size_t bytes, int root) {
  if (world_ == 1 || bytes == 0) return;
  NCCL_CHECK(ncclBroadcast(buf, buf, bytes, ncclUint8, root, static_cast<ncclComm_t>(handle_),
                           stream()));
}

}  // namespace ft::cuda
