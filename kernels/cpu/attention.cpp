// Causal multi-head self-attention, one (batch, head) pair per OpenMP iteration. Q, K, V are
// read in place from qkv with leading dimension 3C, and every product is a BLAS gemm (which
// runs single-threaded inside the parallel region). The full Tn x Tn score block is computed
// and the upper triangle discarded: at the sequence lengths the CPU trains at this is cheaper
// than per-row calls.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/kernels.h"

namespace eco::cpu {

namespace {
int head_size(int C, int NH) {
  if (NH <= 0 || C % NH != 0) throw std::invalid_argument("attention: C must be a multiple of NH");
  return C / NH;
}
}  // namespace

template <class T>
void attention_forward(T* out, T* att, const T* qkv, int B, int Tn, int C, int NH) {
  const int hs = head_size(C, NH), ld = 3 * C;
  const T scale = T(1) / std::sqrt(T(hs));
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < B * NH; bh++) {
    const int b = bh / NH, h = bh % NH;
    const T* q = qkv + int64_t(b) * Tn * ld + int64_t(h) * hs;  // (Tn, hs), row stride 3C
    const T* k = q + C;
    const T* v = q + 2 * C;
    T* a = att + int64_t(bh) * Tn * Tn;  // (Tn, Tn)
    gemm(false, true, Tn, Tn, hs, scale, q, ld, k, ld, T(0), a, Tn);
    for (int t = 0; t < Tn; t++) {  // causal softmax over a[t, 0..t]; zeros above the diagonal
      T* row = a + int64_t(t) * Tn;
      const T mx = *std::max_element(row, row + t + 1);
      T sum = 0;
      for (int u = 0; u <= t; u++) {
        row[u] = std::exp(row[u] - mx);
        sum += row[u];
      }
      const T inv = T(1) / sum;
      for (int u = 0; u <= t; u++) row[u] *= inv;
      std::fill(row + t + 1, row + Tn, T(0));
    }
    T* o = out + int64_t(b) * Tn * C + int64_t(h) * hs;  // (Tn, hs), row stride C
    gemm(false, false, Tn, hs, Tn, T(1), a, Tn, v, ld, T(0), o, C);
  }
}

template <class T>
void attention_backward(T* dqkv, T* scratch, const T* dout, const T* qkv, const T* att, int B,
                        int Tn, int C, int NH) {
  const int hs = head_size(C, NH), ld = 3 * C;
  const T scale = T(1) / std::sqrt(T(hs));
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < B * NH; bh++) {
    const int b = bh / NH, h = bh % NH;
    const int64_t qoff = int64_t(b) * Tn * ld + int64_t(h) * hs;
    const T *q = qkv + qoff, *k = q + C, *v = q + 2 * C;
    T *dq = dqkv + qoff, *dk = dq + C, *dv = dq + 2 * C;
    const T* a = att + int64_t(bh) * Tn * Tn;
    const T* d = dout + int64_t(b) * Tn * C + int64_t(h) * hs;
    T* g = scratch + int64_t(bh) * Tn * Tn;  // datt, then dpreatt (unscaled), (Tn, Tn)

    gemm(false, true, Tn, Tn, hs, T(1), d, C, v, ld, T(0), g, Tn);   // datt = dout V^T
    gemm(true, false, Tn, hs, Tn, T(1), a, Tn, d, C, T(1), dv, ld);  // dV += att^T dout
    // Softmax backward per row: dpre = att * (datt - sum(att * datt)). att is zero above the
    // diagonal, so the upper triangle of dpre is zero too and the gemms below stay causal.
    for (int t = 0; t < Tn; t++) {
      const T* ar = a + int64_t(t) * Tn;
      T* gr = g + int64_t(t) * Tn;
      T dot = 0;
      for (int u = 0; u <= t; u++) dot += ar[u] * gr[u];
      for (int u = 0; u <= t; u++) gr[u] = ar[u] * (gr[u] - dot);
      std::fill(gr + t + 1, gr + Tn, T(0));
    }
    gemm(false, false, Tn, hs, Tn, scale, g, Tn, k, ld, T(1), dq, ld);  // dQ += s dpre K
    gemm(true, false, Tn, hs, Tn, scale, g, Tn, q, ld, T(1), dk, ld);   // dK += s dpre^T Q
  }
}

template void attention_forward<float>(float*, float*, const float*, int, int, int, int);
template void attention_forward<double>(double*, double*, const double*, int, int, int, int);
template void attention_backward<float>(float*, float*, const float*, const float*, const float*,
                                        int, int, int, int);
template void attention_backward<double>(double*, double*, const double*, const double*,
                                         const double*, int, int, int, int);

}  // namespace eco::cpu
