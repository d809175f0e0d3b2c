// The --codes layout: a quantized weight written as its codes and scales instead of dequantized
// values. For the HF tensor NAME (e.g. model.layers.0.self_attn.q_proj.weight), holding rows
// [row0, row0 + rows) of an ecotrain (out, in) weight of `cols` columns:
//   NAME.codes   U8   E4M3 / E5M2 / INT8: (rows, cols), one code a byte;
//                     INT4: (ceil(rows x cols / 2),), two codes a byte, element 2k in the low
//                     nibble (two's complement, [-7, 7] used);
//   NAME.scales  F32  per_row: (rows,); per_tensor: (1,); block128: (ceil(rows / 128),
//                     ceil(cols / 128)), each scaling a 128 x 128 tile;
// weight[r][c] = decode(code of r * cols + c) x its scale. The codes keep ecotrain's (out, in)
// orientation even where HF stores the dequantized weight transposed (GPT-2's Conv1D): scales
// belong to rows. The file's __metadata__ names the format and granularity (kCodesFormatKey,
// kCodesGranularityKey). A split at a row that is not a multiple of 128 of a block128 weight
// has no such layout and is refused.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "base/qtensor.h"

namespace eco {

constexpr const char* kCodesFormatKey = "eco.codes.format";            // "e4m3", "int4", ...
constexpr const char* kCodesGranularityKey = "eco.codes.granularity";  // "per_row", ...
constexpr const char* kCodesSuffix = ".codes";
constexpr const char* kScalesSuffix = ".scales";

std::vector<int64_t> codes_piece_shape(QFormat f, int64_t rows, int64_t cols);
std::vector<int64_t> scales_piece_shape(Granularity g, int64_t rows, int64_t cols);
// Whether rows [row0, row0 + rows) of a (total_rows, cols) weight have a scales piece of their
// own (block128: the split falls on tile rows).
bool codes_split_ok(Granularity g, int64_t row0, int64_t rows, int64_t total_rows);

// Copies the piece of rows [row0, row0 + rows) between a whole QTensor's host codes and scales
// (layout of base/qtensor.h) and the piece's (layout above). extract: whole -> piece.
void extract_codes_piece(const QTensor& whole, const uint8_t* codes, const float* scales,
                         int64_t row0, int64_t rows, uint8_t* piece_codes, float* piece_scales);
// insert: piece -> whole. Per-tensor scales must agree across the pieces of one weight: returns
// false when the piece's scale differs from one already in `scales` (first_piece: none yet).
bool insert_codes_piece(const QTensor& whole, uint8_t* codes, float* scales, int64_t row0,
                        int64_t rows, const uint8_t* piece_codes, const float* piece_scales,
                        bool first_piece);

// The values of a piece: decode(code) x scale, (rows, cols) row-major.
std::vector<float> dequantize_codes_piece(QFormat f, Granularity g, int64_t rows, int64_t cols,
                                          const uint8_t* piece_codes, const float* piece_scales);

// Parses format / granularity names as kCodesFormatKey / kCodesGranularityKey write them; false
// for an unknown name.
bool parse_qformat(const std::string& name, QFormat& out);
bool parse_granularity(const std::string& name, Granularity& out);

}  // namespace eco
