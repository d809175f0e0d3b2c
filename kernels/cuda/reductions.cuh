// Deterministic reductions for the optimizer: the sum of squares of fp32 gradients (global grad
// norm, for clipping), accumulated in double, whole or per segment. Contracts as
// eco::cpu::sum_squares and eco::cpu::sum_squares_segments (the values; not the bits).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "base/math/sum_segment.h"

namespace eco::cuda {

// Doubles of scratch sum_squares needs (one partial per block of stage 1).
constexpr int kSumSquaresScratch = 1024;

// *out (device, one double) = sum of x[i]^2 over n fp32 elements; scratch holds
// kSumSquaresScratch doubles. Two stages with a block count that depends on n only, fixed-order
// trees: bit-identical run to run. *out is written, not accumulated.
cudaError_t sum_squares(double* out, const float* x, int64_t n, double* scratch,
                        cudaStream_t s = nullptr);

// The most blocks sum_squares_segments launches (a gradient has thousands of segments of ~128
// rows); past it the blocks stride over the segments.
constexpr int kSumSegmentsMaxBlocks = 65535;

// out[k] (device, count doubles) = sum of x[i]^2 in double over segment k of segs (device, count
// entries; each inside x: the caller checks, e.g. eco::check_sum_segments). One block per segment
// (blocks stride over the segments past max_blocks, 1..kSumSegmentsMaxBlocks): its threads stride
// the segment from its start, then block_sum's fixed tree, so each segment's bits depend on its
// length and values alone (not its offset, the other segments or the grid). out is written, not
// accumulated. count 0 launches nothing.
cudaError_t sum_squares_segments(double* out, const float* x, const SumSegment* segs,
                                 int64_t count, cudaStream_t s = nullptr,
                                 int max_blocks = kSumSegmentsMaxBlocks);

}  // namespace eco::cuda
