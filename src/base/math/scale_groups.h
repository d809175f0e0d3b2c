// Scale groups: which elements of a row-major (rows, cols) matrix share one quantization scale.
// Shared by QTensor, the update rules and the CUDA kernels, so every backend lays scales out alike.
#pragma once
#include <cstdint>

#include "base/math/hd.h"

namespace eco {

// A rows x cols window at (row0, col0) of a row-major matrix with leading dimension ld.
struct GroupSpan {
  int64_t row0, col0, rows, cols, ld;
  ECO_HD int64_t index(int64_t r, int64_t c) const { return (row0 + r) * ld + col0 + c; }
};

// Scales: PerRow -> scales[rows]; PerTensor -> scales[1];
// Block128 -> scales[ceil(rows/128)][ceil(cols/128)] (row-major over tiles; edge tiles are cut).
enum class Granularity : uint8_t { PerRow, PerTensor, Block128 };
constexpr int64_t kScaleBlock = 128;

ECO_HD int64_t scale_group_count(Granularity g, int64_t rows, int64_t cols) {
  switch (g) {
    case Granularity::PerRow: return rows;
    case Granularity::PerTensor: return 1;
    default: return ((rows + kScaleBlock - 1) / kScaleBlock) * ((cols + kScaleBlock - 1) / kScaleBlock);
  }
}

// The group (index into the scales) of element (r, c) of a contiguous (rows, cols) matrix.
ECO_HD int64_t scale_group_index(Granularity g, int64_t cols, int64_t r, int64_t c) {
  switch (g) {
    case Granularity::PerRow: return r;
    case Granularity::PerTensor: return 0;
    default: return (r / kScaleBlock) * ((cols + kScaleBlock - 1) / kScaleBlock) + c / kScaleBlock;
  }
}

// Group k of a contiguous (rows, cols) matrix.
ECO_HD GroupSpan scale_group_span(Granularity g, int64_t rows, int64_t cols, int64_t k) {
  switch (g) {
    case Granularity::PerRow: return {k, 0, 1, cols, cols};
    case Granularity::PerTensor: return {0, 0, rows, cols, cols};
    default: {
      const int64_t tiles_per_row = (cols + kScaleBlock - 1) / kScaleBlock;
      const int64_t r0 = (k / tiles_per_row) * kScaleBlock, c0 = (k % tiles_per_row) * kScaleBlock;
      const int64_t nr = rows - r0 < kScaleBlock ? rows - r0 : kScaleBlock;
      const int64_t nc = cols - c0 < kScaleBlock ? cols - c0 : kScaleBlock;
      return {r0, c0, nr, nc, cols};
    }
  }
}

}  // namespace eco
