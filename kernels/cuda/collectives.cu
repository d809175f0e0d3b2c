// The rank-order fold of a receive buffer (see collectives.cuh): a grid-stride loop, one element
// per thread and step, the ranks' rows read in order (coalesced along each row).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/collectives.cuh"

namespace eco::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    fold_rank_order_kernel(float* __restrict__ out, const float* __restrict__ recv, int world,
                           int64_t n, int64_t stride) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    float acc = 0.0f;
    for (int r = 0; r < world; ++r) acc += recv[r * stride + i];
    out[i] = acc;
  }
}

}  // namespace

cudaError_t fold_rank_order(float* out, const float* recv, int world, int64_t n, int64_t stride,
                            cudaStream_t s) {
  if (world < 1 || n < 0 || stride < n) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (!out || !recv) return cudaErrorInvalidValue;
  const int64_t blocks = std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, int64_t(1) << 16);
  fold_rank_order_kernel<<<unsigned(blocks), kThreads, 0, s>>>(out, recv, world, n, stride);
  return cudaGetLastError();
}

}  // namespace eco::cuda
