// The MoE dispatch (kernels/cpu/moe.h): the counting sort conserves slots and is stable in token
// order, gather then scatter is the identity (random routings, empty experts, every token to
// one expert), the capacity keeps the highest gates, and the combine sums in fixed k order.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "core/rng.h"
#include "kernels/cpu/moe.h"

namespace {

struct Routing {
  int N, E, k;
  std::vector<int32_t> idx;  // (N, k), distinct experts per token
  std::vector<double> gates;
};

Routing random_routing(int N, int E, int k, uint64_t seed, int only_experts = 0) {
  eco::Rng rng(seed);
  Routing r{N, E, k, {}, {}};
  const int pool = only_experts > 0 ? only_experts : E;
  for (int t = 0; t < N; ++t) {
    std::vector<int32_t> es(static_cast<size_t>(pool));
    std::iota(es.begin(), es.end(), 0);
    for (int j = 0; j < k; ++j) {
      const size_t pick = j + size_t(rng.next_u64() % uint64_t(pool - j));
      std::swap(es[size_t(j)], es[pick]);
      r.idx.push_back(es[size_t(j)]);
      r.gates.push_back(rng.uniform());
    }
  }
  return r;
}

struct Dispatched {
  std::vector<int32_t> row_of_slot, token_of_row;
  eco::MoeDispatch d;
};

Dispatched dispatch(const Routing& r, int64_t capacity, int align = 1) {
  Dispatched out;
  out.row_of_slot.assign(size_t(r.N * r.k), -2);
  out.token_of_row.assign(size_t(eco::moe_max_rows(r.N * r.k, r.E, align)), -2);
  out.d = eco::cpu::moe_dispatch(out.row_of_slot.data(), out.token_of_row.data(), r.idx.data(),
                                 r.gates.data(), r.N, r.E, r.k, capacity, align);
  return out;
}

// Every slot's row holds its token, rows of one expert are contiguous and in token order.
void expect_valid_permutation(const Routing& r, const Dispatched& x) {
  ASSERT_EQ(x.d.rows, r.N * r.k);
  EXPECT_EQ(std::accumulate(x.d.counts.begin(), x.d.counts.end(), int64_t(0)), r.N * r.k);
  std::vector<int> seen(size_t(x.d.rows), 0);
  for (int s = 0; s < r.N * r.k; ++s) {
    const int32_t row = x.row_of_slot[size_t(s)];
    ASSERT_GE(row, 0);
    EXPECT_EQ(x.token_of_row[size_t(row)], s / r.k);
    ++seen[size_t(row)];
  }
  for (int v : seen) EXPECT_EQ(v, 1);
  int64_t r0 = 0;
  for (int e = 0; e < r.E; ++e) {
    for (int64_t row = r0; row < r0 + x.d.counts[size_t(e)]; ++row) {
      const int32_t t = x.token_of_row[size_t(row)];
      bool routed_here = false;
      for (int j = 0; j < r.k; ++j)
        routed_here |= r.idx[size_t(t * r.k + j)] == e && x.row_of_slot[size_t(t * r.k + j)] == row;
      EXPECT_TRUE(routed_here) << "row " << row << " of expert " << e;
      if (row > r0) {
        EXPECT_LT(x.token_of_row[size_t(row - 1)], t) << "not in token order";
      }
    }
    r0 += x.d.counts[size_t(e)];
  }
}

// Gathering token rows to expert order and scattering them back gives k copies of each row.
void expect_gather_scatter_identity(const Routing& r, const Dispatched& x) {
  const int C = 5;
  eco::Rng rng(5);
  std::vector<double> xs(size_t(r.N * C)), rows(size_t(x.d.rows * C)), back(xs.size(), 0.0);
  for (auto& v : xs) v = rng.normal();
  eco::cpu::moe_gather(rows.data(), xs.data(), x.token_of_row.data(), x.d.rows, C);
  eco::cpu::moe_scatter_add(back.data(), rows.data(), x.row_of_slot.data(), r.N, C, r.k);
  for (size_t i = 0; i < xs.size(); ++i) EXPECT_EQ(back[i], r.k * xs[i]);
}

TEST(MoeDispatch, RandomRoutingsPermuteAndUnpermute) {
  for (uint64_t seed : {1, 2, 3}) {
    const Routing r = random_routing(37, 8, 3, seed);
    const Dispatched x = dispatch(r, r.N);
    expect_valid_permutation(r, x);
    expect_gather_scatter_identity(r, x);
  }
}

TEST(MoeDispatch, EmptyExpertsGetEmptySegments) {
  const Routing r = random_routing(20, 8, 2, 4, /*only_experts=*/3);  // experts 3..7 unused
  const Dispatched x = dispatch(r, r.N);
  for (int e = 3; e < 8; ++e) EXPECT_EQ(x.d.counts[size_t(e)], 0);
  expect_valid_permutation(r, x);
  expect_gather_scatter_identity(r, x);
}

TEST(MoeDispatch, AllTokensToOneExpertKeepTokenOrder) {
  Routing r = random_routing(16, 4, 1, 6, 1);
  const Dispatched x = dispatch(r, r.N);
  EXPECT_EQ(x.d.counts[0], 16);
  for (int t = 0; t < 16; ++t) EXPECT_EQ(x.token_of_row[size_t(t)], t);
  expect_gather_scatter_identity(r, x);
}

// Segments aligned to 16 rows (the CUDA backend's FP8 tiles): each expert's rows start on a
// multiple of 16 right after the previous segment's padded end, hold the same tokens in the same
// order as the unaligned dispatch, and the padding rows carry token -1 and gather as zeros.
TEST(MoeDispatch, AlignedSegmentsPadWithEmptyRows) {
  const Routing r = random_routing(45, 8, 3, 12, /*only_experts=*/6);  // experts 6, 7 empty
  const Dispatched x = dispatch(r, r.N), y = dispatch(r, r.N, 16);
  EXPECT_EQ(y.d.counts, x.d.counts);
  EXPECT_EQ(y.d.kept, r.N * r.k);
  int64_t end = 0;
  for (int e = 0; e < r.E; ++e) {
    const int64_t n = y.d.counts[size_t(e)], o = y.d.offsets[size_t(e)];
    EXPECT_EQ(o, end) << "expert " << e;
    EXPECT_EQ(o % 16, 0) << "expert " << e;
    for (int64_t i = 0; i < n; ++i)
      EXPECT_EQ(y.token_of_row[size_t(o + i)], x.token_of_row[size_t(x.d.offsets[size_t(e)] + i)]);
    end = o + (n + 15) / 16 * 16;
    for (int64_t row = o + n; row < end; ++row) EXPECT_EQ(y.token_of_row[size_t(row)], -1);
  }
  EXPECT_EQ(y.d.rows, end);
  EXPECT_LE(y.d.rows, eco::moe_max_rows(r.N * r.k, r.E, 16));
  for (int s = 0; s < r.N * r.k; ++s) {
    const int32_t row = y.row_of_slot[size_t(s)];
    ASSERT_GE(row, 0);
    EXPECT_EQ(y.token_of_row[size_t(row)], s / r.k);
  }
  // Gather: padding rows come out zero (the buffer starts poisoned), then the identity.
  const int C = 3;
  std::vector<double> xs(size_t(r.N * C)), rows(size_t(y.d.rows * C), -7.0), back(xs.size(), 0.0);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = 1.0 + double(i);
  eco::cpu::moe_gather(rows.data(), xs.data(), y.token_of_row.data(), y.d.rows, C);
  for (int64_t row = 0; row < y.d.rows; ++row) {
    if (y.token_of_row[size_t(row)] >= 0) continue;
    for (int c = 0; c < C; ++c) EXPECT_EQ(rows[size_t(row * C + c)], 0.0);
  }
  eco::cpu::moe_scatter_add(back.data(), rows.data(), y.row_of_slot.data(), r.N, C, r.k);
  for (size_t i = 0; i < xs.size(); ++i) EXPECT_EQ(back[i], r.k * xs[i]);
}

TEST(MoeDispatch, CountsSumToTokensTimesK) {
  const Routing r = random_routing(50, 6, 4, 9);
  const Dispatched x = dispatch(r, r.N);
  EXPECT_EQ(std::accumulate(x.d.routed.begin(), x.d.routed.end(), int64_t(0)), 50 * 4);
  EXPECT_EQ(x.d.routed, x.d.counts);
  EXPECT_EQ(x.d.dropped, 0);
}

TEST(MoeDispatch, CapacityKeepsTheHighestGatesInTokenOrderAndCountsTheDropped) {
  // Expert 0 gets all 6 tokens; capacity 2 keeps tokens 4 and 1 (the two largest gates).
  Routing r{6, 2, 1, {0, 0, 0, 0, 0, 0}, {0.1, 0.8, 0.3, 0.3, 0.9, 0.2}};
  const Dispatched x = dispatch(r, 2);
  EXPECT_EQ(x.d.counts[0], 2);
  EXPECT_EQ(x.d.routed[0], 6);
  EXPECT_EQ(x.d.dropped, 4);
  EXPECT_EQ(x.token_of_row[0], 1);
  EXPECT_EQ(x.token_of_row[1], 4);
  for (int t : {0, 2, 3, 5}) EXPECT_EQ(x.row_of_slot[size_t(t)], -1);
  // Equal gates: the lower token wins (tokens 2 and 3 tie at 0.3).
  const Dispatched y = dispatch(r, 3);
  EXPECT_EQ(y.row_of_slot[2], 1);
  EXPECT_EQ(y.row_of_slot[3], -1);
}

TEST(MoeCombine, SumsGateWeightedRowsInFixedOrderAndSkipsDropped) {
  // Two tokens, k 2: token 0 -> rows 1, 0; token 1 -> row 2 and a dropped slot.
  const std::vector<int32_t> row_of_slot = {1, 0, 2, -1};
  const std::vector<double> gates = {0.25, 0.75, 0.5, 0.5}, y = {1, 2, 3, 4, 5, 6};  // (3, 2)
  std::vector<double> out(4, 10.0);
  eco::cpu::moe_combine(out.data(), y.data(), gates.data(), row_of_slot.data(), 2, 2, 2, false);
  EXPECT_EQ(out, (std::vector<double>{0.25 * 3 + 0.75 * 1, 0.25 * 4 + 0.75 * 2, 2.5, 3.0}));
  std::vector<double> dy(6, -1.0), dg(4, -1.0);
  const std::vector<double> dout = {1, 1, 2, 0};
  eco::cpu::moe_combine_backward(dy.data(), dg.data(), dout.data(), y.data(), gates.data(),
                                 row_of_slot.data(), 2, 2, 2);
  EXPECT_EQ(dg, (std::vector<double>{7, 3, 10, 0}));
  EXPECT_EQ(dy, (std::vector<double>{0.75, 0.75, 0.25, 0.25, 1.0, 0.0}));
}

}  // namespace
