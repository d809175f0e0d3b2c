// The row-range quantized update (kernels/cpu/quantized_update.h) against the whole-tensor update
// as the reference: updating a tensor's rows in 1..4 uneven ranges, one after the other (per-tensor
// scales: every range's pass 1, the maxima combined, then every range's pass 2), writes exactly
// the whole update's codes, scales, m, v and master, for every rule x policy x granularity x
// rounding x state type, E4M3 and INT4 codes (odd cols: a packed byte spans two rows, and two
// ranges). And a range held in its own buffers (a shard, rows [0, n) with its global offset)
// draws the whole tensor's SR bits; a Block128 range off a block-row boundary is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "base/error.h"
#include "core/rng.h"
#include "base/math/eco_update.h"
#include "base/math/format_quantizer.h"
#include "base/math/optimizer_rules.h"
#include "kernels/cpu/quantized_update.h"

namespace {

using eco::FormatQuantizer;
using eco::Granularity;
using eco::QFormat;
using eco::Rounding;
using eco::RowRange;
using eco::TensorScaleSplit;
using eco::UpdatePolicy;

// One quantized (rows, cols) tensor, its state and gradient; scales per `gran` from an RTN
// quantization of a master weight whose rows differ in magnitude.
template <class S>
struct State {
  int64_t rows, cols;
  Granularity gran;
  std::vector<uint8_t> codes;
  std::vector<float> scales, master, grad;
  std::vector<S> m, v;
};

template <class S>
State<S> make_state(QFormat format, Granularity gran, int64_t rows, int64_t cols, uint64_t seed) {
  State<S> t{rows, cols, gran, {}, {}, {}, {}, {}, {}};
  const int64_t n = rows * cols;
  eco::Rng rng(seed);
  t.master.resize(size_t(n)), t.grad.resize(size_t(n)), t.m.resize(size_t(n)), t.v.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) {
    t.master[size_t(i)] = float(0.05 * (1 + (i / cols) % 5) * rng.normal());
    t.grad[size_t(i)] = float(0.01 * rng.normal());
    t.m[size_t(i)] = eco::from_f32<S>(float(1e-3 * rng.normal()));
    t.v[size_t(i)] = eco::from_f32<S>(float(1e-6 * std::fabs(rng.normal() * rng.normal()) + 1e-9));
  }
  const FormatQuantizer rtn{format, Rounding::RTN, 0, 0, 0};
  t.scales.assign(size_t(eco::scale_group_count(gran, rows, cols)), 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    float& s = t.scales[size_t(eco::scale_group_index(gran, cols, i / cols, i % cols))];
    s = fmaxf(s, fabsf(t.master[size_t(i)]));
  }
  for (float& s : t.scales) s = rtn.scale_for(s);
  t.codes.assign(size_t(eco::code_bytes(format, n)), 0);
  for (int64_t i = 0; i < n; ++i) {
    const float s = t.scales[size_t(eco::scale_group_index(gran, cols, i / cols, i % cols))];
    rtn.store(t.codes.data(), i, rtn.encode(t.master[size_t(i)], s, 0));
  }
  return t;
}

template <class S>
eco::QuantizedUpdateBuffers<S, float> buffers(State<S>& t, bool has_v) {
  return {t.codes.data(), t.master.data(), t.grad.data(), t.m.data(), has_v ? t.v.data() : nullptr};
}

// The update of `t` over the ranges [cuts[k], cuts[k + 1]) one after the other.
template <class Rule, class S>
void update_ranges(const Rule& rule, const FormatQuantizer& q, UpdatePolicy policy, State<S>& t,
                   const std::vector<int64_t>& cuts) {
  const auto b = buffers(t, Rule::kHasV);
  auto range = [&](size_t k) { return RowRange{cuts[k], cuts[k + 1], cuts[k] * t.cols}; };
  if (t.gran != Granularity::PerTensor) {
    for (size_t k = 0; k + 1 < cuts.size(); ++k)
      eco::quantized_update_matrix(rule, q, policy, b, t.scales.data(), t.rows, t.cols, t.gran, range(k));
    return;
  }
  std::vector<TensorScaleSplit> parts;
  for (size_t k = 0; k + 1 < cuts.size(); ++k)
    parts.push_back(eco::quantized_update_tensor_absmax(rule, q, policy, b, t.scales.data(), t.rows, t.cols, range(k)));
  TensorScaleSplit split = parts[0];
  for (const TensorScaleSplit& p : parts) split = eco::combine(split, p);
  for (size_t k = 0; k + 1 < cuts.size(); ++k)
    eco::quantized_update_tensor_finish(rule, q, policy, b, t.scales.data(), t.rows, t.cols, split, range(k));
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

template <class S>
void expect_same_state(const State<S>& a, const State<S>& b, const std::string& what) {
  EXPECT_TRUE(same_bits(a.codes, b.codes)) << "codes, " << what;
  EXPECT_TRUE(same_bits(a.scales, b.scales)) << "scales, " << what;
  EXPECT_TRUE(same_bits(a.m, b.m)) << "m, " << what;
  EXPECT_TRUE(same_bits(a.v, b.v)) << "v, " << what;
  EXPECT_TRUE(same_bits(a.master, b.master)) << "master, " << what;
}

// Uneven cuts of 300 rows into 1..4 ranges; Block128 cuts fall on block rows (128, 256), and its
// 4-range partition has an empty range.
std::vector<std::vector<int64_t>> partitions(Granularity gran, int64_t rows) {
  if (gran == Granularity::Block128)
    return {{0, rows}, {0, 128, rows}, {0, 128, 256, rows}, {0, 128, 128, 256, rows}};
  return {{0, rows}, {0, 7, rows}, {0, 1, 150, rows}, {0, 61, 62, 203, rows}};
}

template <class Rule, class S>
void expect_ranges_match_whole(const Rule& rule, QFormat format, Granularity gran, Rounding rounding,
                               UpdatePolicy policy) {
  const int64_t rows = 300, cols = 131;  // odd: INT4 bytes span rows (and range boundaries)
  const State<S> start = make_state<S>(format, gran, rows, cols, 77 + uint64_t(gran));
  const FormatQuantizer q{format, rounding, 4242, 3, 11};
  State<S> whole = start;
  eco::quantized_update_matrix(rule, q, policy, buffers(whole, Rule::kHasV), whole.scales.data(),
                               rows, cols, gran);
  // Test power: AdamW's step and SR's draws move codes (one SGDM step with RTN on the INT4 grid
  // may move none).
  if (Rule::kHasV || rounding == Rounding::SR) {
    ASSERT_NE(whole.codes, start.codes) << "the update moved no code: the comparison proves little";
  }
  for (const std::vector<int64_t>& cuts : partitions(gran, rows)) {
    State<S> ranged = start;
    update_ranges(rule, q, policy, ranged, cuts);
    expect_same_state(ranged, whole, std::to_string(cuts.size() - 1) + " ranges");
  }
}

struct Case {
  QFormat format;
  Granularity gran;
  Rounding rounding;
  UpdatePolicy policy;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  const char* gran = c.gran == Granularity::PerRow ? "Row" : c.gran == Granularity::PerTensor ? "Tensor" : "Block";
  const char* policy = c.policy == UpdatePolicy::Master ? "Master" : c.policy == UpdatePolicy::Naive ? "Naive" : "Eco";
  return std::string(c.format == QFormat::INT4 ? "Int4" : "E4m3") + gran +
         (c.rounding == Rounding::SR ? "Sr" : "Rtn") + policy;
}

std::vector<Case> all_cases() {
  std::vector<Case> out;
  for (QFormat f : {QFormat::E4M3, QFormat::INT4})
    for (Granularity g : {Granularity::PerRow, Granularity::Block128, Granularity::PerTensor})
      for (Rounding r : {Rounding::RTN, Rounding::SR})
        for (UpdatePolicy p : {UpdatePolicy::Master, UpdatePolicy::Naive, UpdatePolicy::Eco})
          out.push_back({f, g, r, p});
  return out;
}

const eco::RuleStep kAdamW = eco::adamw_step(5e-3f, 0.9f, 0.98f, 1e-8f, 0.1f, 0.7f, 4);
const eco::RuleStep kSgdm = eco::sgdm_step(0.05f, 0.9f, 0.1f, 0.7f);

class RowRangeUpdate : public ::testing::TestWithParam<Case> {};

TEST_P(RowRangeUpdate, RangesOneByOneWriteTheWholeTensorsBits) {
  const Case c = GetParam();
  {
    SCOPED_TRACE("adamw fp32 state");
    expect_ranges_match_whole<eco::AdamWRule<>, float>(eco::AdamWRule<>{kAdamW}, c.format, c.gran, c.rounding, c.policy);
  }
  {
    SCOPED_TRACE("adamw bf16 state");
    expect_ranges_match_whole<eco::AdamWRule<>, uint16_t>(eco::AdamWRule<>{kAdamW}, c.format, c.gran, c.rounding, c.policy);
  }
  {
    SCOPED_TRACE("sgdm fp32 state");
    expect_ranges_match_whole<eco::SgdmRule<>, float>(eco::SgdmRule<>{kSgdm}, c.format, c.gran, c.rounding, c.policy);
  }
  {
    SCOPED_TRACE("sgdm bf16 state");
    expect_ranges_match_whole<eco::SgdmRule<>, uint16_t>(eco::SgdmRule<>{kSgdm}, c.format, c.gran, c.rounding, c.policy);
  }
}

INSTANTIATE_TEST_SUITE_P(EveryRulePolicyGranularityRoundingState, RowRangeUpdate,
                         ::testing::ValuesIn(all_cases()), case_name);

// A shard held in its own buffers (its rows only, as a rank would hold them): rows [0, n) with
// the global offset of its first element draw the whole tensor's SR bits (per-row E4M3, SR; the
// offset 37 * 94 is not a multiple of 4, so the shard's draw groups straddle its rows
// differently from its local indices).
TEST(RowRangeUpdateShardBuffers, GlobalOffsetKeysTheWholeTensorsDraws) {
  const int64_t rows = 100, cols = 94, r0 = 37, r1 = 81;  // r0 * cols % 4 == 2: draw groups cut
  const State<float> start = make_state<float>(QFormat::E4M3, Granularity::PerRow, rows, cols, 5);
  const FormatQuantizer q{QFormat::E4M3, Rounding::SR, 99, 2, 3};
  const eco::AdamWRule<> rule{kAdamW};
  State<float> whole = start;
  eco::quantized_update_matrix(rule, q, UpdatePolicy::Eco, buffers(whole, true), whole.scales.data(),
                               rows, cols, Granularity::PerRow);
  // The shard: rows [r0, r1) copied out.
  State<float> shard = start;
  auto cut = [&](auto& v) { v.assign(v.begin() + r0 * cols, v.begin() + r1 * cols); };
  cut(shard.codes), cut(shard.master), cut(shard.grad), cut(shard.m), cut(shard.v);
  shard.scales.assign(start.scales.begin() + r0, start.scales.begin() + r1);
  shard.rows = r1 - r0;
  eco::quantized_update_matrix(rule, q, UpdatePolicy::Eco, buffers(shard, true), shard.scales.data(),
                               shard.rows, cols, Granularity::PerRow, RowRange{0, shard.rows, r0 * cols});
  for (int64_t i = 0; i < shard.rows * cols; ++i) {
    ASSERT_EQ(shard.codes[size_t(i)], whole.codes[size_t(r0 * cols + i)]) << "element " << i;
    ASSERT_EQ(shard.m[size_t(i)], whole.m[size_t(r0 * cols + i)]) << "element " << i;
  }
  for (int64_t r = 0; r < shard.rows; ++r) ASSERT_EQ(shard.scales[size_t(r)], whole.scales[size_t(r0 + r)]);
  // Without the offset the shard would draw the first rows' bits: some code differs.
  State<float> unkeyed = start;
  unkeyed.codes = std::vector<uint8_t>(start.codes.begin() + r0 * cols, start.codes.begin() + r1 * cols);
  cut(unkeyed.master), cut(unkeyed.grad), cut(unkeyed.m), cut(unkeyed.v);
  unkeyed.scales.assign(start.scales.begin() + r0, start.scales.begin() + r1);
  eco::quantized_update_matrix(rule, q, UpdatePolicy::Eco, buffers(unkeyed, true), unkeyed.scales.data(),
                               r1 - r0, cols, Granularity::PerRow);
  EXPECT_NE(unkeyed.codes, shard.codes);
}

TEST(RowRangeUpdateChecks, Block128RangeOffABlockRowIsRefused) {
  State<float> t = make_state<float>(QFormat::E4M3, Granularity::Block128, 300, 64, 1);
  const FormatQuantizer q{QFormat::E4M3, Rounding::RTN, 0, 1, 0};
  const auto b = buffers(t, true);
  const eco::AdamWRule<> rule{kAdamW};
  EXPECT_THROW(eco::quantized_update_matrix(rule, q, UpdatePolicy::Eco, b, t.scales.data(), 300, 64,
                                            Granularity::Block128, RowRange{0, 100}),
               eco::Error);
  EXPECT_THROW(eco::quantized_update_matrix(rule, q, UpdatePolicy::Eco, b, t.scales.data(), 300, 64,
                                            Granularity::Block128, RowRange{100, 300}),
               eco::Error);
  // A per-tensor range outside the split update is refused too.
  State<float> pt = make_state<float>(QFormat::E4M3, Granularity::PerTensor, 300, 64, 1);
  EXPECT_THROW(eco::quantized_update_matrix(rule, q, UpdatePolicy::Eco, buffers(pt, true), pt.scales.data(),
                                            300, 64, Granularity::PerTensor, RowRange{0, 100}),
               eco::Error);
}

}  // namespace
