// Causal self-attention, grouped-query (KVH key/value heads, each read by NH / KVH query heads)
// with an optional sliding window; multi-head attention is the case KVH = NH. Q, K, V are read
// in place from the fused qkv rows, and every product is a BLAS gemm (which runs single-threaded
// inside the parallel region). The full Tn x Tn score block is computed and the entries outside
// the causal window discarded: at the sequence lengths the CPU trains at this is cheaper than
// per-row calls.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>

#include "base/math/attention_shape.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/kernels.h"

namespace eco::cpu {

namespace {
void check_shape(int NH, int KVH, int hs, int window, float q_scalar) {
  if (NH <= 0 || KVH <= 0 || hs <= 0 || NH % KVH != 0 || window < 0 || !(q_scalar > 0))
    throw std::invalid_argument(
        "attention: need NH, KVH, hs > 0, NH a multiple of KVH, window >= 0, q_scalar > 0");
}
int head_size(int C, int NH) {
  if (NH <= 0 || C % NH != 0) throw std::invalid_argument("attention: C must be a multiple of NH");
  return C / NH;
}
}  // namespace

template <class T>
void attention_forward_gqa(T* out, T* att, const T* qkv, int B, int Tn, int NH, int KVH, int hs,
                           int window, float q_scalar) {
  check_shape(NH, KVH, hs, window, q_scalar);
  const int64_t ld = int64_t(NH + 2 * KVH) * hs, ldo = int64_t(NH) * hs;
  const int group = NH / KVH;
  const T scale = T(1) / std::sqrt(T(q_scalar));
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < B * NH; bh++) {
    const int b = bh / NH, h = bh % NH, kvh = h / group;
    const T* row0 = qkv + int64_t(b) * Tn * ld;
    const T* q = row0 + int64_t(h) * hs;                    // (Tn, hs), row stride ld
    const T* k = row0 + int64_t(NH + kvh) * hs;
    const T* v = row0 + int64_t(NH + KVH + kvh) * hs;
    T* a = att + int64_t(bh) * Tn * Tn;  // (Tn, Tn)
    gemm(false, true, Tn, Tn, hs, scale, q, ld, k, ld, T(0), a, Tn);
    for (int t = 0; t < Tn; t++) {  // softmax over a[t, lo..t]; zeros elsewhere
      T* row = a + int64_t(t) * Tn;
      const int lo = attention_first_key(t, window);  // src/base/math: as CUDA masks
      const T mx = *std::max_element(row + lo, row + t + 1);
      T sum = 0;
      for (int u = lo; u <= t; u++) {
        row[u] = std::exp(row[u] - mx);
        sum += row[u];
      }
      const T inv = T(1) / sum;
      for (int u = lo; u <= t; u++) row[u] *= inv;
      std::fill(row, row + lo, T(0));
      std::fill(row + t + 1, row + Tn, T(0));
    }
    T* o = out + int64_t(b) * Tn * ldo + int64_t(h) * hs;  // (Tn, hs), row stride NH hs
    gemm(false, false, Tn, hs, Tn, T(1), a, Tn, v, ld, T(0), o, ldo);
  }
}

template <class T>
void attention_backward_gqa(T* dqkv, T* scratch, const T* dout, const T* qkv, const T* att, int B,
                            int Tn, int NH, int KVH, int hs, int window, float q_scalar) {
  check_shape(NH, KVH, hs, window, q_scalar);
  const int64_t ld = int64_t(NH + 2 * KVH) * hs, ldo = int64_t(NH) * hs;
  const int group = NH / KVH;
  const T scale = T(1) / std::sqrt(T(q_scalar));
  // One (b, kv head) per iteration: its query heads run in order, so dK and dV of the shared
  // kv head add up without races and in a fixed order.
#pragma omp parallel for schedule(static)
  for (int bk = 0; bk < B * KVH; bk++) {
    const int b = bk / KVH, kvh = bk % KVH;
    const int64_t row0 = int64_t(b) * Tn * ld;
    const int64_t koff = row0 + int64_t(NH + kvh) * hs, voff = row0 + int64_t(NH + KVH + kvh) * hs;
    const T *k = qkv + koff, *v = qkv + voff;
    T *dk = dqkv + koff, *dv = dqkv + voff;
    for (int h = kvh * group; h < (kvh + 1) * group; h++) {
      const int64_t bh = int64_t(b) * NH + h, qoff = row0 + int64_t(h) * hs;
      const T* q = qkv + qoff;
      T* dq = dqkv + qoff;
      const T* a = att + bh * Tn * Tn;
      const T* d = dout + int64_t(b) * Tn * ldo + int64_t(h) * hs;
      T* g = scratch + bh * Tn * Tn;  // datt, then dpreatt (unscaled), (Tn, Tn)

      gemm(false, true, Tn, Tn, hs, T(1), d, ldo, v, ld, T(0), g, Tn);  // datt = dout V^T
      gemm(true, false, Tn, hs, Tn, T(1), a, Tn, d, ldo, T(1), dv, ld);  // dV += att^T dout
      // Softmax backward per row: dpre = att * (datt - sum(att * datt)). att is zero outside
      // the window, so dpre is too and the gemms below stay causal and windowed.
      for (int t = 0; t < Tn; t++) {
        const T* ar = a + int64_t(t) * Tn;
        T* gr = g + int64_t(t) * Tn;
        const int lo = attention_first_key(t, window);  // src/base/math: as CUDA masks
        T dot = 0;
        for (int u = lo; u <= t; u++) dot += ar[u] * gr[u];
        for (int u = lo; u <= t; u++) gr[u] = ar[u] * (gr[u] - dot);
        std::fill(gr, gr + lo, T(0));
        std::fill(gr + t + 1, gr + Tn, T(0));
      }
      gemm(false, false, Tn, hs, Tn, scale, g, Tn, k, ld, T(1), dq, ld);  // dQ += s dpre K
      gemm(true, false, Tn, hs, Tn, scale, g, Tn, q, ld, T(1), dk, ld);   // dK += s dpre^T Q
    }
  }
}

template <class T>
void attention_forward(T* out, T* att, const T* qkv, int B, int Tn, int C, int NH) {
  const int hs = head_size(C, NH);
  attention_forward_gqa(out, att, qkv, B, Tn, NH, NH, hs, 0, float(hs));
}

template <class T>
void attention_backward(T* dqkv, T* scratch, const T* dout, const T* qkv, const T* att, int B,
                        int Tn, int C, int NH) {
  const int hs = head_size(C, NH);
  attention_backward_gqa(dqkv, scratch, dout, qkv, att, B, Tn, NH, NH, hs, 0, float(hs));
}

template void attention_forward<float>(float*, float*, const float*, int, int, int, int);
template void attention_forward<double>(double*, double*, const double*, int, int, int, int);
template void attention_backward<float>(float*, float*, const float*, const float*, const float*,
                                        int, int, int, int);
template void attention_backward<double>(double*, double*, const double*, const double*,
                                         const double*, int, int, int, int);
template void attention_forward_gqa<float>(float*, float*, const float*, int, int, int, int, int,
                                           int, float);
template void attention_forward_gqa<double>(double*, double*, const double*, int, int, int, int,
                                            int, int, float);
template void attention_backward_gqa<float>(float*, float*, const float*, const float*,
                                            const float*, int, int, int, int, int, int, float);
template void attention_backward_gqa<double>(double*, double*, const double*, const double*,
                                             const double*, int, int, int, int, int, int, float);

}  // namespace eco::cpu
