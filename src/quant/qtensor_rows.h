// Row views of a QTensor: the QTensor of rows [r0, r1) of a quantized matrix, sharing its codes
// and scales, so that a ZeRO-1 shard or a row-range update can address a piece of a tensor.
#pragma once
#include <cstdint>

#include "base/qtensor.h"

namespace eco {

// Rows [r0, r1) of q (0 <= r0 < r1 <= q.rows), a view of q's memory:
//   codes: from element r0 * cols. INT4 packs two elements per byte, so r0 * cols must be even,
//          and r1 * cols too unless r1 == rows (the view's last byte must not hold an element of
//          a row outside it, or a writer of the view would change that row).
//   scales: per_row: scales [r0, r1); block128: the tile rows [r0 / 128, ceil(r1 / 128)), so r0
//           must be a multiple of 128 and r1 too unless r1 == rows; per_tensor: the one scale,
//           shared with q (a writer of the view changes every row's scale).
// A range that breaks these rules is a runtime error naming it.
QTensor qtensor_rows(const QTensor& q, int64_t r0, int64_t r1);

}  // namespace eco
