// Host entry points of causal self-attention on the GPU, fp32 math on CUDA cores (see
// attention.cu): bf16 activations in memory, softmax statistics instead of the (T, T) matrix.
// Grouped-query, sliding-window, query-scaled attention (src/base/math/attention_shape.h), and
// plain multi-head attention as its special case.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "base/math/attention_shape.h"

namespace eco::cuda {

// Limits, checked by every entry point (cudaErrorInvalidValue otherwise): B, T, NH, KVH >= 1,
// NH % KVH == 0, head size 1 <= hd <= kAttentionMaxHeadSize, window >= 0, q_scalar > 0,
// B <= 65535, NH <= 65535, and non-null buffers. Any T (keys are streamed in tiles); any alignment.
constexpr int kAttentionMaxHeadSize = kCudaAttentionMaxHeadSize;

// qkv (B, T, a.qkv_width()) -> out (B, T, a.out_width()), lse (B, NH, T). Same contract as
// eco::cpu::attention_forward_gqa (kernels/cpu/kernels.h: query head h reads kv head
// h / (NH / KVH), query t sees keys (t - window, t] or [0, t], scores scaled by q_scalar^-1/2)
// except that the probabilities are not kept: lse[b, h, t] = log(sum_u exp(s_tu)) over the keys t
// sees of the scaled scores s, fp32, is what backward needs.
cudaError_t attention_forward_gqa(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, int B,
                                  int T, const AttentionShape& a, cudaStream_t s = nullptr);

// dqkv (B, T, a.qkv_width()) += the gradient of attention_forward_gqa's out given dout (B, T,
// a.out_width()), from qkv, that call's out and lse. scratch: B*NH*T floats (D = rowsum(dout *
// out) per query). Deterministic: every element is written by one thread, sums run in a fixed
// order (a kv head's dk, dv sum its query heads in head order).
cudaError_t attention_backward_gqa(__nv_bfloat16* dqkv, float* scratch,
                                   const __nv_bfloat16* dout, const __nv_bfloat16* qkv,
                                   const __nv_bfloat16* out, const float* lse, int B, int T,
                                   const AttentionShape& a, cudaStream_t s = nullptr);

// Plain multi-head attention over C = NH hs (q, k, v at column offsets 0, C, 2C; scale
// 1/sqrt(hs)): the calls above with AttentionShape::multi_head(NH, C / NH); C % NH != 0 is
// cudaErrorInvalidValue. Same contract as eco::cpu::attention_forward / attention_backward.
cudaError_t attention_forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, int B,
                              int T, int C, int NH, cudaStream_t s = nullptr);
cudaError_t attention_backward(__nv_bfloat16* dqkv, float* scratch, const __nv_bfloat16* dout,
                               const __nv_bfloat16* qkv, const __nv_bfloat16* out, const float* lse,
                               int B, int T, int C, int NH, cudaStream_t s = nullptr);

}  // namespace eco::cuda
