// Sum of squares (for the global gradient norm), deterministic for any thread count: the
// blocking depends only on n, and block partials are combined in block order.
#include <algorithm>
#include <cstdint>

#include "kernels/cpu/kernels.h"

namespace eco::cpu {

template <class T>
double sum_squares(const T* x, int64_t n) {
  // At most kMaxBlocks blocks of at least kMinBlock elements; partials live on the stack.
  constexpr int64_t kMaxBlocks = 1024, kMinBlock = 1 << 14;
  const int64_t block = std::max(kMinBlock, (n + kMaxBlocks - 1) / kMaxBlocks);
  const int64_t nblocks = (n + block - 1) / block;
  double partial[kMaxBlocks];
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < nblocks; blk++) {
    const int64_t i0 = blk * block, i1 = std::min(n, i0 + block);
    // kLanes independent accumulators (fixed assignment i % kLanes) let the compiler vectorise
    // without reassociating, so the result does not depend on the instruction set either.
    constexpr int kLanes = 8;
    double acc[kLanes] = {};
    int64_t i = i0;
    for (; i + kLanes <= i1; i += kLanes)
      for (int l = 0; l < kLanes; l++) acc[l] += double(x[i + l]) * double(x[i + l]);
    for (; i < i1; i++) acc[0] += double(x[i]) * double(x[i]);
    double s = 0;
    for (int l = 0; l < kLanes; l++) s += acc[l];
    partial[blk] = s;
  }
  double total = 0;
  for (int64_t blk = 0; blk < nblocks; blk++) total += partial[blk];
  return total;
}

template double sum_squares<float>(const float*, int64_t);
template double sum_squares<double>(const double*, int64_t);

}  // namespace eco::cpu
