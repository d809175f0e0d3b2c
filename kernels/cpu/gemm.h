// Row-major GEMM overloaded on float/double over CBLAS (OpenBLAS, OpenMP build), so the
// templated kernels call one name. Internal to kernels/cpu; not part of the kernel API.
#pragma once
#include <cblas.h>

#include <cstdint>

namespace eco::cpu {

// Reductions longer than this whose length is not a multiple of kSgemmKUnit are cut in two
// (below): OpenBLAS 0.3.21's AVX-512 sgemm (SkylakeX, Cooperlake) blocks such a K one way on one
// thread and another way on several, so its bits would depend on the thread count; K <= 320 or a
// multiple of 32 gives the same bits on 1 and 2 threads (every K from 1 to 2200 checked, both
// transposes, M and N from 64 to 1024). Its Haswell and Zen kernels depend on the threads for any
// K (their M / N partition), which this does not change.
constexpr int kSgemmKWhole = 320, kSgemmKUnit = 32;

// C (M, N) = alpha * op(A) (M, K) @ op(B) (K, N) + beta * C, all row-major with leading dims.
// Inside an OpenMP parallel region OpenBLAS runs single-threaded (it checks omp_in_parallel).
// A long K not a multiple of kSgemmKUnit runs as its largest multiple, then the rest added on.
inline void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A,
                 int lda, const float* B, int ldb, float beta, float* C, int ldc) {
  const auto ta = trans_a ? CblasTrans : CblasNoTrans, tb = trans_b ? CblasTrans : CblasNoTrans;
  const int tail = K > kSgemmKWhole ? K % kSgemmKUnit : 0, head = K - tail;
  cblas_sgemm(CblasRowMajor, ta, tb, M, N, head, alpha, A, lda, B, ldb, beta, C, ldc);
  if (tail == 0) return;
  // op(A)'s columns [head, K): A's columns (row-major, not transposed) or rows (transposed);
  // op(B)'s rows [head, K): B's rows, or columns when transposed.
  const float* A2 = trans_a ? A + int64_t(head) * lda : A + head;
  const float* B2 = trans_b ? B + head : B + int64_t(head) * ldb;
  cblas_sgemm(CblasRowMajor, ta, tb, M, N, tail, alpha, A2, lda, B2, ldb, 1.0f, C, ldc);
}
inline void gemm(bool trans_a, bool trans_b, int M, int N, int K, double alpha, const double* A,
                 int lda, const double* B, int ldb, double beta, double* C, int ldc) {
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace eco::cpu
