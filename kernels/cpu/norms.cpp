// LayerNorm and RMSNorm over the last dim. Backward makes two passes: rows (in parallel) for
// dinp, then channel blocks (rows in order) for dweight/dbias, which keeps the parameter
// reductions deterministic for any thread count without per-thread scratch.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/kernels.h"

namespace eco::cpu {

namespace {

// Runs f(c0, c1) over blocks of 64 channels in parallel: each block is owned by one thread,
// which visits rows in order, so per-channel sums do not depend on the thread count.
template <class F>
void for_each_channel_block(int C, F&& f) {
  constexpr int kBlock = 64;
  const int nblocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblocks; blk++) f(blk * kBlock, std::min(C, (blk + 1) * kBlock));
}

}  // namespace

template <class T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias,
                       int N, int C, float eps) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const T* x = inp + int64_t(n) * C;
    T* o = out + int64_t(n) * C;
    T m = 0;
    for (int c = 0; c < C; c++) m += x[c];
    m /= C;
    T v = 0;  // two-pass variance: no cancellation when |mean| >> std
    for (int c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m);
    v /= C;
    const T s = T(1) / std::sqrt(v + T(eps));
    for (int c = 0; c < C; c++) o[c] = (x[c] - m) * s * weight[c] + (bias ? bias[c] : T(0));
    mean[n] = m;
    rstd[n] = s;
  }
}

template <class T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                        const T* mean, const T* rstd, int N, int C) {
  // dinp += rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = dout * weight.
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const T* x = inp + int64_t(n) * C;
    const T* d = dout + int64_t(n) * C;
    T* dx = dinp + int64_t(n) * C;
    const T m = mean[n], s = rstd[n];
    T dnorm_mean = 0, dnorm_norm_mean = 0;
    for (int c = 0; c < C; c++) {
      const T dnorm = d[c] * weight[c];
      dnorm_mean += dnorm;
      dnorm_norm_mean += dnorm * (x[c] - m) * s;
    }
    dnorm_mean /= C;
    dnorm_norm_mean /= C;
    for (int c = 0; c < C; c++) {
      const T norm = (x[c] - m) * s;
      dx[c] += s * (d[c] * weight[c] - dnorm_mean - norm * dnorm_norm_mean);
    }
  }
  for_each_channel_block(C, [&](int c0, int c1) {
    for (int n = 0; n < N; n++) {
      const T* x = inp + int64_t(n) * C;
      const T* d = dout + int64_t(n) * C;
      const T m = mean[n], s = rstd[n];
      for (int c = c0; c < c1; c++) dweight[c] += d[c] * (x[c] - m) * s;
      if (dbias)
        for (int c = c0; c < c1; c++) dbias[c] += d[c];
    }
  });
}

template <class T>
void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* weight, int N, int C, float eps) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const T* x = inp + int64_t(n) * C;
    T* o = out + int64_t(n) * C;
    T ss = 0;
    for (int c = 0; c < C; c++) ss += x[c] * x[c];
    const T s = T(1) / std::sqrt(ss / C + T(eps));
    for (int c = 0; c < C; c++) o[c] = x[c] * s * weight[c];
    rstd[n] = s;
  }
}

template <class T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight,
                      const T* rstd, int N, int C) {
  // dinp += rstd * (dout * weight - x * rstd^2 * mean(dout * weight * x)).
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const T* x = inp + int64_t(n) * C;
    const T* d = dout + int64_t(n) * C;
    T* dx = dinp + int64_t(n) * C;
    const T s = rstd[n];
    T dot = 0;
    for (int c = 0; c < C; c++) dot += d[c] * weight[c] * x[c];
    const T k = s * s * dot / C;
    for (int c = 0; c < C; c++) dx[c] += s * (d[c] * weight[c] - x[c] * k);
  }
  for_each_channel_block(C, [&](int c0, int c1) {
    for (int n = 0; n < N; n++) {
      const T* x = inp + int64_t(n) * C;
      const T* d = dout + int64_t(n) * C;
      const T s = rstd[n];
      for (int c = c0; c < c1; c++) dweight[c] += d[c] * x[c] * s;
    }
  });
}

template void layernorm_forward<float>(float*, float*, float*, const float*, const float*,
                                       const float*, int, int, float);
template void layernorm_forward<double>(double*, double*, double*, const double*, const double*,
                                        const double*, int, int, float);
template void layernorm_backward<float>(float*, float*, float*, const float*, const float*,
                                        const float*, const float*, const float*, int, int);
template void layernorm_backward<double>(double*, double*, double*, const double*, const double*,
                                         const double*, const double*, const double*, int, int);
template void rmsnorm_forward<float>(float*, float*, const float*, const float*, int, int, float);
template void rmsnorm_forward<double>(double*, double*, const double*, const double*, int, int,
                                      float);
template void rmsnorm_backward<float>(float*, float*, const float*, const float*, const float*,
                                      const float*, int, int);
template void rmsnorm_backward<double>(double*, double*, const double*, const double*,
                                       const double*, const double*, int, int);

}  // namespace eco::cpu
