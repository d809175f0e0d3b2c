// The backend's GEMM family (one of the interfaces Backend joins, src/base/backend.h): the linear
// layers, on fp32 weights and on weights held quantized. Shapes follow kernels/cpu/kernels.h
// (row-major, N = B*T rows; every backward accumulates with +=).
#pragma once
#include "base/qtensor.h"
#include "base/tensor.h"
#include "base/treatment.h"

namespace eco {

struct BackendGemm {
  virtual ~BackendGemm() = default;
  // out (N, OC) = inp (N, C) @ w (OC, C)^T + bias (OC; may be empty).
  virtual void matmul_forward(const Tensor& out, const Tensor& inp, const Tensor& w,
                              const Tensor& bias, int N, int C, int OC) = 0;
  // dinp (N, C) += dout @ w (dinp may be empty), dw (OC, C) += dout^T @ inp, dbias (OC; may be
  // empty) += the column sums of dout.
  virtual void matmul_backward(const Tensor& dinp, const Tensor& dw, const Tensor& dbias,
                               const Tensor& dout, const Tensor& inp, const Tensor& w, int N,
                               int C, int OC) = 0;
  // Whether matmul_forward / matmul_backward round their weight operand to bf16 (RNE) themselves
  // (CUDA: the GEMMs are bf16). Then a bf16-weight treatment's compute view can be the fp32
  // master itself: RNE is idempotent, so the GEMM sees the same bits without a rounding pass.
  virtual bool gemm_rounds_weights_to_bf16() const { return false; }

  // ---- linear layers whose weight is held quantized (ParamStore::LinearWeight) --------------
  // Forward of x (N, C) through w (OC, C), a QTensor:
  //   x_cast (N, C) = cast_activations(x, act); may alias x; what the backward must see as input
  //   out (N, OC)   = x_cast @ dequant(w)^T + bias (OC; may be empty)
  // w_scratch (OC, C) fp32 is a buffer the implementation may overwrite (the dequantized weight).
  // Backend's default is the emulation every backend can run: cast_activations, dequantize into
  // w_scratch, matmul_forward. A backend may override it with a GEMM on the codes that computes
  // the same products (CUDA on sm_90+: FP8 E4M3 x E4M3 with row-wise scales); out then differs
  // from the emulation by the GEMM's summation order and output rounding only.
  virtual void quantized_linear_forward(const Tensor& out, const Tensor& x_cast, const Tensor& x,
                                        const QTensor& w, const Tensor& w_scratch,
                                        const Tensor& bias, int N, int C, int OC,
                                        ActCast act) = 0;
  // Its backward, as matmul_backward on the dequantized weight with x_cast as the input:
  // dinp (N, C) += dout (N, OC) @ dequant(w), dw (OC, C) += dout^T @ x_cast, dbias += column sums
  // of dout. Backend's default dequantizes into w_scratch and calls matmul_backward; an override
  // may decode the codes straight into the GEMM's operand type (CUDA: bf16), with the same values.
  virtual void quantized_linear_backward(const Tensor& dinp, const Tensor& dw, const Tensor& dbias,
                                         const Tensor& dout, const Tensor& x_cast,
                                         const QTensor& w, const Tensor& w_scratch, int N, int C,
                                         int OC) = 0;
};

}  // namespace eco
