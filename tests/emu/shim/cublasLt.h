// Host emulation (tests/emu): just enough of cublasLt.h for kernels/cuda/cuda_check.h to compile.
#pragma once
typedef enum { CUBLAS_STATUS_SUCCESS = 0 } cublasStatus_t;
inline const char* cublasLtGetStatusName(cublasStatus_t) { return "emu"; }
inline const char* cublasLtGetStatusString(cublasStatus_t) { return "emu"; }
