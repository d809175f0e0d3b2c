// QTensor row views (qtensor_rows.h) and their checks.
#include "quant/qtensor_rows.h"

#include "base/error.h"

namespace eco {

QTensor qtensor_rows(const QTensor& q, int64_t r0, int64_t r1) {
  ECO_ASSERT(0 <= r0 && r0 < r1 && r1 <= q.rows, "rows [{}, {}) of a QTensor of {} rows", r0, r1,
             q.rows);
  const int64_t cols = q.cols;
  if (q.format == QFormat::INT4)
    ECO_ASSERT((r0 * cols) % 2 == 0 && (r1 == q.rows || (r1 * cols) % 2 == 0),
               "rows [{}, {}) of an INT4 QTensor with {} columns: a view must start and end on a "
               "byte (an even element index)",
               r0, r1, cols);
  int64_t scale0 = 0;
  switch (q.granularity) {
    case Granularity::PerRow: scale0 = r0; break;
    case Granularity::PerTensor: scale0 = 0; break;
    case Granularity::Block128: {
      ECO_ASSERT(r0 % kScaleBlock == 0 && (r1 == q.rows || r1 % kScaleBlock == 0),
                 "rows [{}, {}) of a block128 QTensor: a view must start and end on a {}-row "
                 "tile boundary",
                 r0, r1, kScaleBlock);
      scale0 = (r0 / kScaleBlock) * ((cols + kScaleBlock - 1) / kScaleBlock);
      break;
    }
  }
  return qtensor_view(q.format, q.granularity, r1 - r0, cols,
                      q.codes.as<uint8_t>() + code_bytes(q.format, r0 * cols),
                      q.scales.as<float>() + scale0);
}

}  // namespace eco
