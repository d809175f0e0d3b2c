// LayerNorm and RMSNorm over the last dim, and RMSNorm over the q and k heads (QK-norm). Backward makes two passes: rows (in parallel) for
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

namespace {

// One row of RMSNorm: o (C) = x * rstd * w; returns rstd.
template <class T>
T rmsnorm_row(T* o, const T* x, const T* w, int C, float eps) {
  T ss = 0;
  for (int c = 0; c < C; c++) ss += x[c] * x[c];
  const T s = T(1) / std::sqrt(ss / C + T(eps));
  for (int c = 0; c < C; c++) o[c] = x[c] * s * w[c];
  return s;
}

// One row of its input gradient: dx (C) += rstd * (d * w - x * rstd^2 * mean(d * w * x)).
template <class T>
void rmsnorm_row_backward(T* dx, const T* d, const T* x, const T* w, T s, int C) {
  T dot = 0;
  for (int c = 0; c < C; c++) dot += d[c] * w[c] * x[c];
  const T k = s * s * dot / C;
  for (int c = 0; c < C; c++) dx[c] += s * (d[c] * w[c] - x[c] * k);
}

}  // namespace

template <class T>
void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* weight, int N, int C, float eps) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++)
    rstd[n] = rmsnorm_row(out + int64_t(n) * C, inp + int64_t(n) * C, weight, C, eps);
}

template <class T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight,
                      const T* rstd, int N, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++)
    rmsnorm_row_backward(dinp + int64_t(n) * C, dout + int64_t(n) * C, inp + int64_t(n) * C,
                         weight, rstd[n], C);
  for_each_channel_block(C, [&](int c0, int c1) {
    for (int n = 0; n < N; n++) {
      const T* x = inp + int64_t(n) * C;
      const T* d = dout + int64_t(n) * C;
      const T s = rstd[n];
      for (int c = c0; c < c1; c++) dweight[c] += d[c] * x[c] * s;
    }
  });
}

template <class T>
void qk_rmsnorm_forward(T* out, T* rstd, const T* inp, const T* wq, const T* wk, int N, int NH,
                        int KVH, int hd, float eps) {
  const int heads = NH + KVH;  // q heads then k heads, contiguous at the start of each row
  const int64_t ld = int64_t(NH + 2 * KVH) * hd, v0 = int64_t(heads) * hd;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const T* x = inp + int64_t(n) * ld;
    T* o = out + int64_t(n) * ld;
    for (int j = 0; j < heads; j++)
      rstd[int64_t(n) * heads + j] =
          rmsnorm_row(o + int64_t(j) * hd, x + int64_t(j) * hd, j < NH ? wq : wk, hd, eps);
    std::copy(x + v0, x + ld, o + v0);
  }
}

template <class T>
void qk_rmsnorm_backward(T* dinp, T* dwq, T* dwk, const T* dout, const T* inp, const T* wq,
                         const T* wk, const T* rstd, int N, int NH, int KVH, int hd) {
  const int heads = NH + KVH;
  const int64_t ld = int64_t(NH + 2 * KVH) * hd, v0 = int64_t(heads) * hd;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const T* x = inp + int64_t(n) * ld;
    const T* d = dout + int64_t(n) * ld;
    T* dx = dinp + int64_t(n) * ld;
    for (int j = 0; j < heads; j++)
      rmsnorm_row_backward(dx + int64_t(j) * hd, d + int64_t(j) * hd, x + int64_t(j) * hd,
                           j < NH ? wq : wk, rstd[int64_t(n) * heads + j], hd);
    for (int64_t c = v0; c < ld; c++) dx[c] += d[c];
  }
  // The gains: rows in order, then heads in order, per channel block (thread-count invariant).
  for_each_channel_block(hd, [&](int c0, int c1) {
    for (int n = 0; n < N; n++)
      for (int j = 0; j < heads; j++) {
        const T* x = inp + int64_t(n) * ld + int64_t(j) * hd;
        const T* d = dout + int64_t(n) * ld + int64_t(j) * hd;
        const T s = rstd[int64_t(n) * heads + j];
        T* dw = j < NH ? dwq : dwk;
        for (int c = c0; c < c1; c++) dw[c] += d[c] * x[c] * s;
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
template void qk_rmsnorm_forward<float>(float*, float*, const float*, const float*, const float*,
                                        int, int, int, int, float);
template void qk_rmsnorm_forward<double>(double*, double*, const double*, const double*,
                                         const double*, int, int, int, int, float);
template void qk_rmsnorm_backward<float>(float*, float*, float*, const float*, const float*,
                                         const float*, const float*, const float*, int, int, int,
                                         int);
template void qk_rmsnorm_backward<double>(double*, double*, double*, const double*, const double*,
                                          const double*, const double*, const double*, int, int,
                                          int, int);

}  // namespace eco::cpu
