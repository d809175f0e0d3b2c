// Fused softmax + cross-entropy over bf16 logits with an in-place bf16 gradient.
// Contract as eco::cpu::crossentropy_forward_backward (kernels/cpu/kernels.h).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace eco::cuda {

// logits (N, V) bf16, targets (N) int32 -> losses (N) fp32 = -log softmax[target]; if dlogits is
// non-null, dlogits (N, V) bf16 = (softmax - onehot(target)) * dloss, and it may alias logits.
// Targets < 0 are ignored (loss 0, gradient 0); a target >= V gives a NaN loss (never read).
cudaError_t crossentropy_forward_backward(float* losses, __nv_bfloat16* dlogits,
                                          const __nv_bfloat16* logits, const int32_t* targets,
                                          int N, int V, float dloss, cudaStream_t s = nullptr);

}  // namespace eco::cuda
