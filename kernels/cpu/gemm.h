// Row-major GEMM overloaded on float/double over CBLAS (OpenBLAS, OpenMP build), so the
// templated kernels call one name. Internal to kernels/cpu; not part of the kernel API.
#pragma once
#include <cblas.h>

namespace eco::cpu {

// C (M, N) = alpha * op(A) (M, K) @ op(B) (K, N) + beta * C, all row-major with leading dims.
// Inside an OpenMP parallel region OpenBLAS runs single-threaded (it checks omp_in_parallel).
inline void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A,
                 int lda, const float* B, int ldb, float beta, float* C, int ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
inline void gemm(bool trans_a, bool trans_b, int M, int N, int K, double alpha, const double* A,
                 int lda, const double* B, int ldb, double beta, double* C, int ldc) {
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace eco::cpu
