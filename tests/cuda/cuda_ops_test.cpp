// Each CUDA op vs the CPU op on the same inputs (runs on a GPU machine; skipped without one).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backend/cpu/kernels.h"
#include "backend/cuda/cuda_ops.h"
#include "base/half.h"

namespace ft {
namespace {

class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  }
  template <typename T>
  T* upload(const std::vector<T>& v) {
    T* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, v.size() * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    ptrs_.push_back(p);
    return p;
  }
  std::vector<float> download(const float* p, size_t n) {
    std::vector<float> v(n);
    EXPECT_EQ(cudaMemcpy(v.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }
  void TearDown() override {
    for (void* p : ptrs_) cudaFree(p);
  }
  std::vector<void*> ptrs_;
};

std::vector<float> randv(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

TEST_F(CudaOps, RmsNormMatchesCpu) {
  for (int64_t dim : {1, 31, 64, 2048, 5000}) {
    const int64_t n = 5;
    auto x = randv(n * dim, dim), w = randv(dim, dim + 1);
    float* dy = upload(std::vector<float>(n * dim));
    cuda::rmsnorm(upload(x), n, dim, upload(w), 1e-6f, dy);
    auto got = download(dy, n * dim);
    std::vector<float> ref(n * dim);
    for (int64_t i = 0; i < n; ++i)
      cpu::k_scalar_kernels.rmsnorm(&x[i * dim], w.data(), 1e-6f, dim, &ref[i * dim]);
    for (int64_t i = 0; i < n * dim; ++i) ASSERT_NEAR(got[i], ref[i], 1e-4f * (1 + std::fabs(ref[i])));
  }
}

TEST_F(CudaOps, SiluMulMatchesCpu) {
  auto g = randv(100003, 1), u = randv(100003, 2);
  float* dy = upload(std::vector<float>(g.size()));
  cuda::silu_mul(upload(g), upload(u), static_cast<int64_t>(g.size()), dy);
  auto got = download(dy, g.size());
  std::vector<float> ref(g.size());
  cpu::k_scalar_kernels.silu_mul(g.data(), u.data(), static_cast<int64_t>(g.size()), ref.data());
  for (size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(got[i], ref[i], 1e-5f * (1 + std::fabs(ref[i])));
}

TEST_F(CudaOps, MatmulBf16MatchesCpu) {
  for (int64_t cols : {7, 64, 2048}) {
    const int64_t n = 3, rows = 37;
    auto x = randv(n * cols, cols), wf = randv(rows * cols, cols + 3);
    std::vector<uint16_t> w(wf.size());
    for (size_t i = 0; i < w.size(); ++i) w[i] = f32_to_bf16(wf[i]);
    float* dy = upload(std::vector<float>(n * rows));
    cuda::matmul_bf16(upload(x), n, upload(w), rows, cols, dy);
    auto got = download(dy, n * rows);
    std::vector<float> ref(n * rows);
    cpu::k_scalar_kernels.gemm_bf16(x.data(), n, cols, reinterpret_cast<const cpu::bf16_t*>(w.data()),
                                    0, rows, ref.data(), rows);
    for (int64_t i = 0; i < n * rows; ++i)
      ASSERT_NEAR(got[i], ref[i], 1e-4f * std::sqrt(static_cast<float>(cols)) * 4);
  }
}

}  // namespace
}  // namespace ft
