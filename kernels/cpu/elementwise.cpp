// Element-wise residual add, gradient accumulate and in-place scale: memory-bound single passes.
#include <cstdint>

#include "kernels/cpu/kernels.h"

namespace eco::cpu {

template <class T>
void residual_forward(T* out, const T* a, const T* b, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

template <class T>
void accumulate(T* dst, const T* src, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; i++) dst[i] += src[i];
}

template <class T>
void scale_inplace(T* x, float s, int64_t n) {
  const T st = T(s);
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; i++) x[i] *= st;
}

template void residual_forward<float>(float*, const float*, const float*, int64_t);
template void residual_forward<double>(double*, const double*, const double*, int64_t);
template void accumulate<float>(float*, const float*, int64_t);
template void accumulate<double>(double*, const double*, int64_t);
template void scale_inplace<float>(float*, float, int64_t);
template void scale_inplace<double>(double*, float, int64_t);

}  // namespace eco::cpu
