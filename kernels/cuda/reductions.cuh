// Deterministic reductions for the optimizer: the sum of squares of fp32 gradients (global grad
// norm, for clipping), accumulated in double. Contract as eco::cpu::sum_squares.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace eco::cuda {

// Doubles of scratch sum_squares needs (one partial per block of stage 1).
constexpr int kSumSquaresScratch = 1024;

// *out (device, one double) = sum of x[i]^2 over n fp32 elements; scratch holds
// kSumSquaresScratch doubles. Two stages with a block count that depends on n only, fixed-order
// trees: bit-identical run to run. *out is written, not accumulated.
cudaError_t sum_squares(double* out, const float* x, int64_t n, double* scratch,
                        cudaStream_t s = nullptr);

}  // namespace eco::cuda
