// The backend interface: the model is written once against these operations; kernels/cpu
// implements them as the fp32/fp64 reference, kernels/cuda as the product. Shapes follow
// kernels/cpu/kernels.h (row-major, N = B*T rows; every backward accumulates with +=).
// A backend owns every buffer it allocates and records it in the memory ledger.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "core/memory_ledger.h"
#include "core/tensor.h"
#include "quant/treatment.h"

namespace eco {

struct AdamWStep {
  float lr;
  float beta1, beta2, eps;
  float weight_decay;  // already zero for parameters without decay
  float grad_scale;    // gradient clipping multiplier (1 = no clipping)
  int64_t t;           // step number, from 1 (bias corrections)
};

// SGD with momentum in EMA form: m = beta*m + (1-beta)*g, w = w*(1 - lr*wd) - lr*m.
struct SgdmStep {
  float lr, beta, weight_decay, grad_scale;
};

// How a quantized parameter is updated this step (the treatment's policy and rounding), and
// the key of its SR random stream.
struct QuantizedStep {
  UpdatePolicy policy;
  Rounding rounding;
  uint64_t seed, step;
  uint32_t tensor_id;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // dtype of parameters, gradients and activations on this backend.
  virtual DType dtype() const = 0;

  // ---- memory -------------------------------------------------------------------------------
  // Allocate a zero-filled tensor that lives as long as the backend; recorded in the ledger
  // (quantizable_param: it belongs to a block linear, for the per-quantized-parameter figures).
  virtual Tensor alloc(const std::string& name, std::vector<int64_t> shape, DType dtype,
                       MemCategory category, bool quantizable_param = false) = 0;
  virtual void zero(const Tensor& t) = 0;
  // Raw copies in the tensor's own dtype.
  virtual void copy_from_host(const Tensor& dst, const void* src) = 0;
  virtual void copy_to_host(void* dst, const Tensor& src) = 0;
  MemoryLedger& ledger() { return ledger_; }
  const MemoryLedger& ledger() const { return ledger_; }

  // ---- layers (see kernels/cpu/kernels.h for the exact contracts) -------------------------
  virtual void matmul_forward(const Tensor& out, const Tensor& inp, const Tensor& w,
                              const Tensor& bias, int N, int C, int OC) = 0;
  virtual void matmul_backward(const Tensor& dinp, const Tensor& dw, const Tensor& dbias,
                               const Tensor& dout, const Tensor& inp, const Tensor& w, int N,
                               int C, int OC) = 0;
  virtual void embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte,
                                 const Tensor& wpe, int B, int T, int C) = 0;
  virtual void embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout,
                                  const Tensor& tokens, int B, int T, int C) = 0;
  virtual void layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd,
                                 const Tensor& inp, const Tensor& w, const Tensor& b, int N,
                                 int C, float eps) = 0;
  virtual void layernorm_backward(const Tensor& dinp, const Tensor& dw, const Tensor& db,
                                  const Tensor& dout, const Tensor& inp, const Tensor& w,
                                  const Tensor& mean, const Tensor& rstd, int N, int C) = 0;
  virtual void rmsnorm_forward(const Tensor& out, const Tensor& rstd, const Tensor& inp,
                               const Tensor& w, int N, int C, float eps) = 0;
  virtual void rmsnorm_backward(const Tensor& dinp, const Tensor& dw, const Tensor& dout,
                                const Tensor& inp, const Tensor& w, const Tensor& rstd, int N,
                                int C) = 0;
  virtual void rope_forward(const Tensor& out, const Tensor& inp, int B, int T, int C, int NH,
                            float theta) = 0;
  virtual void rope_backward(const Tensor& dinp, const Tensor& dout, int B, int T, int C, int NH,
                             float theta) = 0;
  virtual void attention_forward(const Tensor& out, const Tensor& att, const Tensor& qkv, int B,
                                 int T, int C, int NH) = 0;
  virtual void attention_backward(const Tensor& dqkv, const Tensor& scratch, const Tensor& dout,
                                  const Tensor& qkv, const Tensor& att, int B, int T, int C,
                                  int NH) = 0;
  virtual void gelu_forward(const Tensor& out, const Tensor& inp, int64_t n) = 0;
  virtual void gelu_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout,
                             int64_t n) = 0;
  virtual void swiglu_forward(const Tensor& out, const Tensor& inp, int N, int H) = 0;
  virtual void swiglu_backward(const Tensor& dinp, const Tensor& dout, const Tensor& inp, int N,
                               int H) = 0;
  virtual void residual_forward(const Tensor& out, const Tensor& a, const Tensor& b,
                                int64_t n) = 0;
  virtual void accumulate(const Tensor& dst, const Tensor& src, int64_t n) = 0;
  // losses (N) and, if dlogits is non-empty, dlogits (N, V) (may alias logits).
  virtual void crossentropy_forward_backward(const Tensor& losses, const Tensor& dlogits,
                                             const Tensor& logits, const Tensor& targets, int N,
                                             int V, float dloss) = 0;

  // ---- quantization ---------------------------------------------------------------------------
  // out (rows, cols) fp32 = dequant(q).
  virtual void dequantize(const Tensor& out, const QTensor& q) = 0;
  // q = quantize(src (rows, cols) fp32) with q's format and granularity; SR draws are keyed by
  // (seed, step, tensor_id, element index).
  virtual void quantize(QTensor& q, const Tensor& src, Rounding rounding, uint64_t seed,
                        uint64_t step, uint32_t tensor_id) = 0;
  // out (n) = bf16-rounded in (round to nearest even), kept in fp32.
  virtual void round_to_bf16(const Tensor& out, const Tensor& in, int64_t n) = 0;
  // What the forward does to activations x (N, C) entering a quantized linear, in place:
  // None: nothing; Bf16: round; E4M3Row: quantize-dequantize with one scale per row, RTN.
  virtual void cast_activations(const Tensor& x, int N, int C, ActCast cast) = 0;

  // ---- optimizer ----------------------------------------------------------------------------
  virtual double sum_squares(const Tensor& x, int64_t n) = 0;
  // One AdamW step over n elements of a parameter (param, grad, m, v are parallel arrays).
  virtual void adamw_update(const Tensor& param, const Tensor& grad, const Tensor& m,
                            const Tensor& v, int64_t n, const AdamWStep& s) = 0;
  virtual void sgdm_update(const Tensor& param, const Tensor& grad, const Tensor& m, int64_t n,
                           const SgdmStep& s) = 0;
  // The fused update of a quantized parameter (kernels/common/eco_update.h), one scale group at
  // a time: moments, theta (never stored), new scale, codes, and under ECO the error into m.
  // master is the fp32 master copy (Master policy) or empty; m, v are fp32 or bf16.
  virtual void quantized_adamw_update(QTensor& q, const Tensor& master, const Tensor& grad,
                                      const Tensor& m, const Tensor& v, const AdamWStep& s,
                                      const QuantizedStep& qs) = 0;
  virtual void quantized_sgdm_update(QTensor& q, const Tensor& master, const Tensor& grad,
                                     const Tensor& m, const SgdmStep& s,
                                     const QuantizedStep& qs) = 0;

 protected:
  MemoryLedger ledger_;
};

// The CPU reference backend in fp32 (training) or fp64 (gradient checks).
std::unique_ptr<Backend> make_cpu_backend(DType dtype = DType::F32);
// A backend that only records allocations in its ledger (for --plan); no operation may run.
std::unique_ptr<Backend> make_planning_backend(DType dtype = DType::F32);

}  // namespace eco
