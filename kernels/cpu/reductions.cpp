// Sums of squares (for the global gradient norm), deterministic for any thread count: the
// blocking depends only on n, and block partials are combined in block order; per segment, the
// order depends only on the segment's length.
#include <algorithm>
#include <cstdint>

#include "kernels/cpu/kernels.h"

namespace eco::cpu {

namespace {

// x[0..n)^2 summed in double over kLanes independent accumulators (element i to lane i % kLanes,
// the ragged tail to lane 0), then the lanes in order. The fixed assignment lets the compiler
// vectorise without reassociating, so the result does not depend on the instruction set either.
template <class T>
double sum_squares_lanes(const T* x, int64_t n) {
  constexpr int kLanes = 8;
  double acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; l++) acc[l] += double(x[i + l]) * double(x[i + l]);
  for (; i < n; i++) acc[0] += double(x[i]) * double(x[i]);
  double s = 0;
  for (int l = 0; l < kLanes; l++) s += acc[l];
  return s;
}

}  // namespace

template <class T>
double sum_squares(const T* x, int64_t n) {
  // At most kMaxBlocks blocks of at least kMinBlock elements; partials live on the stack.
  constexpr int64_t kMaxBlocks = 1024, kMinBlock = 1 << 14;
  const int64_t block = std::max(kMinBlock, (n + kMaxBlocks - 1) / kMaxBlocks);
  const int64_t nblocks = (n + block - 1) / block;
  double partial[kMaxBlocks];
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < nblocks; blk++) {
    const int64_t i0 = blk * block;
    partial[blk] = sum_squares_lanes(x + i0, std::min(n, i0 + block) - i0);
  }
  double total = 0;
  for (int64_t blk = 0; blk < nblocks; blk++) total += partial[blk];
  return total;
}

// One segment per iteration, each summed by one thread from its own start: segments of any
// length mix, so they are handed out dynamically; the order within a segment is fixed.
template <class T>
void sum_squares_segments(double* out, const T* x, const SumSegment* segs, int64_t count) {
#pragma omp parallel for schedule(dynamic)
  for (int64_t k = 0; k < count; k++)
    out[k] = sum_squares_lanes(x + segs[k].offset, segs[k].length);
}

template double sum_squares<float>(const float*, int64_t);
template double sum_squares<double>(const double*, int64_t);
template void sum_squares_segments<float>(double*, const float*, const SumSegment*, int64_t);
template void sum_squares_segments<double>(double*, const double*, const SumSegment*, int64_t);

}  // namespace eco::cpu
