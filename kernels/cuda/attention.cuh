// Host entry points of causal multi-head self-attention on the GPU (see attention.cu):
// bf16 activations in memory, fp32 math, softmax statistics instead of the (T, T) matrix.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace eco::cuda {

// Limits, checked by both entry points (cudaErrorInvalidValue otherwise): B, T, NH >= 1,
// C % NH == 0, head size hs = C / NH <= kAttentionMaxHeadSize, B <= 65535, NH <= 65535, and
// non-null buffers. Any T (keys are streamed in tiles); any alignment.
constexpr int kAttentionMaxHeadSize = 128;

// qkv (B, T, 3C) -> out (B, T, C), lse (B, NH, T). Same contract as eco::cpu::attention_forward
// (kernels/cpu/kernels.h: q, k, v = [0, C), [C, 2C), [2C, 3C) of a row, head h owns
// [h*hs, (h+1)*hs) of each, causal, scale 1/sqrt(hs)) except that the probabilities are not
// kept: lse[b, h, t] = log(sum_u exp(s_tu)) of the scaled scores s, fp32, is what backward needs.
cudaError_t attention_forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, int B,
                              int T, int C, int NH, cudaStream_t s = nullptr);

// dqkv (B, T, 3C) += the gradient of attention_forward's out given dout (B, T, C), from qkv,
// that call's out and lse. scratch: B*NH*T floats (D = rowsum(dout * out) per query).
// Deterministic: every element is written by one thread, sums run in a fixed order.
cudaError_t attention_backward(__nv_bfloat16* dqkv, float* scratch, const __nv_bfloat16* dout,
                               const __nv_bfloat16* qkv, const __nv_bfloat16* out, const float* lse,
                               int B, int T, int C, int NH, cudaStream_t s = nullptr);

}  // namespace eco::cuda
