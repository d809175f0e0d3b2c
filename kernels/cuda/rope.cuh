// Rotary position embedding on the q and k parts of a fused bf16 qkv buffer (HF "rotate_half"
// pairing), multi-head or grouped-query rows. Contracts as eco::cpu::rope_*
// (kernels/cpu/kernels.h).
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
// The same over grouped-query rows (B, Tn, (NH + 2 KVH) hs): q = NH heads from 0, k = KVH heads
// from NH hs, v = KVH heads from (NH + KVH) hs (eco::cpu::rope_*_gqa); hs even, NH, KVH > 0.
// rope_forward is the case KVH = NH, hs = C / NH.
cudaError_t rope_forward_gqa(__nv_bfloat16* out, const __nv_bfloat16* inp, int B, int Tn, int NH,
                             int KVH, int hs, float theta, cudaStream_t s = nullptr);
cudaError_t rope_backward_gqa(__nv_bfloat16* dinp, const __nv_bfloat16* dout, int B, int Tn,
                              int NH, int KVH, int hs, float theta, cudaStream_t s = nullptr);

}  // namespace eco::cuda
