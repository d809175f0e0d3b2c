// Error checks for CUDA and cuBLAS(Lt) calls: a failure raises eco::Error naming the call, the
// file:line and the library's message. Host code only; free of fmt so that nvcc never parses it
// (the message is built in cuda_check.cpp, compiled by the host compiler).
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

namespace eco::cuda {
[[noreturn]] void fail(const char* file, int line, const char* call, const char* name,
                       const char* what, const char* context = "");
}  // namespace eco::cuda

#define ECO_CHECK_CUDA(call)                                                               \
  do {                                                                                     \
    const cudaError_t eco_err_ = (call);                                                   \
    if (eco_err_ != cudaSuccess)                                                           \
      ::eco::cuda::fail(__FILE__, __LINE__, #call, cudaGetErrorName(eco_err_),             \
                        cudaGetErrorString(eco_err_));                                     \
  } while (0)

// ECO_CHECK_CUBLAS(call, context): context (a const char*) names the shapes involved.
#define ECO_CHECK_CUBLAS(call, context)                                                    \
  do {                                                                                     \
    const cublasStatus_t eco_st_ = (call);                                                 \
    if (eco_st_ != CUBLAS_STATUS_SUCCESS)                                                  \
      ::eco::cuda::fail(__FILE__, __LINE__, #call, cublasLtGetStatusName(eco_st_),           \
                        cublasLtGetStatusString(eco_st_), (context));                        \
  } while (0)

// After a kernel launch: the launch error, if any.
#define ECO_CHECK_LAUNCH() ECO_CHECK_CUDA(cudaGetLastError())
