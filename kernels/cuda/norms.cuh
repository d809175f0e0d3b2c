// LayerNorm, RMSNorm and QK-norm on the GPU: bf16 activations, fp32 gains/biases and saved
// statistics, fp32 deterministic parameter gradients. Contracts as eco::cpu::*norm_*
// (kernels/cpu/kernels.h). QK-norm's kernels are in qk_norm.cu.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>

namespace eco::cuda {

// fp32 scratch the backward needs for its per-chunk parameter-gradient partials (2 arrays of at
// most kNormRowChunks x C); allocate once for the largest C.
constexpr int kNormRowChunks = 128;
inline size_t norm_backward_scratch_floats(int C) { return size_t(2) * kNormRowChunks * C; }

// out (N, C) bf16; mean, rstd (N) fp32 saved for backward; bias may be null.
cudaError_t layernorm_forward(__nv_bfloat16* out, float* mean, float* rstd,
                              const __nv_bfloat16* inp, const float* weight, const float* bias,
                              int N, int C, float eps, cudaStream_t s = nullptr);
// The residual add fused in front of the norm: resid (N, C) = a + b (fp32 add, one rounding, as
// residual_forward), then out, mean, rstd = layernorm_forward(resid): the same bits as the two
// calls, with one pass less over resid. resid may alias a or b.
cudaError_t residual_layernorm_forward(__nv_bfloat16* resid, __nv_bfloat16* out, float* mean,
                                       float* rstd, const __nv_bfloat16* a,
                                       const __nv_bfloat16* b, const float* weight,
                                       const float* bias, int N, int C, float eps,
                                       cudaStream_t s = nullptr);
// dinp (N, C) bf16 +=; dweight, dbias (C) fp32 += (dbias may be null). scratch: see above.
cudaError_t layernorm_backward(__nv_bfloat16* dinp, float* dweight, float* dbias,
                               const __nv_bfloat16* dout, const __nv_bfloat16* inp,
                               const float* weight, const float* mean, const float* rstd, int N,
                               int C, float* scratch, cudaStream_t s = nullptr);
// out = inp * rstd * weight, rstd (N) = 1/sqrt(mean(inp^2) + eps) saved.
cudaError_t rmsnorm_forward(__nv_bfloat16* out, float* rstd, const __nv_bfloat16* inp,
                            const float* weight, int N, int C, float eps, cudaStream_t s = nullptr);
// resid = a + b, then out, rstd = rmsnorm_forward(resid), as residual_layernorm_forward.
cudaError_t residual_rmsnorm_forward(__nv_bfloat16* resid, __nv_bfloat16* out, float* rstd,
                                     const __nv_bfloat16* a, const __nv_bfloat16* b,
                                     const float* weight, int N, int C, float eps,
                                     cudaStream_t s = nullptr);
// dinp (N, C) bf16 +=; dweight (C) fp32 +=. scratch: see above.
cudaError_t rmsnorm_backward(__nv_bfloat16* dinp, float* dweight, const __nv_bfloat16* dout,
                             const __nv_bfloat16* inp, const float* weight, const float* rstd,
                             int N, int C, float* scratch, cudaStream_t s = nullptr);

// QK-norm: RMSNorm over each hd-wide q head (gain wq (hd)) and k head (gain wk (hd)) of qkv rows
// (N, (NH + 2 KVH) hd) into out (same shape; v copied; out and inp distinct); rstd (N, NH + KVH)
// saved.
cudaError_t qk_rmsnorm_forward(__nv_bfloat16* out, float* rstd, const __nv_bfloat16* inp,
                               const float* wq, const float* wk, int N, int NH, int KVH, int hd,
                               float eps, cudaStream_t s = nullptr);
// dinp (N, (NH + 2 KVH) hd) bf16 += (v's gradient passes); dwq, dwk (hd) fp32 +=. scratch:
// qk_norm_backward_scratch_floats(hd) floats (the gains' per-chunk partials).
constexpr int kQkRowChunks = 128;
inline size_t qk_norm_backward_scratch_floats(int hd) { return size_t(2) * kQkRowChunks * hd; }
cudaError_t qk_rmsnorm_backward(__nv_bfloat16* dinp, float* dwq, float* dwk,
                                const __nv_bfloat16* dout, const __nv_bfloat16* inp,
                                const float* wq, const float* wk, const float* rstd, int N, int NH,
                                int KVH, int hd, float* scratch, cudaStream_t s = nullptr);

}  // namespace eco::cuda
