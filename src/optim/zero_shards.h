// ZeRO-1's division of the optimizer's work over the ranks (../shared/design/DISTRIBUTED.md),
// for weights whose only copy may be FP8 codes.
//
// The parameters, in table order, are cut into pieces of whole rows: kZeroRowBlock rows (the
// Block128 tile height, so a tile's scale is never split), the last piece of a parameter shorter;
// a per-tensor-scaled quantized parameter is one piece (its one scale needs every row); a vector
// is one row. The piece sequence is cut into `world` contiguous runs of near-equal elements, and
// rank r owns run r: it updates those rows, keeps their moments only, and then all-gathers them.
// Because the runs follow table order, rank r's rows are one contiguous range of every arena
// (the flat gradient, the codes, the scales, the values), so each collective is one range per
// rank. Whole rows keep each per-row absmax local: the single-device fused update runs unchanged
// on a row view, its SR draws keyed by the global element index, so the bits are the unsharded
// run's.
//
// The pieces also fix the gradient norm's summation (Optimizer::grad_norm): one double partial
// per piece, added in piece order, whatever the world size or zero stage.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "model/param_store.h"
#include "model/param_table.h"

namespace eco {

constexpr int64_t kZeroRowBlock = 128;

struct ZeroPiece {
  size_t param = 0;
  int64_t row_begin = 0, row_end = 0;  // rows of the parameter, as a (rows, cols) matrix
  int64_t offset = 0, length = 0;      // elements of the flat parameter (gradient) buffer
};

// A parameter as a (rows, cols) matrix: a vector is one row.
std::pair<int64_t, int64_t> param_rows_cols(const ParamSpec& s);

class ZeroShards {
 public:
  ZeroShards(const ParamStore& store, int world);

  int world() const { return world_; }
  const std::vector<ZeroPiece>& pieces() const { return pieces_; }
  // Rank r's pieces: [first_piece(r), first_piece(r + 1)).
  size_t first_piece(int r) const { return cut_[size_t(r)]; }
  // Rank r's rows of parameter i: [first, second); empty when it owns none. The ranks' rows of a
  // parameter are consecutive in rank order.
  std::pair<int64_t, int64_t> rows(int r, size_t i) const {
    return {row_at(r, i), row_at(r + 1, i)};
  }
  // world + 1 element offsets of the flat gradient: rank r's range [b[r], b[r+1]).
  std::vector<int64_t> grad_bounds() const;
  // world + 1 byte offsets of one of the store's arenas, rank r's range holding its rows of
  // every parameter stored there (and any alignment gap between them).
  std::vector<int64_t> arena_bounds(ParamArena kind) const;
  // world + 1 byte offsets of a tensor of parameter i's shape in dtype dt that the ranks hold
  // by their rows (a moment): rank r's bytes of the whole tensor.
  std::vector<int64_t> tensor_bounds(size_t i, DType dt) const;
  // Elements rank r owns (its moments' size), and the rank that owns the most (a plan's rank).
  int64_t elements(int r) const;
  int largest_rank() const;
  // Parameters whose rows are divided between ranks (the rest belong to one rank whole).
  int split_params() const;

 private:
  // The first row of parameter i at or after rank r's cut (0 before it, rows after it).
  int64_t row_at(int r, size_t i) const;

  const ParamStore& store_;
  int world_;
  std::vector<ZeroPiece> pieces_;
  std::vector<size_t> cut_;  // world + 1 piece indices
};

}  // namespace eco
