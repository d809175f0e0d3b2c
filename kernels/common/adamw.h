// The AdamW element update, shared by the CPU and CUDA backends (decoupled weight decay,
// bias-corrected moments; t counts from 1). The ECO variants build on the same moment math.
#pragma once
#include <cmath>
#include "kernels/common/hd.h"

namespace eco {

// sqrt in the argument's own precision on host and device alike (an unqualified sqrt(float) on
// the host would compute in double and break CPU/GPU bit-identity).
ECO_HD float eco_sqrt(float x) { return sqrtf(x); }
ECO_HD double eco_sqrt(double x) { return sqrt(x); }

struct AdamWCoeffs {
  float lr, beta1, beta2, eps, weight_decay, grad_scale;
  float bc1, bc2;  // 1 - beta1^t, 1 - beta2^t
};

// Updates m and v in place and returns the new parameter value.
template <class T>
ECO_HD T adamw_element(T param, T grad, T& m, T& v, const AdamWCoeffs& c) {
  const T g = grad * T(c.grad_scale);
  m = T(c.beta1) * m + (T(1) - T(c.beta1)) * g;
  v = T(c.beta2) * v + (T(1) - T(c.beta2)) * g * g;
  const T mhat = m / T(c.bc1);
  const T vhat = v / T(c.bc2);
  return param - T(c.lr) * (mhat / (eco_sqrt(vhat) + T(c.eps)) + T(c.weight_decay) * param);
}

}  // namespace eco
