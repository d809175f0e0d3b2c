// A contiguous segment of a flat tensor, the unit of the segmented sum of squares
// (Backend::sum_squares_segments and its kernels in kernels/cpu and kernels/cuda reductions).
#pragma once
#include <cstdint>
#include <type_traits>

namespace eco {

// Elements [offset, offset + length) of a flat tensor. Plain data: the CUDA backend uploads a
// host array of them as it is.
struct SumSegment {
  int64_t offset = 0, length = 0;
};
static_assert(std::is_trivially_copyable_v<SumSegment> && sizeof(SumSegment) == 16);

}  // namespace eco
