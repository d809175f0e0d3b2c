// The backend's norms-and-activations family (one of the interfaces Backend joins,
// src/base/backend.h): LayerNorm, RMSNorm, the residual add (alone and fused with the norm after
// it), GELU, SwiGLU, GeGLU and the scale of Gemma's embeddings. Shapes follow kernels/cpu/kernels.h.
#pragma once
#include <cstdint>

#include "base/tensor.h"

namespace eco {

struct BackendNormsActivations {
  virtual ~BackendNormsActivations() = default;
  // out (N, C) = LayerNorm(inp) with gain w and bias b (may be empty); mean, rstd (N) saved.
  virtual void layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd,
                                 const Tensor& inp, const Tensor& w, const Tensor& b, int N,
                                 int C, float eps) = 0;
  virtual void layernorm_backward(const Tensor& dinp, const Tensor& dw, const Tensor& db,
                                  const Tensor& dout, const Tensor& inp, const Tensor& w,
                                  const Tensor& mean, const Tensor& rstd, int N, int C) = 0;
  // out (N, C) = RMSNorm(inp) with gain w; rstd (N) saved.
  virtual void rmsnorm_forward(const Tensor& out, const Tensor& rstd, const Tensor& inp,
                               const Tensor& w, int N, int C, float eps) = 0;
  virtual void rmsnorm_backward(const Tensor& dinp, const Tensor& dw, const Tensor& dout,
                                const Tensor& inp, const Tensor& w, const Tensor& rstd, int N,
                                int C) = 0;
  // out (n) = a + b: activations (the residual stream), or dtype() operands (the (1 + w) gains of
  // Gemma's norms, model_context.cpp's norm_gain).
  virtual void residual_forward(const Tensor& out, const Tensor& a, const Tensor& b,
                                int64_t n) = 0;
  // The residual add and the norm after it: resid (N, C) = a + b as residual_forward, then out
  // = norm(resid) as layernorm_forward (rms false; mean saved, bias may be empty) or
  // rmsnorm_forward (rms true; mean and bias unused). Backend's default makes the two calls;
  // CUDA fuses them (one pass less over resid, the same bits).
  virtual void residual_norm_forward(const Tensor& resid, const Tensor& out, const Tensor& mean,
                                     const Tensor& rstd, const Tensor& a, const Tensor& b,
                                     const Tensor& w, const Tensor& bias, int N, int C, float eps,
                                     bool rms) = 0;
  virtual void gelu_forward(const Tensor& out, const Tensor& inp, int64_t n) = 0;
  virtual void gelu_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout,
                             int64_t n) = 0;
  // SwiGLU: inp (N, 2H) = [gate | up] -> out (N, H) = silu(gate) * up.
  virtual void swiglu_forward(const Tensor& out, const Tensor& inp, int N, int H) = 0;
  virtual void swiglu_backward(const Tensor& dinp, const Tensor& dout, const Tensor& inp, int N,
                               int H) = 0;
  // GeGLU: inp (N, 2H) = [gate | up] -> out (N, H) = gelu_tanh(gate) * up; backward as
  // swiglu_backward.
  virtual void geglu_forward(const Tensor& out, const Tensor& inp, int N, int H) = 0;
  virtual void geglu_backward(const Tensor& dinp, const Tensor& dout, const Tensor& inp, int N,
                              int H) = 0;
  // x (n) *= s: Gemma's embedding scale sqrt(d_model) on the activations, and its backward.
  virtual void scale_inplace(const Tensor& x, float s, int64_t n) = 0;
};

}  // namespace eco
