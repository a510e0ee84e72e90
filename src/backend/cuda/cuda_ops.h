// CUDA backend entry points: the same ops as ops/ops.h, on device pointers (f32 activations).
// Declared here without CUDA headers so host code can call them.
#pragma once
#include <cstdint>
#include <string>

namespace ft::cuda {

// Number of usable CUDA devices (0 when there is no driver or GPU).
int device_count();
// "NVIDIA H200, 139.8 GiB, sm_90" for device 0, or a reason when unavailable.
std::string device_summary();

// y[i] = rmsnorm(x[i]) * w for n rows of width dim. Device pointers; stream 0.
void rmsnorm(const float* x, int64_t n, int64_t dim, const float* w, float eps, float* y);
// y = silu(g) * u over count elements.
void silu_mul(const float* g, const float* u, int64_t count, float* y);
// y[n, rows] = x[n, cols] W^T with W bf16 [rows, cols] (raw bits).
void matmul_bf16(const float* x, int64_t n, const uint16_t* w, int64_t rows, int64_t cols,
                 float* y);

}  // namespace ft::cuda
