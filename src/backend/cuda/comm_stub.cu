// Tensor parallelism in a CUDA build without NCCL: device selection works, communicators are
// a one-line error naming the fix.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft::cuda {

void set_device(int device) {
  int n = 0;
  CUDA_CHECK(cudaGetDeviceCount(&n));
  if (device < 0 || device >= n) fail("GPU {} does not exist ({} visible)", device, n);
  CUDA_CHECK(cudaSetDevice(device));
}

bool nccl_built() { return false; }

std::string nccl_unique_id() {
  fail("--tensor-parallel > 1 needs NCCL: this ft was built without it (install NCCL and "
       "reconfigure with -DFT_NCCL=ON)");
}

Comm::Comm(const std::string&, int, int) { nccl_unique_id(); }
Comm::~Comm() = default;
void Comm::all_reduce_sum(float*, int64_t) {}
void Comm::broadcast(void*, size_t, int) {}
void Comm::all_gather(const float*, float*, int64_t) {}

}  // namespace ft::cuda
