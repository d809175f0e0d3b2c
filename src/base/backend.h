// The backend interface: the model is written once against these operations; kernels/cpu
// implements them as the fp32/fp64 reference, kernels/cuda as the product. Backend joins one
// interface per op family, each in its own header, so that code can name the family it uses.
// A backend owns every buffer it allocates and records it in the memory ledger.
#pragma once
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/backend_attention.h"
#include "base/backend_device.h"
#include "base/backend_embedding_classifier.h"
#include "base/backend_gemm.h"
#include "base/backend_moe.h"
#include "base/backend_norms_activations.h"
#include "base/backend_quantization.h"
#include "base/device.h"
#include "base/memory_ledger.h"

namespace eco {

// The families (shapes follow kernels/cpu/kernels.h: row-major, N = B*T rows; every backward
// accumulates with +=):
//   BackendDevice               name, dtypes, workspaces, streams and events, profiling, memory
//   BackendGemm                 the linear layers, on fp32 and on quantized weights
//   BackendAttention            attention, RoPE, QK-norm (AttentionShape)
//   BackendNormsActivations     LayerNorm, RMSNorm, residual adds, GELU / SwiGLU / GeGLU
//   BackendEmbeddingClassifier  embeddings, the language-model head, cross-entropy
//   BackendMoe                  the router, the dispatch to experts and the combine
//   BackendQuantization         quantize / dequantize, activation casts, the optimizer's updates
// Backend adds the memory ledger and the defaults that compose operations of several families.
class Backend : public BackendDevice,
                public BackendGemm,
                public BackendAttention,
                public BackendNormsActivations,
                public BackendEmbeddingClassifier,
                public BackendMoe,
                public BackendQuantization {
 public:
  MemoryLedger& ledger() { return ledger_; }
  const MemoryLedger& ledger() const { return ledger_; }

  // cast_activations, dequantize into w_scratch, matmul_forward (BackendGemm says when a backend
  // overrides it).
  void quantized_linear_forward(const Tensor& out, const Tensor& x_cast, const Tensor& x,
                                const QTensor& w, const Tensor& w_scratch, const Tensor& bias,
                                int N, int C, int OC, ActCast act) override;
  // dequantize into w_scratch, matmul_backward.
  void quantized_linear_backward(const Tensor& dinp, const Tensor& dw, const Tensor& dbias,
                                 const Tensor& dout, const Tensor& x_cast, const QTensor& w,
                                 const Tensor& w_scratch, int N, int C, int OC) override;
  // matmul_forward / matmul_backward without bias (unpadded logits: ld == V).
  void head_forward(const Tensor& logits, const Tensor& inp, const Tensor& w, int N, int C, int V,
                    int ld) override;
  void head_backward(const Tensor& dinp, const Tensor& dw, const Tensor& dlogits,
                     const Tensor& inp, const Tensor& w, int N, int C, int V, int ld) override;
  // matmul_forward / matmul_backward without bias.
  void router_matmul_forward(const Tensor& logits, const Tensor& x, const Tensor& w, int N, int C,
                             int E) override;
  void router_matmul_backward(const Tensor& dx, const Tensor& dw, const Tensor& dlogits,
                              const Tensor& x, const Tensor& w, int N, int C, int E) override;
  // residual_forward, then rmsnorm_forward or layernorm_forward.
  void residual_norm_forward(const Tensor& resid, const Tensor& out, const Tensor& mean,
                             const Tensor& rstd, const Tensor& a, const Tensor& b, const Tensor& w,
                             const Tensor& bias, int N, int C, float eps, bool rms) override;

 protected:
  MemoryLedger ledger_;
};

// The CPU reference backend in fp32 (training) or fp64 (gradient checks).
std::unique_ptr<Backend> make_cpu_backend(DType dtype = DType::F32);
// A backend that only records allocations in its ledger (for --plan); no operation may run.
// device "cuda" plans with the CUDA backend's layouts (bf16 activations, lse attention state).
std::unique_ptr<Backend> make_planning_backend(Device device = Device::Cpu);
// The CUDA backend (kernels/cuda/cuda_backend.cpp) on the current device. A usage error when
// this build has no CUDA backend or no CUDA GPU is visible.
std::unique_ptr<Backend> make_cuda_backend();
// Free memory of the current CUDA device in bytes; 0 when unknown (no CUDA backend in this build,
// no GPU visible). The memory check of a cuda run (train/memory_check.h) compares the plan with it.
uint64_t cuda_free_memory_bytes();
// CUDA GPUs visible to this process; 0 without a CUDA backend in this build or without a GPU.
int cuda_device_count();
// The current CUDA device's PCI bus id ("0000:41:00.0"): the same physical GPU has the same id in
// every process of a host, whatever CUDA_VISIBLE_DEVICES or a cgroup makes its ordinal. Empty
// without a CUDA backend in this build or without a GPU.
std::string cuda_device_bus_id();
// The backend for a config's `device` (cpu: fp32 reference; cuda: make_cuda_backend).
std::unique_ptr<Backend> make_backend(Device device);

}  // namespace eco
