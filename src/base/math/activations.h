// Scalar activation functions and their derivatives, shared by both backends.
#pragma once
#include <cmath>
#include "base/math/hd.h"

namespace eco {

// tanh / exp in the argument's own precision on host and device alike.
ECO_HD float eco_tanh(float x) { return tanhf(x); }
ECO_HD double eco_tanh(double x) { return tanh(x); }
ECO_HD float eco_exp(float x) { return expf(x); }
ECO_HD double eco_exp(double x) { return exp(x); }

// The tanh GELU uses by default (a backend may pass its own, e.g. the CPU's vectorizable one).
struct EcoTanh {
  template <class T>
  ECO_HD T operator()(T x) const {
    return eco_tanh(x);
  }
};

// GELU, tanh approximation (GPT-2): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
template <class T, class Tanh = EcoTanh>
ECO_HD T gelu_tanh(T x, Tanh tanh_fn = {}) {
  const T k = T(0.7978845608028654);  // sqrt(2/pi)
  const T u = k * (x + T(0.044715) * x * x * x);
  return T(0.5) * x * (T(1) + tanh_fn(u));
}

// d/dx of gelu_tanh.
template <class T, class Tanh = EcoTanh>
ECO_HD T gelu_tanh_grad(T x, Tanh tanh_fn = {}) {
  const T k = T(0.7978845608028654);
  const T x2 = x * x;
  const T u = k * (x + T(0.044715) * x2 * x);
  const T th = tanh_fn(u);
  const T sech2 = T(1) - th * th;
  return T(0.5) * (T(1) + th) + T(0.5) * x * sech2 * k * (T(1) + T(3) * T(0.044715) * x2);
}

template <class T>
ECO_HD T sigmoid(T x) {
  return T(1) / (T(1) + eco_exp(-x));
}

// SiLU (swish): x * sigmoid(x).
template <class T>
ECO_HD T silu(T x) {
  return x * sigmoid(x);
}

// d/dx of silu: s (1 + x (1 - s)).
template <class T>
ECO_HD T silu_grad(T x) {
  const T s = sigmoid(x);
  return s * (T(1) + x * (T(1) - s));
}

}  // namespace eco
