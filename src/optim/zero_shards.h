// ZeRO-1's division of the optimizer's work over the ranks (docs/parallelism.md),
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
//
// Expert parallelism shards by groups (Optimizer): the dense parameters over the whole world,
// each rank's routed experts over its expert-data-parallel group. A ZeroShards then covers its
// members only (the others have no pieces and no rows); the members' bytes are no longer one
// range of each buffer, but several segments (grad_segments, arena_segments), each cut between
// the ranks by the same bounds (clamp_bounds).
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "dist/communicator.h"  // clamp_bounds
#include "model/param_store.h"
#include "model/param_table.h"

namespace eco {

constexpr int64_t kZeroRowBlock = 128;

struct ZeroPiece {
  size_t param = 0;
  int64_t row_begin = 0, row_end = 0;  // rows of the parameter, as a (rows, cols) matrix
  // Elements of the flat gradient (ParamStore::grad_offset; -1 for an absent parameter's piece).
  int64_t offset = 0, length = 0;
};

// A parameter as a (rows, cols) matrix: a vector is one row.
std::pair<int64_t, int64_t> param_rows_cols(const ParamSpec& s);

class ZeroShards {
 public:
  // member[i]: parameter i takes part (empty: every parameter present in the store). A member
  // absent from the store (another rank's expert) has pieces but no bytes in any arena.
  ZeroShards(const ParamStore& store, int world, std::vector<char> member = {});

  int world() const { return world_; }
  bool member(size_t i) const { return member_[i] != 0; }
  const std::vector<ZeroPiece>& pieces() const { return pieces_; }
  // Rank r's pieces: [first_piece(r), first_piece(r + 1)).
  size_t first_piece(int r) const { return cut_[size_t(r)]; }
  // Rank r's rows of parameter i: [first, second); empty when it owns none. The ranks' rows of a
  // parameter are consecutive in rank order.
  std::pair<int64_t, int64_t> rows(int r, size_t i) const {
    return {row_at(r, i), row_at(r + 1, i)};
  }
  // world + 1 element offsets of the flat gradient: rank r's range [b[r], b[r+1]) (within the
  // member segments: b[0] = 0, b[world] = the gradient's end).
  std::vector<int64_t> grad_bounds() const;
  // world + 1 byte offsets of one of the store's arenas, rank r's range holding its rows of
  // every member parameter stored there (and any alignment gap between them).
  std::vector<int64_t> arena_bounds(ParamArena kind) const;
  // The members' ranges [first, second) of the flat gradient, and the byte ranges of an arena
  // holding member parameters (adjacent members merged, alignment gaps between them included):
  // with every parameter a member, one range each.
  std::vector<std::pair<int64_t, int64_t>> grad_segments() const;
  std::vector<std::pair<int64_t, int64_t>> arena_segments(ParamArena kind) const;
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

  // Parameter i's byte offset in an arena, or -1 when it has no slot there.
  std::vector<int64_t> slot_offsets(ParamArena kind) const;

  const ParamStore& store_;
  int world_;
  std::vector<char> member_;
  std::vector<ZeroPiece> pieces_;
  std::vector<size_t> cut_;  // world + 1 piece indices
};

// Expert parallelism's two sharding groups' members (Optimizer): `dense`, every parameter but the
// routed experts' (every parameter without expert parallelism); `experts`, the routed experts
// this rank holds (none without it).
struct ZeroMembers {
  std::vector<char> dense, experts;
};
ZeroMembers zero_members(const ParamStore& store, bool expert_parallel);

}  // namespace eco
