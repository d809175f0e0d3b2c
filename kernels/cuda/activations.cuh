// MLP activations on bf16 activations (fp32 math from src/base/math/activations.h, shared with the
// CPU backend). Contracts as eco::cpu::gelu_* / swiglu_* / geglu_* (kernels/cpu/kernels.h).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace eco::cuda {

// out (n) = gelu_tanh(inp); dinp (n) += gelu_tanh'(inp) * dout.
cudaError_t gelu_forward(__nv_bfloat16* out, const __nv_bfloat16* inp, int64_t n,
                         cudaStream_t s = nullptr);
cudaError_t gelu_backward(__nv_bfloat16* dinp, const __nv_bfloat16* inp, const __nv_bfloat16* dout,
                          int64_t n, cudaStream_t s = nullptr);
// inp (N, 2H) = [gate | up] per row; out (N, H) = silu(gate) * up; dinp (N, 2H) +=.
cudaError_t swiglu_forward(__nv_bfloat16* out, const __nv_bfloat16* inp, int N, int H,
                           cudaStream_t s = nullptr);
cudaError_t swiglu_backward(__nv_bfloat16* dinp, const __nv_bfloat16* dout,
                            const __nv_bfloat16* inp, int N, int H, cudaStream_t s = nullptr);
// GeGLU (Gemma): as SwiGLU with gelu_tanh for silu: out (N, H) = gelu_tanh(gate) * up.
cudaError_t geglu_forward(__nv_bfloat16* out, const __nv_bfloat16* inp, int N, int H,
                          cudaStream_t s = nullptr);
cudaError_t geglu_backward(__nv_bfloat16* dinp, const __nv_bfloat16* dout,
                           const __nv_bfloat16* inp, int N, int H, cudaStream_t s = nullptr);

}  // namespace eco::cuda
