// QTensor views and their layout check.
#include "base/qtensor.h"

#include "base/error.h"

namespace eco {

const char* granularity_name(Granularity g) {
  switch (g) {
    case Granularity::PerRow: return "per_row";
    case Granularity::PerTensor: return "per_tensor";
    case Granularity::Block128: return "block128";
  }
  return "?";
}

QTensor qtensor_view(QFormat format, Granularity granularity, int64_t rows, int64_t cols,
                     uint8_t* codes, float* scales) {
  QTensor q;
  q.format = format;
  q.granularity = granularity;
  q.rows = rows;
  q.cols = cols;
  q.codes.data = codes;
  q.codes.shape = {code_bytes(format, rows * cols)};
  q.codes.dtype = DType::U8;
  q.scales.data = scales;
  q.scales.shape = {num_scales(granularity, rows, cols)};
  q.scales.dtype = DType::F32;
  return q;
}

void check_qtensor_layout(const QTensor& q) {
  ECO_ASSERT(q.rows >= 0 && q.cols >= 0, "QTensor shape ({}, {})", q.rows, q.cols);
  ECO_ASSERT(q.codes.dtype == DType::U8 && q.codes.numel() == code_bytes(q.format, q.numel()),
             "{} codes of a ({}, {}) QTensor: {} of {}, expected {} of u8",
             qformat_name(q.format), q.rows, q.cols, q.codes.numel(), dtype_name(q.codes.dtype),
             code_bytes(q.format, q.numel()));
  ECO_ASSERT(q.scales.dtype == DType::F32 &&
                 q.scales.numel() == num_scales(q.granularity, q.rows, q.cols),
             "{} scales of a ({}, {}) QTensor: {} of {}, expected {} of f32",
             granularity_name(q.granularity), q.rows, q.cols, q.scales.numel(),
             dtype_name(q.scales.dtype), num_scales(q.granularity, q.rows, q.cols));
  ECO_ASSERT(q.numel() == 0 || (!q.codes.empty() && !q.scales.empty()), "null QTensor buffers");
}

}  // namespace eco
