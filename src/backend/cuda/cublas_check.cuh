// CUBLAS_CHECK: a failed cuBLAS call prints file:line, the call and cuBLAS's status string, and
// aborts (what CUDA_CHECK in common.cuh does for the runtime API). For the .cu files using cuBLAS.
#pragma once
#include <cublas_v2.h>

#include <cstdio>
#include <cstdlib>

#define CUBLAS_CHECK(expr)                                                            \
  do {                                                                                \
    cublasStatus_t st_ = (expr);                                                      \
    if (st_ != CUBLAS_STATUS_SUCCESS) {                                               \
      std::fprintf(stderr, "%s:%d: cuBLAS error %s: %s\n", __FILE__, __LINE__, #expr, \
                   cublasGetStatusString(st_));                                       \
      std::abort();                                                                   \
    }                                                                                 \
  } while (0)
