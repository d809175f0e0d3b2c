// Rotary position embedding on the q and k parts of a fused bf16 qkv buffer (HF "rotate_half"
// pairing). Contracts as eco::cpu::rope_* (kernels/cpu/kernels.h).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace eco::cuda {

// out (B, Tn, 3C) = rotated q, k and copied v of inp (B, Tn, 3C); out and inp must not alias.
// C must split into NH heads of even size (else cudaErrorInvalidValue).
cudaError_t rope_forward(__nv_bfloat16* out, const __nv_bfloat16* inp, int B, int Tn, int C, int NH,
                         float theta, cudaStream_t s = nullptr);
// dinp (B, Tn, 3C) += R^T dout; v's gradient passes through.
cudaError_t rope_backward(__nv_bfloat16* dinp, const __nv_bfloat16* dout, int B, int Tn, int C,
                          int NH, float theta, cudaStream_t s = nullptr);

}  // namespace eco::cuda
