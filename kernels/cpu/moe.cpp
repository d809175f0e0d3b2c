// The MoE reference kernels (moe.h): per-token loops over the shared router math, the counting
// sort, and row copies / weighted sums in fixed orders (deterministic for any thread count).
#include "kernels/cpu/moe.h"

#include "base/math/moe_dispatch.h"

#include <algorithm>
#include <numeric>

namespace eco::cpu {

template <class T>
void moe_route(int32_t* idx, T* gates, T* probs, T* lse, const T* logits, const T* select_bias,
               int N, int E, int k, MoeRouter mode, bool norm_topk) {
#pragma omp parallel for schedule(static)
  for (int t = 0; t < N; ++t) {
    const int64_t te = int64_t(t) * E, tk = int64_t(t) * k;
    lse[t] = moe_route_token(idx + tk, gates + tk, probs + te, logits + te, select_bias, E, k,
                             mode, norm_topk);
  }
}

template <class T>
MoeRouterSums moe_router_sums(const T* probs, const T* lse, int N, int E) {
  MoeRouterSums s;
  s.prob_sums.assign(size_t(E), 0.0);
  for (int t = 0; t < N; ++t) {
    const T* p = probs + int64_t(t) * E;
    for (int e = 0; e < E; ++e) s.prob_sums[size_t(e)] += double(p[e]);
    s.lse_sq_sum += double(lse[t]) * double(lse[t]);
    s.entropy_sum += double(moe_entropy(p, E));
  }
  return s;
}

template <class T>
MoeDispatch moe_dispatch(int32_t* row_of_slot, int32_t* token_of_row, const int32_t* idx,
                         const T* gates, int N, int E, int k, int64_t capacity, int align) {
  return moe_dispatch_host(row_of_slot, token_of_row, idx, gates, N, E, k, capacity, align);
}

template <class T>
void moe_gather(T* rows, const T* x, const int32_t* token_of_row, int64_t R, int C) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < R; ++r) {
    if (token_of_row[r] < 0)
      std::fill_n(rows + r * C, C, T(0));
    else
      std::copy_n(x + int64_t(token_of_row[r]) * C, C, rows + r * C);
  }
}

template <class T>
void moe_combine(T* out, const T* y, const T* gates, const int32_t* row_of_slot, int N, int C,
                 int k, bool accumulate) {
#pragma omp parallel for schedule(static)
  for (int t = 0; t < N; ++t) {
    T* o = out + int64_t(t) * C;
    for (int c = 0; c < C; ++c) {
      T acc = 0;
      for (int j = 0; j < k; ++j) {
        const int32_t row = row_of_slot[int64_t(t) * k + j];
        if (row >= 0) acc += gates[int64_t(t) * k + j] * y[int64_t(row) * C + c];
      }
      o[c] = accumulate ? o[c] + acc : acc;
    }
  }
}

template <class T>
void moe_combine_backward(T* dy, T* dgates, const T* dout, const T* y, const T* gates,
                          const int32_t* row_of_slot, int N, int C, int k) {
#pragma omp parallel for schedule(static)
  for (int t = 0; t < N; ++t) {
    const T* d = dout + int64_t(t) * C;
    for (int j = 0; j < k; ++j) {
      const int64_t s = int64_t(t) * k + j;
      const int32_t row = row_of_slot[s];
      if (row < 0) {
        dgates[s] = 0;
        continue;
      }
      const T g = gates[s];
      const T* yr = y + int64_t(row) * C;
      T* dr = dy + int64_t(row) * C;
      T dot = 0;
      for (int c = 0; c < C; ++c) {
        dr[c] = g * d[c];
        dot += d[c] * yr[c];
      }
      dgates[s] = dot;
    }
  }
}

template <class T>
void moe_scatter_add(T* dx, const T* drows, const int32_t* row_of_slot, int N, int C, int k) {
#pragma omp parallel for schedule(static)
  for (int t = 0; t < N; ++t) {
    T* o = dx + int64_t(t) * C;
    for (int c = 0; c < C; ++c) {
      T acc = 0;
      for (int j = 0; j < k; ++j) {
        const int32_t row = row_of_slot[int64_t(t) * k + j];
        if (row >= 0) acc += drows[int64_t(row) * C + c];
      }
      o[c] += acc;
    }
  }
}

template <class T>
void moe_router_backward(T* dlogits, const T* dgates, const int32_t* idx, const T* gates,
                         const T* probs, const T* logits, const T* lse,
                         const std::vector<double>& aux_w, double z_coef, int N, int E, int k,
                         MoeRouter mode, bool norm_topk) {
  std::vector<T> w(aux_w.begin(), aux_w.end());
  const T* wp = w.empty() ? nullptr : w.data();
#pragma omp parallel for schedule(static)
  for (int t = 0; t < N; ++t) {
    const int64_t te = int64_t(t) * E, tk = int64_t(t) * k;
    moe_router_backward_token(dlogits + te, dgates + tk, idx + tk, gates + tk, probs + te,
                              logits + te, lse[t], wp, T(z_coef), E, k, mode, norm_topk);
  }
}

#define ECO_MOE_INSTANTIATE(T)                                                                   \
  template void moe_route<T>(int32_t*, T*, T*, T*, const T*, const T*, int, int, int, MoeRouter, \
                             bool);                                                              \
  template MoeRouterSums moe_router_sums<T>(const T*, const T*, int, int);                       \
  template MoeDispatch moe_dispatch<T>(int32_t*, int32_t*, const int32_t*, const T*, int, int,   \
                                       int, int64_t, int);                                       \
  template void moe_gather<T>(T*, const T*, const int32_t*, int64_t, int);                       \
  template void moe_combine<T>(T*, const T*, const T*, const int32_t*, int, int, int, bool);     \
  template void moe_combine_backward<T>(T*, T*, const T*, const T*, const T*, const int32_t*,    \
                                        int, int, int);                                          \
  template void moe_scatter_add<T>(T*, const T*, const int32_t*, int, int, int);                 \
  template void moe_router_backward<T>(T*, const T*, const int32_t*, const T*, const T*,         \
                                       const T*, const T*, const std::vector<double>&, double,   \
                                       int, int, int, MoeRouter, bool);
ECO_MOE_INSTANTIATE(float)
ECO_MOE_INSTANTIATE(double)

}  // namespace eco::cpu
