// The --codes layout (hf_codes.h): slicing a QTensor's codes and scales by rows, and back.
#include "hf/hf_codes.h"

#include "base/error.h"

namespace eco {

std::vector<int64_t> codes_piece_shape(QFormat f, int64_t rows, int64_t cols) {
  if (f == QFormat::INT4) return {code_bytes(f, rows * cols)};
  return {rows, cols};
}

std::vector<int64_t> scales_piece_shape(Granularity g, int64_t rows, int64_t cols) {
  switch (g) {
    case Granularity::PerRow: return {rows};
    case Granularity::PerTensor: return {1};
    case Granularity::Block128:
      return {(rows + kScaleBlock - 1) / kScaleBlock, (cols + kScaleBlock - 1) / kScaleBlock};
  }
  return {};
}

bool codes_split_ok(Granularity g, int64_t row0, int64_t rows, int64_t total_rows) {
  if (g != Granularity::Block128) return true;
  return row0 % kScaleBlock == 0 && (rows % kScaleBlock == 0 || row0 + rows == total_rows);
}

void extract_codes_piece(const QTensor& w, const uint8_t* codes, const float* scales,
                         int64_t row0, int64_t rows, uint8_t* piece_codes, float* piece_scales) {
  ECO_ASSERT(codes_split_ok(w.granularity, row0, rows, w.rows), "codes piece at row {}", row0);
  const int64_t base = row0 * w.cols, n = rows * w.cols;
  if (w.format == QFormat::INT4) {
    for (int64_t k = 0; k < code_bytes(w.format, n); ++k) piece_codes[k] = 0;
    for (int64_t k = 0; k < n; ++k)
      store_code(w.format, piece_codes, k, load_code(w.format, codes, base + k));
  } else {
    for (int64_t k = 0; k < n; ++k) piece_codes[k] = codes[base + k];
  }
  const int64_t groups = scale_group_count(w.granularity, rows, w.cols);
  const int64_t first = w.granularity == Granularity::PerTensor ? 0
                        : w.granularity == Granularity::PerRow
                            ? row0
                            : row0 / kScaleBlock * ((w.cols + kScaleBlock - 1) / kScaleBlock);
  for (int64_t k = 0; k < groups; ++k) piece_scales[k] = scales[first + k];
}

bool insert_codes_piece(const QTensor& w, uint8_t* codes, float* scales, int64_t row0,
                        int64_t rows, const uint8_t* piece_codes, const float* piece_scales,
                        bool first_piece) {
  ECO_ASSERT(codes_split_ok(w.granularity, row0, rows, w.rows), "codes piece at row {}", row0);
  const int64_t base = row0 * w.cols, n = rows * w.cols;
  for (int64_t k = 0; k < n; ++k)
    store_code(w.format, codes, base + k, load_code(w.format, piece_codes, k));
  if (w.granularity == Granularity::PerTensor) {
    if (!first_piece && scales[0] != piece_scales[0]) return false;
    scales[0] = piece_scales[0];
    return true;
  }
  const int64_t groups = scale_group_count(w.granularity, rows, w.cols);
  const int64_t first = w.granularity == Granularity::PerRow
                            ? row0
                            : row0 / kScaleBlock * ((w.cols + kScaleBlock - 1) / kScaleBlock);
  for (int64_t k = 0; k < groups; ++k) scales[first + k] = piece_scales[k];
  return true;
}

std::vector<float> dequantize_codes_piece(QFormat f, Granularity g, int64_t rows, int64_t cols,
                                          const uint8_t* piece_codes, const float* piece_scales) {
  std::vector<float> out(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t i = r * cols + c;
      out[size_t(i)] = dequantize_value(f, load_code(f, piece_codes, i),
                                        piece_scales[scale_group_index(g, cols, r, c)]);
    }
  return out;
}

bool parse_qformat(const std::string& name, QFormat& out) {
  for (QFormat f : {QFormat::E4M3, QFormat::E5M2, QFormat::INT8, QFormat::INT4})
    if (name == qformat_name(f)) {
      out = f;
      return true;
    }
  return false;
}

bool parse_granularity(const std::string& name, Granularity& out) {
  for (Granularity g : {Granularity::PerRow, Granularity::PerTensor, Granularity::Block128})
    if (name == granularity_name(g)) {
      out = g;
      return true;
    }
  return false;
}

}  // namespace eco
