// src/base/math/eco_update.h's register form of the group update (quantized_update_theta /
// quantized_update_code, what the CUDA register kernel runs) against its buffer form
// (quantized_update_pass1 / pass2 through the CPU driver quantized_update_matrix): the same bits
// in codes, scales, m, v and master for every format x rounding x rule x policy x state type.
// The register form takes each element's SR draw alone (q.draw), the driver four at a time
// (q.draws through GroupDrawCursor); rows of 94 elements cut the draw groups between rows.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "core/rng.h"
#include "base/math/eco_update.h"
#include "base/math/format_quantizer.h"
#include "kernels/cpu/quantized_update.h"

namespace {

using eco::FormatQuantizer;
using eco::Granularity;
using eco::QFormat;
using eco::Rounding;
using eco::UpdatePolicy;

// One quantized (rows, cols) tensor with per-row scales, its optimizer state and a gradient.
template <class S>
struct State {
  int64_t rows, cols;
  std::vector<uint8_t> codes;
  std::vector<float> scales, master, grad;
  std::vector<S> m, v;
};

// Weights whose rows differ in magnitude, quantized per row with RTN; moments of a run in
// progress; the gradient holds some exact zeros (g = 0 keeps the moments' decay path honest).
template <class S>
State<S> make_state(QFormat format, int64_t rows, int64_t cols, uint64_t seed) {
  State<S> t{rows, cols, {}, {}, {}, {}, {}, {}};
  const int64_t n = rows * cols;
  eco::Rng rng(seed);
  t.master.resize(size_t(n)), t.grad.resize(size_t(n)), t.m.resize(size_t(n)), t.v.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) {
    t.master[size_t(i)] = float(0.05 * (1 + (i / cols) % 5) * rng.normal());
    t.grad[size_t(i)] = i % 17 == 3 ? 0.0f : float(0.01 * rng.normal());
    const float m = float(1e-3 * rng.normal());
    const float v = float(1e-6 * std::fabs(rng.normal() * rng.normal()) + 1e-9);  // v >= 0
    t.m[size_t(i)] = eco::from_f32<S>(m);
    t.v[size_t(i)] = eco::from_f32<S>(v);
  }
  const FormatQuantizer rtn{format, Rounding::RTN, 0, 0, 0};
  t.codes.assign(size_t(eco::code_bytes(format, n)), 0);
  t.scales.resize(size_t(rows));
  for (int64_t r = 0; r < rows; ++r) {
    float absmax = 0.0f;
    for (int64_t c = 0; c < cols; ++c) absmax = fmaxf(absmax, fabsf(t.master[size_t(r * cols + c)]));
    t.scales[size_t(r)] = rtn.scale_for(absmax);
    for (int64_t c = 0; c < cols; ++c)
      rtn.store(t.codes.data(), r * cols + c, rtn.encode(t.master[size_t(r * cols + c)], t.scales[size_t(r)], 0u));
  }
  return t;
}

// The register form, one row group at a time the way the CUDA kernel schedules it: every
// element's pass 1 on loaded values (backwards, to show the order does not matter), the row's
// absmax, then every element's pass 2 on pass 1's values; each output written once.
template <class Rule, class S>
void update_in_registers(const Rule& rule, const FormatQuantizer& q, UpdatePolicy policy, State<S>& t) {
  const int64_t cols = t.cols;
  const size_t row_elems = size_t(cols);
  std::vector<float> theta(row_elems);
  std::vector<S> m(row_elems), v(row_elems);
  std::vector<uint8_t> codes = t.codes;  // the old codes stay readable while the new ones go in
  for (int64_t r = 0; r < t.rows; ++r) {
    const float old_scale = t.scales[size_t(r)];
    float absmax = 0.0f;
    for (int64_t c = cols - 1; c >= 0; --c) {
      const int64_t i = r * cols + c;
      const float w = policy == UpdatePolicy::Master ? t.master[size_t(i)] : q.decode(q.load(t.codes.data(), i), old_scale);
      m[size_t(c)] = t.m[size_t(i)];
      v[size_t(c)] = t.v[size_t(i)];
      theta[size_t(c)] = eco::quantized_update_theta(rule, t.grad[size_t(i)], w, m[size_t(c)], v[size_t(c)]);
      absmax = fmaxf(absmax, fabsf(theta[size_t(c)]));
    }
    const float new_scale = q.scale_for(absmax);
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t i = r * cols + c;
      if (policy == UpdatePolicy::Master) t.master[size_t(i)] = theta[size_t(c)];
      q.store(codes.data(), i, eco::quantized_update_code(rule, q, policy, theta[size_t(c)], m[size_t(c)], v[size_t(c)], new_scale, q.draw(i)));
      t.m[size_t(i)] = m[size_t(c)];
      if constexpr (Rule::kHasV) t.v[size_t(i)] = v[size_t(c)];
    }
    t.scales[size_t(r)] = new_scale;
  }
  t.codes = codes;
}

template <class Rule, class S>
void update_with_driver(const Rule& rule, const FormatQuantizer& q, UpdatePolicy policy, State<S>& t) {
  const eco::QuantizedUpdateBuffers<S, float> b{t.codes.data(), t.master.data(), t.grad.data(), t.m.data(),
                                                Rule::kHasV ? t.v.data() : nullptr};
  eco::quantized_update_matrix(rule, q, policy, b, t.scales.data(), t.rows, t.cols, Granularity::PerRow);
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// Three steps of both forms from the same state; every buffer compared after each step. Test
// power: AdamW's steps and SR's redraws must move some codes (SGDM + RTN, or lr == 0, may not).
template <class Rule, class S>
void expect_same_bits(const Rule& rule, QFormat format, Rounding rounding, UpdatePolicy policy,
                      bool codes_must_move = true) {
  SCOPED_TRACE(std::string(eco::qformat_name(format)) + (rounding == Rounding::SR ? " sr" : " rtn") +
               (Rule::kHasV ? " adamw" : " sgdm") + " policy " + std::to_string(int(policy)) +
               (std::is_same_v<S, float> ? " fp32 state" : " bf16 state"));
  State<S> regs = make_state<S>(format, 9, 94, 1234 + uint64_t(format));
  State<S> driver = regs;
  const std::vector<uint8_t> codes0 = regs.codes;
  for (uint64_t step = 1; step <= 3; ++step) {
    const FormatQuantizer q{format, rounding, 4242, step, 7};
    update_in_registers(rule, q, policy, regs);
    update_with_driver(rule, q, policy, driver);
    ASSERT_TRUE(same_bits(regs.codes, driver.codes)) << "codes, step " << step;
    ASSERT_TRUE(same_bits(regs.scales, driver.scales)) << "scales, step " << step;
    ASSERT_TRUE(same_bits(regs.m, driver.m)) << "m, step " << step;
    ASSERT_TRUE(same_bits(regs.v, driver.v)) << "v, step " << step;
    ASSERT_TRUE(same_bits(regs.master, driver.master)) << "master, step " << step;
  }
  if (codes_must_move && (Rule::kHasV || rounding == Rounding::SR)) {
    EXPECT_NE(regs.codes, codes0) << "no code moved in three steps: the comparison proves little";
  }
}

template <class S>
void expect_all_rules_and_policies(const eco::RuleStep& adamw, const eco::RuleStep& sgdm) {
  for (QFormat format : {QFormat::E4M3, QFormat::E5M2, QFormat::INT8, QFormat::INT4})
    for (Rounding rounding : {Rounding::RTN, Rounding::SR})
      for (UpdatePolicy policy : {UpdatePolicy::Master, UpdatePolicy::Naive, UpdatePolicy::Eco}) {
        expect_same_bits<eco::AdamWRule<>, S>(eco::AdamWRule{adamw}, format, rounding, policy);
        expect_same_bits<eco::SgdmRule<>, S>(eco::SgdmRule{sgdm}, format, rounding, policy);
        eco::RuleStep sign = sgdm;
        sign.kind = eco::RuleKind::SignSgdm;
        expect_same_bits<eco::SignSgdmRule<>, S>(eco::SignSgdmRule{sign}, format, rounding, policy);
      }
}

const eco::RuleStep kAdamW{eco::RuleKind::AdamW, 5e-3f, 0.9f, 0.98f, 1e-8f, 0.1f, 0.7f,
                           float(1 - std::pow(0.9, 4)), float(1 - std::pow(0.98, 4))};
const eco::RuleStep kSgdm = eco::sgdm_step(0.05f, 0.9f, 0.1f, 0.7f);

TEST(EcoUpdateInRegisters, Fp32StateWritesTheDriversBits) { expect_all_rules_and_policies<float>(kAdamW, kSgdm); }

TEST(EcoUpdateInRegisters, Bf16StateWritesTheDriversBits) { expect_all_rules_and_policies<uint16_t>(kAdamW, kSgdm); }

// lr == 0 takes the no-injection branch of both forms.
TEST(EcoUpdateInRegisters, ZeroLearningRateWritesTheDriversBits) {
  eco::RuleStep adamw = kAdamW;
  eco::RuleStep sgdm = kSgdm;
  adamw.lr = 0.0f;
  sgdm.lr = 0.0f;
  for (UpdatePolicy policy : {UpdatePolicy::Naive, UpdatePolicy::Eco}) {
    expect_same_bits<eco::AdamWRule<>, float>(eco::AdamWRule{adamw}, QFormat::E4M3, Rounding::SR, policy, false);
    expect_same_bits<eco::SgdmRule<>, float>(eco::SgdmRule{sgdm}, QFormat::E4M3, Rounding::SR, policy, false);
  }
}

}  // namespace
