// ZeRO-1's pieces and ranges (optim/zero_shards.h), checked against the parameter table and the
// arenas themselves: the pieces tile every parameter in whole rows (128-row blocks; a per-tensor
// scaled tensor whole), the ranks' rows partition each parameter in rank order, the flat
// gradient's ranges are those rows, each arena's range of rank r holds the bytes of exactly its
// rows, and an optimizer of a ZeRO-1 rank holds the moments of those rows only.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "core/config.h"
#include "model/transformer.h"
#include "optim/optimizer.h"
#include "optim/zero_shards.h"

namespace eco {
namespace {

ModelConfig shard_model() {
  ModelConfig m;
  m.set_family(ModelFamily::Gpt2);
  m.n_layer = 2;
  m.n_head = 2;
  m.d_model = 72;  // qkv 216 rows and MLP 288 rows: more than one 128-row piece
  m.vocab_size = 1000;  // wte: 8 pieces of rows
  m.seq_len = 8;
  m.mlp_hidden = 4 * 72;
  return m;
}

// Parameter i's byte range [first, second) in an arena for rows [r0, r1).
std::pair<int64_t, int64_t> arena_rows(const ParamStore& store, ParamArena kind, size_t i,
                                       int64_t r0, int64_t r1) {
  const ParamSpec& s = store.table().specs[i];
  const auto [rows, cols] = param_rows_cols(s);
  const Arena& a = store.arena(kind);
  const Tensor t = kind == ParamArena::Values ? store.value(i)
                   : kind == ParamArena::Codes
                       ? const_cast<ParamStore&>(store).qtensor(i).codes
                       : const_cast<ParamStore&>(store).qtensor(i).scales;
  const int64_t base = t.as<char>() - a.buffer.as<char>();
  const ParamStorage& st = store.storage(i);
  const auto bytes = [&](int64_t r) -> int64_t {
    switch (kind) {
      case ParamArena::Values: return r * cols * int64_t(dtype_size(t.dtype));
      case ParamArena::Codes: return code_bytes(st.format, r * cols);
      case ParamArena::Scales:
        if (st.granularity == Granularity::PerTensor) return r == rows ? 4 : 0;
        return 4 * ((r + (st.granularity == Granularity::Block128 ? 127 : 0)) /
                    (st.granularity == Granularity::Block128 ? 128 : 1)) *
               (st.granularity == Granularity::Block128 ? (cols + 127) / 128 : 1);
    }
    return 0;
  };
  return {base + bytes(r0), base + bytes(r1)};
}

TEST(ZeroShards, PiecesTileEveryParameterAndRanksPartitionTheRowsInEveryArena) {
  for (const char* treatment : {"fp32", "fp8-eco-sr", "fp8-mw-rtn", "int4-eco-sr"}) {
    auto be = make_cpu_backend();
    Transformer model(shard_model(), *be, 2, treatment_from_name(treatment));
    const ParamStore& store = model.store();
    const auto& specs = model.table().specs;
    int64_t any_split = 0;
    for (int world : {1, 2, 3, 5, 8}) {
      SCOPED_TRACE(std::string(treatment) + ", world " + std::to_string(world));
      const ZeroShards sh(store, world);
      // The pieces, in table order, tile each parameter's rows.
      size_t k = 0;
      int64_t largest = 0;
      for (size_t i = 0; i < specs.size(); ++i) {
        const auto [rows, cols] = param_rows_cols(specs[i]);
        const bool whole =
            store.quantized(i) && store.storage(i).granularity == Granularity::PerTensor;
        int64_t next = 0;
        for (; k < sh.pieces().size() && sh.pieces()[k].param == i; ++k) {
          const ZeroPiece& p = sh.pieces()[k];
          ASSERT_EQ(p.row_begin, next) << specs[i].name;
          EXPECT_EQ(p.row_begin % kZeroRowBlock, 0) << specs[i].name;
          EXPECT_EQ(p.row_end, whole ? rows : std::min(rows, p.row_begin + kZeroRowBlock));
          EXPECT_EQ(p.offset, specs[i].offset + p.row_begin * cols);
          EXPECT_EQ(p.length, (p.row_end - p.row_begin) * cols);
          largest = std::max(largest, p.length);
          next = p.row_end;
        }
        ASSERT_EQ(next, rows) << specs[i].name << ": rows left without a piece";
      }
      ASSERT_EQ(k, sh.pieces().size());
      // The ranks' rows of each parameter, consecutive in rank order, cover it; the gradient's
      // ranges are the same rows, and no rank holds much more than its share.
      const std::vector<int64_t> gb = sh.grad_bounds();
      ASSERT_EQ(gb.size(), size_t(world) + 1);
      EXPECT_EQ(gb.front(), 0);
      EXPECT_EQ(gb.back(), model.table().total);
      int64_t split = 0;
      for (size_t i = 0; i < specs.size(); ++i) {
        const auto [rows, cols] = param_rows_cols(specs[i]);
        int64_t at = 0, owners = 0;
        for (int r = 0; r < world; ++r) {
          const auto [r0, r1] = sh.rows(r, i);
          ASSERT_EQ(r0, at) << specs[i].name << " rank " << r;
          ASSERT_LE(r0, r1);
          if (r1 > r0) {
            ++owners;
            EXPECT_GE(specs[i].offset + r0 * cols, gb[size_t(r)]) << specs[i].name;
            EXPECT_LE(specs[i].offset + r1 * cols, gb[size_t(r) + 1]) << specs[i].name;
          }
          at = r1;
        }
        EXPECT_EQ(at, rows) << specs[i].name;
        split += owners > 1;
      }
      EXPECT_EQ(split, sh.split_params());
      int64_t sum = 0;
      for (int r = 0; r < world; ++r) {
        EXPECT_EQ(sh.elements(r), gb[size_t(r) + 1] - gb[size_t(r)]);
        EXPECT_LE(sh.elements(r), model.table().total / world + largest) << "rank " << r;
        sum += sh.elements(r);
      }
      EXPECT_EQ(sum, model.table().total);
      any_split += split;
      // Each arena's range of rank r holds exactly the bytes of rank r's rows.
      for (ParamArena kind : {ParamArena::Values, ParamArena::Codes, ParamArena::Scales}) {
        const Arena& a = store.arena(kind);
        const std::vector<int64_t> b = sh.arena_bounds(kind);
        ASSERT_EQ(b.size(), size_t(world) + 1);
        EXPECT_EQ(b.front(), 0);
        EXPECT_EQ(b.back(), a.buffer.empty() ? 0 : int64_t(a.buffer.bytes()));
        for (int r = 0; r < world; ++r) ASSERT_LE(b[size_t(r)], b[size_t(r) + 1]);
        for (size_t i = 0; i < specs.size(); ++i) {
          const bool here = kind == ParamArena::Values ? store.storage(i).value : store.quantized(i);
          if (!here) continue;
          for (int r = 0; r < world; ++r) {
            const auto [r0, r1] = sh.rows(r, i);
            if (r0 == r1) continue;
            const auto [lo, hi] = arena_rows(store, kind, i, r0, r1);
            EXPECT_GE(lo, b[size_t(r)]) << a.name << " " << specs[i].name << " rank " << r;
            EXPECT_LE(hi, b[size_t(r) + 1]) << a.name << " " << specs[i].name << " rank " << r;
          }
        }
      }
    }
    EXPECT_GT(any_split, 0) << treatment << ": no parameter divided by rows at any world size";
  }
}

TEST(ZeroShards, AZeroOneOptimizerHoldsTheMomentsOfItsRowsOnly) {
  auto be = make_cpu_backend();
  Transformer model(shard_model(), *be, 2, treatment_from_name("fp8-eco-sr"));
  const int world = 3;
  const ZeroShards sh(model.store(), world);
  int64_t state_bytes = 0;
  for (int r = 0; r < world; ++r) {
    Optimizer opt(OptimConfig{}, model, 0, world, r);
    const auto state = opt.state();
    const auto bounds = opt.state_bounds();
    ASSERT_EQ(state.size(), bounds.size());
    int64_t elements = 0;
    for (size_t e = 0; e < state.size(); ++e) {
      const size_t i = e / 2;  // AdamW: m, v per parameter
      const auto [r0, r1] = sh.rows(r, i);
      const int64_t cols = param_rows_cols(model.table().specs[i]).second;
      EXPECT_EQ(state[e].second.numel(), (r1 - r0) * cols) << state[e].first;
      ASSERT_EQ(bounds[e].size(), size_t(world) + 1);
      EXPECT_EQ(bounds[e][size_t(r) + 1] - bounds[e][size_t(r)], int64_t(state[e].second.bytes()))
          << state[e].first;
      EXPECT_EQ(bounds[e].back(), model.table().specs[i].numel() * 4) << state[e].first;
      elements += state[e].second.numel();
    }
    EXPECT_EQ(elements, 2 * sh.elements(r));
    state_bytes += elements;
  }
  EXPECT_EQ(state_bytes, 2 * model.table().total);
  // Unsharded: whole moments, no bounds.
  Optimizer whole(OptimConfig{}, model);
  for (const auto& b : whole.state_bounds()) EXPECT_TRUE(b.empty());
}

}  // namespace
}  // namespace eco

namespace eco {
namespace {

// Expert parallelism's two sharding groups (Optimizer): a ZeroShards over some members only.
// Rank (d, e) of dp 2 x ep 2 holds the dense parameters and its experts; the dense members are
// cut over the 4 ranks, the experts over the 2 holding them. Each group's rows partition its
// members, others have none; its gradient segments are exactly the members' ranges; its arena
// segments hold every member's bytes and no other parameter's; and within each segment the
// clamped bounds give each rank exactly the bytes of its rows.
TEST(ZeroShards, MembersOnlyCutTheirRowsAndSegmentsForEveryGroup) {
  ModelConfig m = shard_model();
  m.moe.n_experts = 4;
  m.moe.top_k = 2;
  m.moe.expert_hidden = 160;  // 160-row fc weights: two pieces
  m.moe.expert_act = m.mlp;
  for (const char* treatment : {"fp8-eco-sr", "bf16-mw", "int4-eco-sr"}) {
    auto be = make_cpu_backend();
    Transformer model(m, *be, 2, treatment_from_name(treatment), QuantizeScope::Blocks,
                      expert_placement(2, 2, 1));  // d 0, e 1: experts 2 and 3
    const ParamStore& store = model.store();
    const auto& specs = model.table().specs;
    std::vector<char> dense(specs.size()), experts(specs.size());
    int held = 0;
    for (size_t i = 0; i < specs.size(); ++i) {
      const int x = routed_expert_of(specs[i].name);
      dense[i] = x < 0;
      experts[i] = x >= 0 && store.present(i);
      held += experts[i];
      EXPECT_EQ(store.present(i), x < 0 || x == 2 || x == 3) << specs[i].name;
    }
    ASSERT_GT(held, 0);
    for (const auto& [member, world] : {std::pair{dense, 4}, std::pair{experts, 2}}) {
      SCOPED_TRACE(std::string(treatment) + (world == 4 ? ", dense" : ", experts"));
      const ZeroShards sh(store, world, member);
      int64_t sum = 0, members = 0;
      for (size_t i = 0; i < specs.size(); ++i) {
        const auto [rows, cols] = param_rows_cols(specs[i]);
        int64_t at = 0;
        for (int r = 0; r < world; ++r) {
          const auto [r0, r1] = sh.rows(r, i);
          if (!member[i]) {
            EXPECT_EQ(r0, r1) << specs[i].name << ": not a member, yet rows on rank " << r;
            continue;
          }
          ASSERT_EQ(r0, at) << specs[i].name;
          at = r1;
        }
        if (member[i]) {
          EXPECT_EQ(at, rows) << specs[i].name;
        }
        members += member[i] ? specs[i].numel() : 0;
      }
      for (int r = 0; r < world; ++r) sum += sh.elements(r);
      EXPECT_EQ(sum, members);
      // The gradient's segments: the members' ranges, merged where adjacent. The flat gradient
      // holds the present parameters only (the other ranks' experts have no slot here).
      EXPECT_EQ(store.grad_total(), model.grads().numel());
      int64_t present = 0;
      for (size_t i = 0; i < specs.size(); ++i) present += store.present(i) ? specs[i].numel() : 0;
      EXPECT_EQ(store.grad_total(), present);
      std::vector<char> covered(size_t(store.grad_total()), 0);
      for (const auto& [b, e] : sh.grad_segments())
        for (int64_t k = b; k < e; ++k) covered[size_t(k)] = 1;
      for (size_t i = 0; i < specs.size(); ++i) {
        if (!store.present(i)) continue;
        EXPECT_EQ(model.grad(i).data, model.grads().as<float>() + store.grad_offset(i));
        for (int64_t k = 0; k < specs[i].numel(); ++k)
          ASSERT_EQ(covered[size_t(store.grad_offset(i) + k)], member[i]) << specs[i].name;
      }
      const std::vector<int64_t> gb = sh.grad_bounds();
      for (const auto& [b, e] : sh.grad_segments()) {
        const std::vector<int64_t> c = clamp_bounds(gb, b, e);
        EXPECT_EQ(c.front(), 0);
        EXPECT_EQ(c.back(), e - b);
      }
      // The arenas: each member's bytes in one segment, no other parameter's in any; within a
      // segment, rank r's clamped range holds its rows' bytes.
      for (ParamArena kind : {ParamArena::Values, ParamArena::Codes, ParamArena::Scales}) {
        const auto segs = sh.arena_segments(kind);
        const std::vector<int64_t> ab = sh.arena_bounds(kind);
        const auto in_segment = [&](int64_t lo, int64_t hi) -> int {
          for (size_t j = 0; j < segs.size(); ++j)
            if (segs[j].first <= lo && hi <= segs[j].second) return int(j);
          return -1;
        };
        for (size_t i = 0; i < specs.size(); ++i) {
          const bool here = store.present(i) &&
                            (kind == ParamArena::Values ? bool(store.storage(i).value)
                                                        : store.quantized(i));
          if (!here) continue;
          const auto [rows, cols] = param_rows_cols(specs[i]);
          const auto [lo, hi] = arena_rows(store, kind, i, 0, rows);
          const int j = in_segment(lo, hi);
          if (!member[i]) {
            for (const auto& [b, e] : segs)
              EXPECT_TRUE(hi <= b || e <= lo) << specs[i].name << ": a non-member in a segment";
            continue;
          }
          ASSERT_GE(j, 0) << specs[i].name << " outside every segment of " << store.arena(kind).name;
          const auto [sb, se] = segs[size_t(j)];
          const std::vector<int64_t> c = clamp_bounds(ab, sb, se);
          for (int r = 0; r < world; ++r) {
            const auto [r0, r1] = sh.rows(r, i);
            if (r0 == r1) continue;
            const auto [rlo, rhi] = arena_rows(store, kind, i, r0, r1);
            EXPECT_GE(rlo - sb, c[size_t(r)]) << specs[i].name << " rank " << r;
            EXPECT_LE(rhi - sb, c[size_t(r) + 1]) << specs[i].name << " rank " << r;
          }
        }
      }
    }
  }
}

// ZeRO-1 with expert parallelism in the optimizer: on each of the dp 2 x ep 2 ranks (each its
// own placement), the moments' checkpoint bounds are the same world-indexed offsets (the
// gather needs every rank to agree), each rank's range is exactly the bytes of the moments it
// holds, and the ranks' moments add up to every parameter's once.
TEST(ZeroShards, ExpertParallelOptimizersAgreeOnTheMomentsBounds) {
  ModelConfig m = shard_model();
  m.moe.n_experts = 4;
  m.moe.top_k = 2;
  m.moe.expert_hidden = 160;
  m.moe.expert_act = m.mlp;
  const int dp = 2, ep = 2, world = dp * ep;
  std::vector<std::vector<std::vector<int64_t>>> bounds(world);
  std::vector<std::vector<int64_t>> bytes(world);
  int64_t elements = 0, total = 0;
  for (int r = 0; r < world; ++r) {
    auto be = make_cpu_backend();
    Transformer model(m, *be, 2, treatment_from_name("fp8-eco-sr"), QuantizeScope::Blocks,
                      expert_placement(dp, ep, r));
    Optimizer opt(OptimConfig{}, model, 0, world, r);
    bounds[size_t(r)] = opt.state_bounds();
    for (const auto& [name, t] : opt.state()) bytes[size_t(r)].push_back(int64_t(t.bytes()));
    elements += opt.elements_here();
    total = model.table().total;
  }
  EXPECT_EQ(elements, total) << "the ranks' moments do not add up to every parameter once";
  for (int r = 0; r < world; ++r) {
    ASSERT_EQ(bounds[size_t(r)], bounds[0]) << "rank " << r << "'s bounds differ from rank 0's";
    for (size_t j = 0; j < bounds[0].size(); ++j) {
      const auto& b = bounds[0][j];
      ASSERT_EQ(b.size(), size_t(world) + 1) << "state " << j;
      EXPECT_EQ(b[size_t(r) + 1] - b[size_t(r)], bytes[size_t(r)][j]) << "state " << j << " rank " << r;
    }
  }
}

}  // namespace
}  // namespace eco
