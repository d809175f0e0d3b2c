// Linear forward/backward over a stored weight.
#include "model/linear.h"

namespace eco {

// A weight stored quantized goes to the backend as its QTensor: the backend decides how its
// GEMM reads the codes (CUDA: an FP8 GEMM where it can; else the emulation the CPU runs).
void linear_forward(const ModelContext& ctx, LinearRef l, const Tensor& out, const Tensor& inp,
                    const Tensor& cast_inp, int N, int C, int OC) {
  const ParamStore::LinearWeight lw = ctx.store.linear_weight(size_t(l.weight));
  if (lw.quantized) {
    ctx.be.quantized_linear_forward(out, cast_inp, inp, *lw.quantized, lw.scratch, ctx.w(l.bias),
                                    N, C, OC, lw.act);
  } else {
    ctx.be.cast_activations(cast_inp, inp, N, C, lw.act);
    ctx.be.matmul_forward(out, cast_inp, lw.dense, ctx.w(l.bias), N, C, OC);
  }
}

void linear_backward(const ModelContext& ctx, LinearRef l, const Tensor& dinp, const Tensor& dout,
                     const Tensor& cast_inp, int N, int C, int OC) {
  const ParamStore::LinearWeight lw = ctx.store.linear_weight(size_t(l.weight));
  if (lw.quantized)
    ctx.be.quantized_linear_backward(dinp, ctx.g(l.weight), ctx.g(l.bias), dout, cast_inp,
                                     *lw.quantized, lw.scratch, N, C, OC);
  else
    ctx.be.matmul_backward(dinp, ctx.g(l.weight), ctx.g(l.bias), dout, cast_inp, lw.dense, N, C,
                           OC);
}

}  // namespace eco
