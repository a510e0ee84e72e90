// Stand-ins for a build without the CUDA toolkit: no devices.
#include "backend/cuda/cuda_ops.h"

namespace ft::cuda {

int device_count() { return 0; }
std::string device_summary() { return "CUDA backend not built (no nvcc found at configure time)"; }

}  // namespace ft::cuda
