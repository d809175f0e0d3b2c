// QTensor: a non-owning view of a weight held only in quantized form (codes + fp32 scales), with
// its layout rules. The scale-group geometry is src/base/math/scale_groups.h's; the quantizers
// that fill a QTensor are the backends' (kernels/cpu/quantize.h, kernels/cuda/quantize.cuh).
#pragma once
#include <cstdint>

#include "base/tensor.h"
#include "base/math/qformat.h"
#include "base/math/scale_groups.h"

namespace eco {

// A (rows, cols) row-major matrix. Layout invariants (check_qtensor_layout):
//   codes:  code_bytes(format, rows * cols) bytes, element i = r * cols + c at load_code(.., i)
//           (INT4: two per byte, even element in the low nibble; rows may share a byte)
//           shape {code_bytes}, dtype U8
//   scales: scale_group_count(granularity, rows, cols) fp32 values, shape {that}, dtype F32
// Both are non-owning views; the backend (or the test) owns the memory.
struct QTensor {
  QFormat format = QFormat::E4M3;
  Granularity granularity = Granularity::PerRow;
  int64_t rows = 0, cols = 0;
  Tensor codes;
  Tensor scales;

  int64_t numel() const { return rows * cols; }
};

// How many scales a (rows, cols) matrix has, and which one element (r, c) uses: the names the
// host code uses for scale_groups.h's scale_group_count / scale_group_index.
inline int64_t num_scales(Granularity g, int64_t rows, int64_t cols) {
  return scale_group_count(g, rows, cols);
}
inline int64_t scale_index(Granularity g, int64_t /*rows*/, int64_t cols, int64_t r, int64_t c) {
  return scale_group_index(g, cols, r, c);
}
const char* granularity_name(Granularity g);

// Wraps caller-owned buffers (codes: code_bytes(format, rows*cols) bytes, scales: num_scales
// floats) in a QTensor.
QTensor qtensor_view(QFormat format, Granularity granularity, int64_t rows, int64_t cols,
                     uint8_t* codes, float* scales);

// Asserts the layout invariants above (dtypes, sizes, non-null buffers when non-empty).
void check_qtensor_layout(const QTensor& q);

}  // namespace eco
