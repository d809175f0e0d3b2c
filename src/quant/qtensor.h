// QTensor: a weight held only in quantized form (codes + fp32 scales), and the CPU reference
// quantizer/dequantizer that the CUDA kernels must match bit for bit.
#pragma once
#include <cstdint>

#include "core/tensor.h"
#include "kernels/common/qformat.h"
#include "kernels/common/scale_groups.h"

namespace eco {

// Which elements share a scale: a row, the whole tensor, or a 128x128 block (row-major over
// blocks; edge blocks are ragged). 128x128 blocks are transpose-invariant (FP8 backward).

// A (rows, cols) row-major matrix. Layout invariants (checked by quantize/dequantize):
//   codes:  code_bytes(format, rows * cols) bytes, element i = r * cols + c at load_code(.., i)
//           (INT4: two per byte, even element in the low nibble; rows may share a byte)
//           shape {code_bytes}, dtype U8
//   scales: num_scales(granularity, rows, cols) fp32 values, shape {num_scales}, dtype F32
// Both are non-owning views; the backend (or the test) owns the memory.
struct QTensor {
  QFormat format = QFormat::E4M3;
  Granularity granularity = Granularity::PerRow;
  int64_t rows = 0, cols = 0;
  Tensor codes;
  Tensor scales;

  int64_t numel() const { return rows * cols; }
};

int64_t num_scales(Granularity g, int64_t rows, int64_t cols);
// Index of the scale that element (r, c) uses.
int64_t scale_index(Granularity g, int64_t rows, int64_t cols, int64_t r, int64_t c);
const char* granularity_name(Granularity g);

// Wraps caller-owned buffers (codes: code_bytes(format, rows*cols) bytes, scales: num_scales
// floats) in a QTensor.
QTensor qtensor_view(QFormat format, Granularity granularity, int64_t rows, int64_t cols,
                     uint8_t* codes, float* scales);

// x (rows, cols) fp32 -> q.codes, q.scales. Per group: scale = group_scale(absmax); per element
// i = r * cols + c: code = quantize_value(x[i], scale, philox_bits(seed, step, tensor_id, i)).
// Deterministic and independent of the OpenMP thread count. NaNs are ignored by the absmax.
void quantize(const float* x, QTensor& q, Rounding rounding, uint64_t seed, uint64_t step,
              uint32_t tensor_id);

// q -> out (rows, cols) fp32: decode(code) * scale.
void dequantize(const QTensor& q, float* out);

}  // namespace eco
