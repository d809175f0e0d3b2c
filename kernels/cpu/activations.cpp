// Element-wise MLP activations (GELU-tanh, SwiGLU, GeGLU), single pass each, over the scalar math in
// src/base/math/activations.h shared with the CUDA backend.
// GELU's float loops use tanh_simd instead of libm's scalar tanhf so that they vectorize.
#include "base/math/activations.h"

#include <cstdint>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/tanh_simd.h"

namespace eco::cpu {
namespace {

// The tanh of the CPU's GELU: float uses the vectorizable tanh_simd (within 1.34 ulp; glibc's
// tanhf is within 2), double keeps libm's tanh (the shared eco_tanh).
struct CpuTanh {
  float operator()(float x) const { return tanh_simd(x); }
  double operator()(double x) const { return eco_tanh(x); }
};

}  // namespace

template <class T>
void gelu_forward(T* out, const T* inp, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; i++) out[i] = gelu_tanh(inp[i], CpuTanh{});
}

template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; i++) dinp[i] += gelu_tanh_grad(inp[i], CpuTanh{}) * dout[i];
}

namespace {

// The gated units over rows of inp (N, 2H) = [gate | up]: out (N, H) = act(gate) * up, and the
// backward accumulating into dinp; act / act_grad are the activation and its derivative.
template <class T, class Act>
void gated_forward(T* out, const T* inp, int N, int H, Act act) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const T* gate = inp + int64_t(n) * 2 * H;
    const T* up = gate + H;
    T* o = out + int64_t(n) * H;
    for (int j = 0; j < H; j++) o[j] = act(gate[j]) * up[j];
  }
}

template <class T, class Act, class ActGrad>
void gated_backward(T* dinp, const T* dout, const T* inp, int N, int H, Act act,
                    ActGrad act_grad) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const T* gate = inp + int64_t(n) * 2 * H;
    const T* up = gate + H;
    T* dgate = dinp + int64_t(n) * 2 * H;
    T* dup = dgate + H;
    const T* d = dout + int64_t(n) * H;
    for (int j = 0; j < H; j++) {
      dgate[j] += act_grad(gate[j]) * up[j] * d[j];
      dup[j] += act(gate[j]) * d[j];
    }
  }
}

}  // namespace

template <class T>
void swiglu_forward(T* out, const T* inp, int N, int H) {
  // inp (N, 2H) = [gate | up] per row; out (N, H).
  gated_forward(out, inp, N, H, [](T x) { return silu(x); });
}

template <class T>
void swiglu_backward(T* dinp, const T* dout, const T* inp, int N, int H) {
  gated_backward(dinp, dout, inp, N, H, [](T x) { return silu(x); },
                 [](T x) { return silu_grad(x); });
}

template <class T>
void geglu_forward(T* out, const T* inp, int N, int H) {
  // inp (N, 2H) = [gate | up] per row; out (N, H).
  gated_forward(out, inp, N, H, [](T x) { return gelu_tanh(x, CpuTanh{}); });
}

template <class T>
void geglu_backward(T* dinp, const T* dout, const T* inp, int N, int H) {
  gated_backward(dinp, dout, inp, N, H, [](T x) { return gelu_tanh(x, CpuTanh{}); },
                 [](T x) { return gelu_tanh_grad(x, CpuTanh{}); });
}

template void geglu_forward<float>(float*, const float*, int, int);
template void geglu_forward<double>(double*, const double*, int, int);
template void geglu_backward<float>(float*, const float*, const float*, int, int);
template void geglu_backward<double>(double*, const double*, const double*, int, int);
template void gelu_forward<float>(float*, const float*, int64_t);
template void gelu_forward<double>(double*, const double*, int64_t);
template void gelu_backward<float>(float*, const float*, const float*, int64_t);
template void gelu_backward<double>(double*, const double*, const double*, int64_t);
template void swiglu_forward<float>(float*, const float*, int, int);
template void swiglu_forward<double>(double*, const double*, int, int);
template void swiglu_backward<float>(float*, const float*, const float*, int, int);
template void swiglu_backward<double>(double*, const double*, const double*, int, int);

}  // namespace eco::cpu
