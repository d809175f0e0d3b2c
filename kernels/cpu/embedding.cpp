// Token (+ learned position) embedding. The backward scatter-add is parallelised over channel
// blocks with tokens visited in order, so it is deterministic for any thread count.
#include <algorithm>
#include <cstdint>

#include "kernels/cpu/kernels.h"

namespace eco::cpu {

template <class T>
void embedding_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int B, int Tn,
                       int C) {
  // out (B*Tn, C); tokens (B*Tn) must lie in [0, V).
#pragma omp parallel for schedule(static)
  for (int n = 0; n < B * Tn; n++) {
    T* o = out + int64_t(n) * C;
    const T* e = wte + int64_t(tokens[n]) * C;
    if (wpe) {
      const T* p = wpe + int64_t(n % Tn) * C;
      for (int c = 0; c < C; c++) o[c] = e[c] + p[c];
    } else {
      std::copy(e, e + C, o);
    }
  }
}

template <class T>
void embedding_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int B, int Tn,
                        int C) {
  // A token repeated in the batch hits the same dwte row; owning channels (not rows) per thread
  // avoids races and fixes the summation order to token order.
  constexpr int kBlock = 64;
  const int nblocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblocks; blk++) {
    const int c0 = blk * kBlock, c1 = std::min(C, c0 + kBlock);
    for (int n = 0; n < B * Tn; n++) {
      const T* d = dout + int64_t(n) * C;
      T* e = dwte + int64_t(tokens[n]) * C;
      for (int c = c0; c < c1; c++) e[c] += d[c];
      if (dwpe) {
        T* p = dwpe + int64_t(n % Tn) * C;
        for (int c = c0; c < c1; c++) p[c] += d[c];
      }
    }
  }
}

template void embedding_forward<float>(float*, const int32_t*, const float*, const float*, int, int,
                                       int);
template void embedding_forward<double>(double*, const int32_t*, const double*, const double*, int,
                                        int, int);
template void embedding_backward<float>(float*, float*, const float*, const int32_t*, int, int,
                                        int);
template void embedding_backward<double>(double*, double*, const double*, const int32_t*, int, int,
                                         int);

}  // namespace eco::cpu
