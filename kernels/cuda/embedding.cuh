// Token (+ learned position) embedding on the GPU: fp32 tables in, bf16 activations out, and the
// deterministic fp32 scatter-add backward. Contracts as eco::cpu::embedding_*
// (kernels/cpu/kernels.h).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace eco::cuda {

// out (B*Tn, C) bf16 = wte[tokens[b,t]] + wpe[t]; wte (V, C), wpe (Tn, C) fp32, wpe may be null.
// tokens (B*Tn) must lie in [0, V) (not checked: V is not passed).
cudaError_t embedding_forward(__nv_bfloat16* out, const int32_t* tokens, const float* wte,
                              const float* wpe, int B, int Tn, int C, cudaStream_t s = nullptr);
// dwte (V, C) += scatter of dout (B*Tn, C) rows by token; dwpe (Tn, C) += sum over the batch
// (dwpe may be null). Every (row, channel) is summed by one thread in token order: the result is
// deterministic and equals the CPU twin's bit for bit.
cudaError_t embedding_backward(float* dwte, float* dwpe, const __nv_bfloat16* dout,
                               const int32_t* tokens, int B, int Tn, int C,
                               cudaStream_t s = nullptr);

}  // namespace eco::cuda
