// Fused softmax + cross-entropy over bf16 logits with an in-place bf16 gradient.
// Contract as eco::cpu::crossentropy_forward_backward (kernels/cpu/kernels.h).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace eco::cuda {

// logits (N, ld) bf16, the first V columns of each row the vocabulary (ld >= V), targets (N)
// int32 -> losses (N) fp32 = -log softmax[target]; if dlogits is non-null, dlogits (N, ld) bf16
// = (softmax - onehot(target)) * dloss in the first V columns and 0 in the rest, and it may alias
// logits. Targets < 0 are ignored (loss 0, gradient 0); a target >= V gives a NaN loss (never
// read). cudaErrorInvalidValue for N < 0, V <= 0, ld < V or null pointers.
cudaError_t crossentropy_forward_backward(float* losses, __nv_bfloat16* dlogits,
                                          const __nv_bfloat16* logits, const int32_t* targets,
                                          int N, int V, int ld, float dloss,
                                          cudaStream_t s = nullptr);

}  // namespace eco::cuda
