// Backend's defaults that compose operations of several families (the emulated quantized linear
// layer, the unpadded language-model head, the router's GEMMs, unfused residual + norm) and the
// segment check of sum_squares_segments. make_backend is in make_backend.cpp, so that linking the
// CPU backend alone (tests/emu) needs no CUDA backend.
#include "base/backend.h"

#include "base/error.h"

namespace eco {

void Backend::quantized_linear_forward(const Tensor& out, const Tensor& x_cast, const Tensor& x,
                                       const QTensor& w, const Tensor& w_scratch,
                                       const Tensor& bias, int N, int C, int OC, ActCast act) {
  cast_activations(x_cast, x, N, C, act);
  dequantize(w_scratch, w);
  matmul_forward(out, x_cast, w_scratch, bias, N, C, OC);
}

void Backend::quantized_linear_backward(const Tensor& dinp, const Tensor& dw, const Tensor& dbias,
                                        const Tensor& dout, const Tensor& x_cast,
                                        const QTensor& w, const Tensor& w_scratch, int N, int C,
                                        int OC) {
  dequantize(w_scratch, w);
  matmul_backward(dinp, dw, dbias, dout, x_cast, w_scratch, N, C, OC);
}

void Backend::router_matmul_forward(const Tensor& logits, const Tensor& x, const Tensor& w,
                                    int N, int C, int E) {
  matmul_forward(logits, x, w, Tensor{}, N, C, E);
}

void Backend::router_matmul_backward(const Tensor& dx, const Tensor& dw, const Tensor& dlogits,
                                     const Tensor& x, const Tensor& w, int N, int C, int E) {
  matmul_backward(dx, dw, Tensor{}, dlogits, x, w, N, C, E);
}

void Backend::head_forward(const Tensor& logits, const Tensor& inp, const Tensor& w, int N, int C,
                           int V, int ld) {
  ECO_ASSERT(ld == V, "{}: head_forward with logits stride {} != vocabulary {}", name(), ld, V);
  matmul_forward(logits, inp, w, Tensor{}, N, C, V);
}

void Backend::head_backward(const Tensor& dinp, const Tensor& dw, const Tensor& dlogits,
                            const Tensor& inp, const Tensor& w, int N, int C, int V, int ld) {
  ECO_ASSERT(ld == V, "{}: head_backward with logits stride {} != vocabulary {}", name(), ld, V);
  matmul_backward(dinp, dw, Tensor{}, dlogits, inp, w, N, C, V);
}

void Backend::residual_norm_forward(const Tensor& resid, const Tensor& out, const Tensor& mean,
                                    const Tensor& rstd, const Tensor& a, const Tensor& b,
                                    const Tensor& w, const Tensor& bias, int N, int C, float eps,
                                    bool rms) {
  residual_forward(resid, a, b, int64_t(N) * C);
  if (rms)
    rmsnorm_forward(out, rstd, resid, w, N, C, eps);
  else
    layernorm_forward(out, mean, rstd, resid, w, bias, N, C, eps);
}

void check_sum_segments(const Tensor& x, const std::vector<SumSegment>& segs) {
  const int64_t n = x.numel();
  for (size_t k = 0; k < segs.size(); ++k) {
    const SumSegment& g = segs[k];
    if (g.offset < 0 || g.length < 0 || g.offset > n || g.length > n - g.offset)
      runtime_error("sum_squares_segments: segment {} (offset {}, length {}) is outside the "
                    "tensor's {} elements",
                    k, g.offset, g.length, n);
  }
}

}  // namespace eco
