// Fused softmax + cross-entropy over the vocabulary, one row per iteration. exp(logit - max)
// is computed once per element: written into dlogits and rescaled there when a gradient is
// requested. The row sum is accumulated in double (V is ~50k terms).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/kernels.h"

namespace eco::cpu {

template <class T>
void crossentropy_forward_backward(T* losses, T* dlogits, const T* logits, const int32_t* targets,
                                   int N, int V, float dloss) {
  // logits, dlogits (N, V); losses, targets (N); targets in [0, V) or < 0 (ignored).
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const T* x = logits + int64_t(n) * V;
    T* g = dlogits ? dlogits + int64_t(n) * V : nullptr;  // may alias x: same index read first
    const int target = targets[n];
    if (target < 0) {
      losses[n] = T(0);
      if (g) std::fill(g, g + V, T(0));
      continue;
    }
    const T x_target = x[target];
    const T mx = *std::max_element(x, x + V);
    double sum = 0;
    if (g) {
      for (int v = 0; v < V; v++) {
        g[v] = std::exp(x[v] - mx);
        sum += g[v];
      }
    } else {
      for (int v = 0; v < V; v++) sum += std::exp(x[v] - mx);
    }
    // loss = logsumexp(x) - x[target] = log(sum) + max - x[target]
    losses[n] = T(std::log(sum) + double(mx - x_target));
    if (g) {
      const T k = T(double(dloss) / sum);
      for (int v = 0; v < V; v++) g[v] *= k;
      g[target] -= T(dloss);
    }
  }
}

template void crossentropy_forward_backward<float>(float*, float*, const float*, const int32_t*,
                                                   int, int, float);
template void crossentropy_forward_backward<double>(double*, double*, const double*, const int32_t*,
                                                    int, int, float);

}  // namespace eco::cpu
