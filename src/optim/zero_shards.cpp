// ZeRO-1's pieces, the ranks' runs of them, and the ranges they make in each buffer.
#include "optim/zero_shards.h"

#include <algorithm>

#include "base/error.h"
#include "model/expert_parallel.h"

namespace eco {

std::pair<int64_t, int64_t> param_rows_cols(const ParamSpec& s) {
  if (s.shape.size() == 2) return {s.shape[0], s.shape[1]};
  return {1, s.numel()};
}

ZeroShards::ZeroShards(const ParamStore& store, int world, std::vector<char> member)
    : store_(store), world_(world), member_(std::move(member)) {
  if (world < 1) runtime_error("ZeRO-1 shards for a world of {}", world);
  const ParamTable& table = store.table();
  if (member_.empty())
    for (size_t i = 0; i < table.specs.size(); ++i) member_.push_back(store.present(i));
  ECO_ASSERT(member_.size() == table.specs.size(), "ZeRO-1 shards: {} member flags for {} "
             "parameters", member_.size(), table.specs.size());
  int64_t total = 0;
  for (size_t i = 0; i < table.specs.size(); ++i) {
    if (!member_[i]) continue;
    const ParamSpec& s = table.specs[i];
    const auto [rows, cols] = param_rows_cols(s);
    const bool whole = store.quantized(i) && store.storage(i).granularity == Granularity::PerTensor;
    const int64_t step = whole ? rows : kZeroRowBlock;
    const int64_t at = store.grad_offset(i);  // -1: absent (no gradient here)
    for (int64_t r = 0; r < rows; r += step) {
      const int64_t e = std::min(rows, r + step);
      pieces_.push_back({i, r, e, at < 0 ? -1 : at + r * cols, (e - r) * cols});
    }
    total += s.numel();
  }
  // Run r starts at the first piece boundary at or after r / world of the members' elements.
  cut_.assign(size_t(world) + 1, pieces_.size());
  cut_[0] = 0;
  size_t k = 0;
  int64_t before = 0;  // elements of pieces [0, k)
  for (int r = 1; r < world; ++r) {
    const int64_t target = int64_t((__int128)total * r / world);
    while (k < pieces_.size() && before < target) before += pieces_[k++].length;
    cut_[size_t(r)] = k;
  }
}

int64_t ZeroShards::row_at(int r, size_t i) const {
  if (!member_[i]) return 0;
  const size_t c = cut_[size_t(r)];
  const int64_t rows = param_rows_cols(store_.table().specs[i]).first;
  if (c == pieces_.size()) return rows;
  const ZeroPiece& p = pieces_[c];
  if (p.param > i) return rows;
  if (p.param < i) return 0;
  return p.row_begin;
}

std::vector<int64_t> ZeroShards::grad_bounds() const {
  const int64_t total = store_.grad_total();
  std::vector<int64_t> b(size_t(world_) + 1, total);
  b[0] = 0;
  for (int r = 1; r < world_; ++r) {
    const size_t c = cut_[size_t(r)];
    if (c < pieces_.size()) b[size_t(r)] = pieces_[c].offset;
  }
  return b;
}

std::vector<int64_t> ZeroShards::slot_offsets(ParamArena kind) const {
  const Arena& a = store_.arena(kind);
  const auto& specs = store_.table().specs;
  const int64_t es = a.buffer.empty() ? 1 : int64_t(dtype_size(a.buffer.dtype));
  // In slot order, as the store built them: the present parameters with a tensor in this arena
  // (codes and scales: the quantized ones; values: those with a value tensor).
  std::vector<int64_t> at(specs.size(), -1);
  size_t slot = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const bool here = store_.present(i) &&
                      (kind == ParamArena::Values ? bool(store_.storage(i).value) : store_.quantized(i));
    if (here) at[i] = a.slots.at(slot++).offset * es;
  }
  return at;
}

std::vector<int64_t> ZeroShards::arena_bounds(ParamArena kind) const {
  const Arena& a = store_.arena(kind);
  const auto& specs = store_.table().specs;
  const int64_t es = a.buffer.empty() ? 1 : int64_t(dtype_size(a.buffer.dtype));
  const int64_t end = a.buffer.empty() ? 0 : int64_t(a.buffer.bytes());
  const std::vector<int64_t> slot_at = slot_offsets(kind);
  // Bytes of rows [0, r) of parameter i in this arena.
  const auto row_bytes = [&](size_t i, int64_t r) -> int64_t {
    const auto [rows, cols] = param_rows_cols(specs[i]);
    if (r == 0) return 0;
    switch (kind) {
      case ParamArena::Values: return r * cols * es;
      case ParamArena::Codes: return code_bytes(store_.storage(i).format, r * cols);
      case ParamArena::Scales:
        if (store_.storage(i).granularity == Granularity::PerTensor) return r == rows ? 4 : 0;
        return num_scales(store_.storage(i).granularity, r, cols) * 4;
    }
    return 0;
  };
  std::vector<int64_t> b(size_t(world_) + 1, end);
  b[0] = 0;
  for (int r = 1; r < world_; ++r) {
    const size_t c = cut_[size_t(r)];
    if (c == pieces_.size()) continue;
    const ZeroPiece& p = pieces_[c];
    if (slot_at[p.param] >= 0) {
      b[size_t(r)] = slot_at[p.param] + row_bytes(p.param, p.row_begin);
      continue;
    }
    // Not stored here: the next member that is.
    for (size_t q = p.param + 1; q < specs.size(); ++q)
      if (member_[q] && slot_at[q] >= 0) {
        b[size_t(r)] = slot_at[q];
        break;
      }
  }
  return b;
}

std::vector<std::pair<int64_t, int64_t>> ZeroShards::grad_segments() const {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const ZeroPiece& p : pieces_) {
    if (!out.empty() && out.back().second == p.offset)
      out.back().second += p.length;
    else
      out.emplace_back(p.offset, p.offset + p.length);
  }
  return out;
}

std::vector<std::pair<int64_t, int64_t>> ZeroShards::arena_segments(ParamArena kind) const {
  const Arena& a = store_.arena(kind);
  const int64_t es = a.buffer.empty() ? 1 : int64_t(dtype_size(a.buffer.dtype));
  const std::vector<int64_t> slot_at = slot_offsets(kind);
  std::vector<std::pair<int64_t, int64_t>> out;
  bool extend = false;  // the previous parameter stored here was a member
  size_t slot = 0;
  for (size_t i = 0; i < slot_at.size(); ++i) {
    if (slot_at[i] < 0) continue;
    const int64_t end = slot_at[i] + a.slots.at(slot++).numel() * es;
    if (!member_[i]) {
      extend = false;
      continue;
    }
    if (extend)
      out.back().second = end;
    else
      out.emplace_back(slot_at[i], end);
    extend = true;
  }
  return out;
}

std::vector<int64_t> ZeroShards::tensor_bounds(size_t i, DType dt) const {
  const int64_t cols = param_rows_cols(store_.table().specs[i]).second;
  std::vector<int64_t> b(size_t(world_) + 1);
  for (int r = 0; r <= world_; ++r) b[size_t(r)] = row_at(r, i) * cols * int64_t(dtype_size(dt));
  return b;
}

int64_t ZeroShards::elements(int r) const {
  int64_t n = 0;
  for (size_t k = cut_[size_t(r)]; k < cut_[size_t(r) + 1]; ++k) n += pieces_[k].length;
  return n;
}

int ZeroShards::split_params() const {
  int n = 0;
  for (size_t i = 0; i < store_.table().specs.size(); ++i) {
    const int64_t rows = param_rows_cols(store_.table().specs[i]).first;
    bool split = false;
    for (int r = 1; r < world_ && !split; ++r) split = row_at(r, i) > 0 && row_at(r, i) < rows;
    n += split;
  }
  return n;
}

int ZeroShards::largest_rank() const {
  int best = 0;
  for (int r = 1; r < world_; ++r)
    if (elements(r) > elements(best)) best = r;
  return best;
}

ZeroMembers zero_members(const ParamStore& store, bool expert_parallel) {
  const auto& specs = store.table().specs;
  ZeroMembers m{std::vector<char>(specs.size()), std::vector<char>(specs.size())};
  for (size_t i = 0; i < specs.size(); ++i) {
    const bool routed = expert_parallel && routed_expert_of(specs[i].name) >= 0;
    m.dense[i] = !routed;
    m.experts[i] = routed && store.present(i);
  }
  return m;
}


}  // namespace eco
