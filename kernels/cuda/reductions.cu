// Sum of squares in two stages. Stage 1: blocks (at most kSumSquaresScratch, a function of n)
// stride over x, each thread accumulating x^2 in double, then a fixed tree (warp butterflies, then
// warp 0 over the warp partials) writes one partial per block. Stage 2: one block reduces the
// partials with the same tree. No atomics, so the result is bit-identical run to run.
// Launch assumptions (checked): n >= 0; out, scratch (and x when n > 0) non-null.
// Per segment (sum_squares_segments): one block a segment, its threads striding the segment from
// the segment's start, then the same tree: the order depends on the segment's length only.
// Launch assumptions (checked): count >= 0; out and segs non-null when count > 0;
// 1 <= max_blocks <= kSumSegmentsMaxBlocks. The segments' bounds are the caller's (x may be null
// only when every segment is empty: an empty tensor).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/reductions.cuh"

namespace eco::cuda {
namespace {

constexpr int kThreads = 256;          // stage 1
constexpr int kFinalThreads = 1024;    // stage 2: covers every partial
constexpr int64_t kMinPerThread = 16;  // elements per thread before another block is added
static_assert(kFinalThreads >= kSumSquaresScratch);

// Sum over the block in a fixed order; the result is valid in thread 0.
template <int kBlock>
__device__ double block_sum(double v) {
  __shared__ double warp_parts[kBlock / 32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) warp_parts[threadIdx.x / 32] = v;
  __syncthreads();
  v = 0;
  if (threadIdx.x < 32) {
    v = threadIdx.x < kBlock / 32 ? warp_parts[threadIdx.x] : 0.0;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  }
  return v;
}

__global__ void __launch_bounds__(kThreads)
    sum_squares_partials_kernel(double* partials, const float* x, int64_t n) {
  double acc = 0;
  for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * kThreads)
    acc += double(x[i]) * double(x[i]);
  acc = block_sum<kThreads>(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

__global__ void __launch_bounds__(kFinalThreads)
    sum_squares_final_kernel(double* out, const double* partials, int count) {
  double v = block_sum<kFinalThreads>(int(threadIdx.x) < count ? partials[threadIdx.x] : 0.0);
  if (threadIdx.x == 0) *out = v;
}

// out[k] = the sum of squares of segment k, for k = blockIdx.x, + gridDim.x, ... The loop bound
// is the same for every thread of the block, so the barriers inside block_sum are uniform; the
// barrier at the end keeps the next segment's warp partials from overwriting ones still read.
__global__ void __launch_bounds__(kThreads)
    sum_squares_segments_kernel(double* out, const float* x, const SumSegment* segs,
                                int64_t count) {
  for (int64_t k = blockIdx.x; k < count; k += gridDim.x) {
    const float* xs = x + segs[k].offset;
    const int64_t len = segs[k].length;
    double acc = 0;
    for (int64_t i = threadIdx.x; i < len; i += kThreads) acc += double(xs[i]) * double(xs[i]);
    acc = block_sum<kThreads>(acc);
    if (threadIdx.x == 0) out[k] = acc;
    __syncthreads();
  }
}

}  // namespace

cudaError_t sum_squares(double* out, const float* x, int64_t n, double* scratch, cudaStream_t s) {
  if (n < 0 || !out || !scratch || (n > 0 && !x)) return cudaErrorInvalidValue;
  const int64_t per_block = kThreads * kMinPerThread;
  const int blocks =
      int(std::clamp<int64_t>((n + per_block - 1) / per_block, 1, kSumSquaresScratch));
  sum_squares_partials_kernel<<<blocks, kThreads, 0, s>>>(scratch, x, n);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  sum_squares_final_kernel<<<1, kFinalThreads, 0, s>>>(out, scratch, blocks);
  return cudaGetLastError();
}

cudaError_t sum_squares_segments(double* out, const float* x, const SumSegment* segs,
                                 int64_t count, cudaStream_t s, int max_blocks) {
  if (count < 0 || max_blocks < 1 || max_blocks > kSumSegmentsMaxBlocks ||
      (count > 0 && (!out || !segs)))
    return cudaErrorInvalidValue;
  if (count == 0) return cudaSuccess;
  const int blocks = int(std::min<int64_t>(count, max_blocks));
  sum_squares_segments_kernel<<<blocks, kThreads, 0, s>>>(out, x, segs, count);
  return cudaGetLastError();
}

}  // namespace eco::cuda
