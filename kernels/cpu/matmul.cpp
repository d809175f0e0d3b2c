// Linear layer forward/backward: every product goes through BLAS gemm; backward accumulates
// with beta = 1. The bias gradient is a column sum parallelised over column blocks.
#include <algorithm>
#include <cstdint>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/kernels.h"

namespace eco::cpu {

template <class T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int C, int OC) {
  // out (N, OC): seeded with the bias so the gemm adds onto it (beta = 1), else overwritten.
  if (bias) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) std::copy(bias, bias + OC, out + int64_t(n) * OC);
  }
  gemm(false, true, N, OC, C, T(1), inp, C, weight, C, bias ? T(1) : T(0), out, OC);
}

template <class T>
void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                     int N, int C, int OC) {
  if (dinp) gemm(false, false, N, C, OC, T(1), dout, OC, weight, C, T(1), dinp, C);  // (N, C)
  gemm(true, false, OC, C, N, T(1), dout, OC, inp, C, T(1), dweight, C);             // (OC, C)
  if (dbias) {
    // Each thread owns whole column blocks and sums rows in order: deterministic for any
    // thread count, and rows are read contiguously within a block.
    constexpr int kBlock = 64;
    const int nblocks = (OC + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < nblocks; blk++) {
      const int o0 = blk * kBlock, o1 = std::min(OC, o0 + kBlock);
      T acc[kBlock] = {};
      for (int n = 0; n < N; n++) {
        const T* row = dout + int64_t(n) * OC;
        for (int o = o0; o < o1; o++) acc[o - o0] += row[o];
      }
      for (int o = o0; o < o1; o++) dbias[o] += acc[o - o0];
    }
  }
}

template void matmul_forward<float>(float*, const float*, const float*, const float*, int, int,
                                    int);
template void matmul_forward<double>(double*, const double*, const double*, const double*, int, int,
                                     int);
template void matmul_backward<float>(float*, float*, float*, const float*, const float*,
                                     const float*, int, int, int);
template void matmul_backward<double>(double*, double*, double*, const double*, const double*,
                                      const double*, int, int, int);

}  // namespace eco::cpu
