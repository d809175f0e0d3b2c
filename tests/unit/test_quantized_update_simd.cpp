// The CPU's vector quantized update (kernels/cpu/quantized_update_simd.h, AVX-512 and AVX2)
// against the scalar code it must reproduce (the CPU reference): the same codes, scales, m, v and
// master, byte for byte, for every path this CPU runs x format (E4M3, INT4) x rounding x rule
// (AdamW early and late, SGDM, lr 0) x policy x state type x granularity x thread count, on
// tensors with odd sizes (vector tails, odd INT4 row starts), subnormal, zero, huge and NaN
// values, NaN codes, and rows whose absmax is 0. And the vector SR draws are q.draw's words.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "base/error.h"
#include "base/math/eco_update.h"
#include "base/math/format_quantizer.h"
#include "base/math/optimizer_rules.h"
#include "core/rng.h"
#include "kernels/cpu/quantized_update.h"
#include "kernels/cpu/quantized_update_simd.h"

namespace {

using eco::FormatQuantizer;
using eco::Granularity;
using eco::QFormat;
using eco::Rounding;
using eco::UpdatePolicy;
using eco::cpu_simd::Isa;

// Restores the path active before it.
struct ForcedIsa {
  Isa before = eco::cpu_simd::active_isa();
  explicit ForcedIsa(Isa isa) { eco::cpu_simd::set_active_isa(isa); }
  ~ForcedIsa() { eco::cpu_simd::set_active_isa(before); }
};

std::vector<Isa> vector_isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::Avx2, Isa::Avx512})
    if (int(isa) <= int(eco::cpu_simd::best_isa())) out.push_back(isa);
  return out;
}

template <class S>
struct State {
  int64_t rows, cols;
  Granularity gran;
  std::vector<uint8_t> codes;
  std::vector<float> scales, master, grad;
  std::vector<S> m, v;
};

// Values that exercise the codecs: mostly normal, with zeros, subnormals, huge values and NaN.
float awkward(eco::Rng& rng, double scale) {
  const uint64_t pick = rng.next_u64() % 64;
  if (pick == 0) return 0.0f;
  if (pick == 1) return -0.0f;
  if (pick == 2) return float(rng.normal()) * 1e-40f;                 // fp32 subnormal
  if (pick == 3) return float(rng.normal()) * 1e30f;                  // huge
  if (pick == 4) return std::numeric_limits<float>::quiet_NaN();
  if (pick == 5) return float(rng.normal() * scale) * 0x1.0p-12f;     // grid subnormals
  return float(rng.normal() * scale);
}

template <class S>
State<S> make_state(QFormat format, Granularity gran, int64_t rows, int64_t cols, uint64_t seed,
                    bool nan) {
  State<S> t{rows, cols, gran, {}, {}, {}, {}, {}, {}};
  const int64_t n = rows * cols;
  eco::Rng rng(seed);
  t.master.resize(size_t(n)), t.grad.resize(size_t(n)), t.m.resize(size_t(n)), t.v.resize(size_t(n));
  t.codes.assign(size_t(eco::code_bytes(format, n)), 0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = i / cols;
    const bool zero_row = row % 7 == 3;  // absmax 0: all-zero weights, state and gradient
    float g = awkward(rng, 0.01), w = awkward(rng, 0.05 * (1 + row % 5));
    if (!nan && std::isnan(g)) g = 1.0f;
    if (!nan && std::isnan(w)) w = -2.0f;
    t.grad[size_t(i)] = zero_row ? 0.0f : g;
    t.master[size_t(i)] = zero_row ? 0.0f : w;
    t.m[size_t(i)] = eco::from_f32<S>(zero_row ? 0.0f : float(1e-3 * rng.normal()));
    t.v[size_t(i)] = eco::from_f32<S>(zero_row ? 0.0f : float(1e-6 * std::fabs(rng.normal())));
    uint8_t c = uint8_t(rng.next_u64());
    if (format == QFormat::INT4) c &= 0x0F;
    if (zero_row) c = 0;
    if (!nan && format == QFormat::E4M3 && (c & 0x7F) == 0x7F) c ^= 1;  // NaN codes only with nan
    eco::store_code(format, t.codes.data(), i, c);
  }
  t.scales.assign(size_t(eco::scale_group_count(gran, rows, cols)), 0.0f);
  for (size_t k = 0; k < t.scales.size(); ++k) t.scales[k] = float(1e-4 * (1 + k % 3));
  for (int64_t r = 0; r < rows; ++r)
    if (r % 7 == 3 && gran == Granularity::PerRow) t.scales[size_t(r)] = 0.0f;
  return t;
}

template <class S>
eco::QuantizedUpdateBuffers<S, float> buffers(State<S>& t, bool has_v) {
  return {t.codes.data(), t.master.data(), t.grad.data(), t.m.data(), has_v ? t.v.data() : nullptr};
}

// Byte for byte, except that two fp32 NaNs are equal whatever their signs: where both operands
// of a sum are NaNs of opposite signs (a NaN gradient's m plus the error of a NaN code's -NaN
// weight), x86 returns the first operand's, and which one the compiler puts first is its choice
// at each call site, the scalar code's included. bf16 NaNs are canonical (0x7fff), codes and
// scales are never NaN.
template <class T>
bool same_bytes(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(T)) == 0) continue;
    if constexpr (std::is_same_v<T, float>)
      if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    return false;
  }
  return true;
}

template <class S>
std::string first_difference(const State<S>& a, const State<S>& b) {
  if (!same_bytes(a.codes, b.codes)) return "codes";
  if (!same_bytes(a.scales, b.scales)) return "scales";
  if (!same_bytes(a.m, b.m)) return "m";
  if (!same_bytes(a.v, b.v)) return "v";
  if (!same_bytes(a.master, b.master)) return "master";
  return "";
}

template <class S>
State<S> run(Isa isa, const eco::RuleStep& step, QFormat format, Rounding rounding,
             UpdatePolicy policy, Granularity gran, int64_t rows, int64_t cols, uint64_t seed,
             bool nan, int threads) {
  State<S> t = make_state<S>(format, gran, rows, cols, seed, nan);
  const ForcedIsa forced(isa);
  const FormatQuantizer q{format, rounding, 77, 5, 3};
  const int before = omp_get_max_threads();
  omp_set_num_threads(threads);
  eco::with_rule(step, [&](const auto& rule) {
    using Rule = std::decay_t<decltype(rule)>;
    eco::quantized_update_matrix(rule, q, policy, buffers(t, Rule::kHasV), t.scales.data(), rows,
                                 cols, gran);
  });
  omp_set_num_threads(before);
  return t;
}

struct NamedStep {
  const char* name;
  eco::RuleStep step;
};
std::vector<NamedStep> steps() {
  return {{"adamw", eco::adamw_step(1e-3f, 0.9f, 0.98f, 1e-8f, 0.1f, 0.7f, 3)},
          {"adamw-late", eco::adamw_step(1e-3f, 0.9f, 0.98f, 1e-8f, 0.1f, 1.0f, 1000000)},
          {"sgdm", eco::sgdm_step(1e-2f, 0.9f, 0.1f, 0.5f)},
          {"sgdm-lr0", eco::sgdm_step(0.0f, 0.9f, 0.0f, 1.0f)}};
}

struct Shape {
  int64_t rows, cols;
};

template <class S>
void expect_every_treatment_matches_scalar(bool nan) {
  const std::vector<Isa> isas = vector_isas();
  if (isas.empty()) GTEST_SKIP() << "no AVX2 on this CPU";
  // Tails of both vector widths, two 128-blocks each way, a row shorter than a vector; the NaN
  // sweeps (element-wise guards) on two of them, one thread.
  const std::vector<Shape> shapes =
      nan ? std::vector<Shape>{{37, 141}, {5, 16}}
          : std::vector<Shape>{{37, 301}, {130, 140}, {5, 16}, {2, 3}};
  const std::vector<int> thread_counts = nan ? std::vector<int>{1} : std::vector<int>{1, 2};
  int checked = 0;
  for (QFormat format : {QFormat::E4M3, QFormat::INT4})
    for (Rounding rounding : {Rounding::RTN, Rounding::SR})
      for (const NamedStep& s : steps())
        for (UpdatePolicy policy : {UpdatePolicy::Master, UpdatePolicy::Naive, UpdatePolicy::Eco})
          for (Granularity gran : {Granularity::PerRow, Granularity::PerTensor, Granularity::Block128})
            for (const Shape& shape : shapes)
              for (int threads : thread_counts) {
                const uint64_t seed = uint64_t(shape.rows * 1000 + shape.cols);
                const State<S> want = run<S>(Isa::Scalar, s.step, format, rounding, policy, gran,
                                             shape.rows, shape.cols, seed, nan, threads);
                for (Isa isa : isas) {
                  const State<S> got = run<S>(isa, s.step, format, rounding, policy, gran,
                                              shape.rows, shape.cols, seed, nan, threads);
                  EXPECT_EQ(first_difference(got, want), "")
                      << eco::cpu_simd::isa_name(isa) << " " << eco::qformat_name(format) << " "
                      << (rounding == Rounding::SR ? "sr" : "rtn") << " " << s.name << " policy "
                      << int(policy) << " granularity " << int(gran) << " " << shape.rows << "x"
                      << shape.cols << " threads " << threads;
                  ++checked;
                }
              }
  EXPECT_GT(checked, 0);
}

TEST(QuantizedUpdateSimd, Fp32StateWritesTheScalarBytes) {
  expect_every_treatment_matches_scalar<float>(false);
}
TEST(QuantizedUpdateSimd, Bf16StateWritesTheScalarBytes) {
  expect_every_treatment_matches_scalar<uint16_t>(false);
}
TEST(QuantizedUpdateSimd, NanGradientsAndCodesWriteTheScalarBytes) {
  expect_every_treatment_matches_scalar<float>(true);
}
TEST(QuantizedUpdateSimd, NanWithBf16StateWritesTheScalarBytes) {
  expect_every_treatment_matches_scalar<uint16_t>(true);
}

// Every first element mod 4, lengths around the vector widths, and a group index whose low word
// carries into the high one within a vector.
TEST(QuantizedUpdateSimd, SrDrawsAreTheQuantizersWords) {
  const std::vector<Isa> isas = vector_isas();
  if (isas.empty()) GTEST_SKIP() << "no AVX2 on this CPU";
  const FormatQuantizer q{QFormat::E4M3, Rounding::SR, 0x123456789abcdefull, 0x100000007ull, 9};
  for (Isa isa : isas)
    for (uint64_t first : {uint64_t(0), uint64_t(1), uint64_t(2), uint64_t(3), uint64_t(4097),
                           (uint64_t(1) << 34) - 13})
      for (int64_t n : {1, 7, 16, 63, 64, 65, 1024}) {
        std::vector<uint32_t> got(static_cast<size_t>(n));
        eco::cpu_simd::sr_bits(isa, q, first, n, got.data());
        for (int64_t j = 0; j < n; ++j)
          ASSERT_EQ(got[size_t(j)], q.draw(int64_t(first) + j))
              << eco::cpu_simd::isa_name(isa) << " first " << first << " n " << n << " j " << j;
      }
}

// The split per-tensor update (pass 1 of every range, then pass 2) on the lanes: the scalar bytes.
TEST(QuantizedUpdateSimd, PerTensorRangesWriteTheScalarBytes) {
  const std::vector<Isa> isas = vector_isas();
  if (isas.empty()) GTEST_SKIP() << "no AVX2 on this CPU";
  const int64_t rows = 41, cols = 203;
  const eco::RuleStep step = eco::adamw_step(1e-3f, 0.9f, 0.98f, 1e-8f, 0.1f, 1.0f, 2);
  auto update = [&](Isa isa) {
    State<float> t = make_state<float>(QFormat::INT4, Granularity::PerTensor, rows, cols, 11, false);
    const ForcedIsa forced(isa);
    const FormatQuantizer q{QFormat::INT4, Rounding::SR, 5, 6, 7};
    const eco::AdamWRule<float> rule(step);
    const auto b = buffers(t, true);
    const eco::RowRange ranges[] = {{0, 13}, {13, 14}, {14, rows}};
    eco::TensorScaleSplit split{};
    for (int k = 0; k < 3; ++k) {
      const eco::TensorScaleSplit part = eco::quantized_update_tensor_absmax(
          rule, q, UpdatePolicy::Eco, b, t.scales.data(), rows, cols, ranges[k]);
      split = k == 0 ? part : eco::combine(split, part);
    }
    for (int k = 0; k < 3; ++k)  // pass 2 reads split.old_scale, not the scale written
      eco::quantized_update_tensor_finish(rule, q, UpdatePolicy::Eco, b, t.scales.data(), rows,
                                          cols, split, ranges[k]);
    return t;
  };
  const State<float> want = update(Isa::Scalar);
  for (Isa isa : isas) EXPECT_EQ(first_difference(update(isa), want), "") << eco::cpu_simd::isa_name(isa);
}

TEST(QuantizedUpdateSimd, ForcingAPathTheCpuLacksIsRefused) {
  if (eco::cpu_simd::best_isa() == Isa::Avx512) GTEST_SKIP() << "this CPU runs every path";
  EXPECT_THROW(eco::cpu_simd::set_active_isa(Isa::Avx512), eco::Error);
}

}  // namespace
