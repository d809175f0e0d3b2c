// Block-wide reductions shared by the kernels (device code; include from .cu files only).
#pragma once
#include <cuda_runtime.h>

namespace eco::cuda {

// Max over a block of kThreads threads (a multiple of 32, at most 1024); every thread gets the
// result. fmaxf ignores NaN operands and is order-free, so this equals a sequential fmaxf.
// Synchronises the block: call it from every thread, at most once per kernel (one shared array).
template <int kThreads>
__device__ inline float block_max(float v) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024);
  constexpr int kWarps = kThreads / 32;
  __shared__ float warp_max[kWarps];
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_max[warp] = v;
  __syncthreads();
  v = lane < kWarps ? warp_max[lane] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  return v;
}

}  // namespace eco::cuda
