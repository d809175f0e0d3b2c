// Host entry points of the element-wise CUDA kernels (see elementwise.cu). Each returns the
// launch status; callers check it with ECO_CHECK_CUDA.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/adamw.h"

namespace eco::cuda {

cudaError_t gelu_forward(float* out, const float* inp, int64_t n, cudaStream_t s = nullptr);
cudaError_t gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n,
                          cudaStream_t s = nullptr);
cudaError_t swiglu_forward(float* out, const float* inp, int N, int H, cudaStream_t s = nullptr);
cudaError_t adamw_update(float* param, const float* grad, float* m, float* v, int64_t n,
                         const AdamWCoeffs& c, cudaStream_t s = nullptr);

}  // namespace eco::cuda
