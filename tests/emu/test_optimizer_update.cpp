// kernels/cuda/optimizer_update.cu (emulated: one host thread per CUDA thread, real barriers and
// warp shuffles) against the CPU driver quantized_update_matrix, bit for bit, as
// tests/gpu/test_update_gpu.cu does on a GPU: codes, scales, m, v, master weights over 3 steps,
// for AdamW / SGDM x master / naive / ECO x RTN / SR (fp32 state; bf16 once), buffers aligned and
// one element off, 0xFF guard bands around every buffer and NaN past the scratch. A subset of the
// formats x granularities x kernels x ragged widths, sized to run in CI on two cores: by default
// every variant once per kernel and each (shape, offset) under a pair of them (all_variants;
// every variant on every shape with ECO_EMU_FULL=1, the label exhaustive). And the
// row-range update (RowRange; per-tensor scales: the split absmax / finish) against the CPU
// driver's whole-tensor update, on a few representative cases.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "emu_common.h"
#include "sweep.h"
#include "kernels/cuda/optimizer_update.cuh"
#include "base/backend.h"
#include "kernels/cpu/quantized_update.h"
#include "kernels/cpu/quantize.h"

namespace {

using namespace eco;
using cuda::GroupKernel;
using emuh::Guarded;

template <class T>
std::vector<T> poison_values(size_t n) {
  std::vector<T> v(n);
  std::memset(v.data(), 0xFF, n * sizeof(T));
  return v;
}
template <class S>
std::vector<S> to_state(const std::vector<float>& x) {
  std::vector<S> s(x.size());
  for (size_t i = 0; i < x.size(); ++i) s[i] = from_f32<S>(x[i]);
  return s;
}

// One (rule, policy, rounding, format, granularity, shape, kernel, offset, state) case, 3 steps.
// bias_step > 0: AdamW's bias corrections of that step (a late step, ~1), every step.
template <class S>
void run_case(emuh::Tally& tally, bool adamw, UpdatePolicy policy, Rounding rounding,
              QFormat format, Granularity gran, int64_t rows, int64_t cols, GroupKernel kernel,
              size_t offset, int64_t bias_step) {
  ++tally.cases;
  const int64_t n = rows * cols;
  const uint64_t seed = 1000 * uint64_t(n) + 17 * uint64_t(policy) + uint64_t(rounding);
  const bool master = policy == UpdatePolicy::Master;
  std::vector<float> w = emuh::randn(size_t(n), seed, 0.05f);
  std::vector<uint8_t> codes(size_t(code_bytes(format, n)));
  std::vector<float> scales(size_t(num_scales(gran, rows, cols)));
  QTensor q = qtensor_view(format, gran, rows, cols, codes.data(), scales.data());
  quantize(w.data(), q, Rounding::RTN, seed, 0, 3);
  std::vector<S> m = to_state<S>(emuh::randn(size_t(n), seed + 1, 1e-3f));
  std::vector<float> v2 = emuh::randn(size_t(n), seed + 2, 1e-3f);
  for (auto& x : v2) x *= x;
  std::vector<S> v = to_state<S>(v2);
  Guarded<uint8_t> d_codes(codes, offset);
  Guarded<float> d_scales(scales, offset * sizeof(float));
  Guarded<float> d_master(master ? w : poison_values<float>(size_t(n)), offset * sizeof(float));
  Guarded<S> d_m(m, offset * sizeof(S));
  Guarded<S> d_v(adamw ? v : poison_values<S>(size_t(n)), offset * sizeof(S));
  const size_t scratch_n = size_t(cuda::quantized_update_scratch_floats(rows, cols, format, gran));
  std::vector<float> scratch(scratch_n + 16, std::numeric_limits<float>::quiet_NaN());
  std::vector<float> cpu_master = w;
  for (int64_t step = 1; step <= 3; ++step) {
    std::vector<float> grad = emuh::randn(size_t(n), seed + 10 + uint64_t(step), 0.01f);
    Guarded<float> d_grad(grad, offset * sizeof(float));
    const FormatQuantizer fq{format, rounding, 4242, uint64_t(step), 9};
    const QuantizedUpdateBuffers<S, float> hb{codes.data(), master ? cpu_master.data() : nullptr,
                                              grad.data(), m.data(), adamw ? v.data() : nullptr};
    const QuantizedUpdateBuffers<S, float> db{d_codes.data(), d_master.data(), d_grad.data(),
                                              d_m.data(), d_v.data()};
    cudaError_t e;
    if (adamw) {
      const int64_t t = bias_step > 0 ? bias_step : step;
      const RuleStep c = adamw_step(5e-3f, 0.9f, 0.98f, 1e-8f, 0.1f, 0.7f, t);
      quantized_update_matrix(AdamWRule<>{c}, fq, policy, hb, scales.data(), rows, cols, gran);
      e = cuda::quantized_update(c, fq, policy, db, d_scales.data(), rows, cols, gran,
                                 scratch.data(), nullptr, kernel);
    } else {
      const RuleStep c = sgdm_step(0.05f, 0.9f, 0.1f, 0.7f);
      quantized_update_matrix(SgdmRule<>{c}, fq, policy, hb, scales.data(), rows, cols, gran);
      e = cuda::quantized_update(c, fq, policy, db, d_scales.data(), rows, cols, gran,
                                 scratch.data(), nullptr, kernel);
    }
    long first = -1;
    std::string bad;
    auto diff = [&](const char* what, long k) {
      if (k)
        bad += std::string(" ") + what + "(" + std::to_string(k) + " differ, first " +
               std::to_string(first) + ")";
    };
    if (e != cudaSuccess) bad += " launch-error";
    diff("codes", emuh::differ(d_codes.host(), codes, &first));
    diff("scales", emuh::differ(d_scales.host(), scales, &first));
    diff("m", emuh::differ(d_m.host(), m, &first));
    diff("v", emuh::differ(d_v.host(), adamw ? v : poison_values<S>(size_t(n)), &first));
    diff("master", emuh::differ(d_master.host(),
                                master ? cpu_master : poison_values<float>(size_t(n)), &first));
    if (!d_codes.guards_intact() || !d_scales.guards_intact() || !d_master.guards_intact() ||
        !d_m.guards_intact() || !d_v.guards_intact() || !d_grad.guards_intact())
      bad += " guards";
    for (size_t i = scratch_n; i < scratch.size(); ++i)
      if (!std::isnan(scratch[i])) {
        bad += " scratch-overrun";
        break;
      }
    if (!bad.empty()) {
      tally.fail(std::string(adamw ? "adamw" : "sgdm") + " policy " + std::to_string(int(policy)) +
                 (rounding == Rounding::SR ? " sr " : " rtn ") + qformat_name(format) + " " +
                 granularity_name(gran) + " " + std::to_string(rows) + "x" + std::to_string(cols) +
                 " kernel " + std::to_string(int(kernel)) + " offset " + std::to_string(offset) +
                 " bias_step " + std::to_string(bias_step) + " state " +
                 (sizeof(S) == 4 ? "f32" : "bf16") + " step " + std::to_string(step) + ":" + bad);
      return;
    }
  }
}

using Shapes = std::vector<std::pair<int64_t, int64_t>>;

enum class States { F32, F32AndBf16 };

// The rule x policy x rounding variants, ordered so that each consecutive pair holds both rules
// and both roundings (AdamW alone when bias_step > 0: both roundings).
struct Variant {
  bool adamw;
  UpdatePolicy policy;
  Rounding rounding;
};
std::vector<Variant> variants(int64_t bias_step) {
  std::vector<Variant> v;
  for (auto policy : {UpdatePolicy::Master, UpdatePolicy::Naive, UpdatePolicy::Eco})
    for (auto [adamw, rounding] : {std::pair{true, Rounding::RTN}, std::pair{false, Rounding::SR},
                                   std::pair{true, Rounding::SR}, std::pair{false, Rounding::RTN}})
      if (adamw || bias_step == 0) v.push_back({adamw, policy, rounding});
  return v;
}

// Every rule x policy x rounding (x state type), aligned and one element off (when the width
// keeps rows aligned), on each shape the kernel fits. By default (sweep.h) each (shape, offset)
// runs a pair of consecutive variants (both rules, both roundings; more when there are fewer
// than 6 slots) and the pairs go round the list, so that every variant runs at least once per
// call; ECO_EMU_FULL=1 runs every variant on every (shape, offset). Returns the number of cases.
int all_variants(QFormat format, Granularity gran, const Shapes& shapes, GroupKernel kernel,
                 int64_t bias_step = 0, States states = States::F32) {
  struct Slot {
    int64_t rows, cols;
    size_t offset;
  };
  std::vector<Slot> slots;
  for (auto [rows, cols] : shapes) {
    if (!cuda::group_kernel_fits(kernel, gran, rows, cols)) continue;
    for (size_t offset : {size_t(0), size_t(1)})
      if (offset == 0 || (cols % 4 == 0 && gran != Granularity::PerTensor))
        slots.push_back({rows, cols, offset});
  }
  const std::vector<Variant> all = variants(bias_step);
  const size_t per_slot =
      emuh::full_sweep() || slots.empty()
          ? all.size()
          : std::max<size_t>(2, (all.size() + slots.size() - 1) / slots.size());
  emuh::Tally tally;
  size_t next = 0;
  for (const Slot& sl : slots)
    for (size_t k = 0; k < per_slot; ++k) {
      const Variant& v = all[emuh::full_sweep() ? k : next++ % all.size()];
      run_case<float>(tally, v.adamw, v.policy, v.rounding, format, gran, sl.rows, sl.cols, kernel,
                      sl.offset, bias_step);
      if (states == States::F32AndBf16)
        run_case<uint16_t>(tally, v.adamw, v.policy, v.rounding, format, gran, sl.rows, sl.cols,
                           kernel, sl.offset, bias_step);
    }
  return tally.cases;
}

// One step of the emulated kernels over the ranges [cuts[k], cuts[k + 1]) one after the other
// (PerTensor: every range's absmax, the splits combined on the host, every range's finish)
// against one whole-tensor step of the CPU driver: codes, scales, m, v, master bit for bit.
void run_ranges_case(emuh::Tally& tally, bool adamw, UpdatePolicy policy, Rounding rounding,
                     QFormat format, Granularity gran, int64_t rows, int64_t cols,
                     GroupKernel kernel, const std::vector<int64_t>& cuts) {
  ++tally.cases;
  const int64_t n = rows * cols;
  const uint64_t seed = 31 * uint64_t(n) + uint64_t(gran);
  std::vector<float> w = emuh::randn(size_t(n), seed, 0.05f);
  std::vector<uint8_t> codes(size_t(code_bytes(format, n)));
  std::vector<float> scales(size_t(num_scales(gran, rows, cols)));
  QTensor q = qtensor_view(format, gran, rows, cols, codes.data(), scales.data());
  quantize(w.data(), q, Rounding::RTN, seed, 0, 3);
  std::vector<float> m = emuh::randn(size_t(n), seed + 1, 1e-3f), v = emuh::randn(size_t(n), seed + 2, 1e-3f);
  for (auto& x : v) x *= x;
  const std::vector<float> grad = emuh::randn(size_t(n), seed + 3, 0.01f);
  const std::vector<uint8_t> codes0 = codes;
  // The device copies start from the same state.
  std::vector<uint8_t> d_codes = codes;
  std::vector<float> d_scales = scales, d_master = w, d_m = m, d_v = v;
  std::vector<float> scratch(size_t(cuda::quantized_update_scratch_floats(rows, cols, format, gran)) + 2);
  const FormatQuantizer fq{format, rounding, 4242, 5, 9};
  const QuantizedUpdateBuffers<float, float> hb{codes.data(), w.data(), grad.data(), m.data(),
                                                adamw ? v.data() : nullptr};
  const QuantizedUpdateBuffers<float, float> db{d_codes.data(), d_master.data(), grad.data(),
                                                d_m.data(), adamw ? d_v.data() : nullptr};
  const RuleStep ac = adamw_step(5e-3f, 0.9f, 0.98f, 1e-8f, 0.1f, 0.7f, 3);
  const RuleStep sc = sgdm_step(0.05f, 0.9f, 0.1f, 0.7f);
  if (adamw) quantized_update_matrix(AdamWRule<>{ac}, fq, policy, hb, scales.data(), rows, cols, gran);
  else quantized_update_matrix(SgdmRule<>{sc}, fq, policy, hb, scales.data(), rows, cols, gran);
  std::string bad;
  auto range = [&](size_t k) { return RowRange{cuts[k], cuts[k + 1], cuts[k] * cols}; };
  auto check = [&](cudaError_t e) {
    if (e != cudaSuccess) bad += " launch-error";
  };
  if (gran != Granularity::PerTensor) {
    for (size_t k = 0; k + 1 < cuts.size(); ++k)
      check(cuda::quantized_update(adamw ? ac : sc, fq, policy, db, d_scales.data(), rows, cols,
                                   gran, scratch.data(), nullptr, kernel, range(k)));
  } else {
    TensorScaleSplit split{0.0f, 0.0f};
    for (size_t k = 0; k + 1 < cuts.size(); ++k) {
      check(cuda::quantized_update_tensor_absmax(adamw ? ac : sc, fq, policy, db, d_scales.data(),
                                                 rows, cols, range(k), scratch.data()));
      const TensorScaleSplit part{scratch[0], scratch[1]};
      split = k == 0 ? part : combine(split, part);
    }
    const std::vector<float> combined{split.old_scale, split.absmax};
    for (size_t k = 0; k + 1 < cuts.size(); ++k)
      check(cuda::quantized_update_tensor_finish(adamw ? ac : sc, fq, policy, db, d_scales.data(),
                                                 rows, cols, range(k), combined.data()));
  }
  long first = -1;
  auto diff = [&](const char* what, long k) {
    if (k) bad += std::string(" ") + what + "(" + std::to_string(k) + " differ, first " + std::to_string(first) + ")";
  };
  diff("codes", emuh::differ(d_codes, codes, &first));
  diff("scales", emuh::differ(d_scales, scales, &first));
  diff("m", emuh::differ(d_m, m, &first));
  diff("v", emuh::differ(d_v, v, &first));
  diff("master", emuh::differ(d_master, w, &first));
  if (codes == codes0) bad += " no-code-moved";
  if (!bad.empty())
    tally.fail(std::string(adamw ? "adamw" : "sgdm") + " policy " + std::to_string(int(policy)) +
               (rounding == Rounding::SR ? " sr " : " rtn ") + qformat_name(format) + " " +
               granularity_name(gran) + " " + std::to_string(rows) + "x" + std::to_string(cols) +
               " kernel " + std::to_string(int(kernel)) + " ranges " + std::to_string(cuts.size() - 1) +
               ":" + bad);
}

constexpr GroupKernel kRowKernels[] = {GroupKernel::TwoPass, GroupKernel::Registers4,
                                       GroupKernel::Registers8, GroupKernel::Registers16};

}  // namespace

TEST(EmuQuantizedUpdate, E4m3PerRowMatchesCpuDriver) {
  EXPECT_GT(all_variants(QFormat::E4M3, Granularity::PerRow,
                         {{5, 1}, {5, 31}, {5, 768}, {5, 769}, {3, 5000}}, GroupKernel::Auto),
            0);
}

TEST(EmuQuantizedUpdate, Bf16StatePerRowMatchesCpuDriver) {
  EXPECT_GT(all_variants(QFormat::E4M3, Granularity::PerRow, {{5, 31}, {9, 36}}, GroupKernel::Auto,
                         0, States::F32AndBf16),
            0);
}

TEST(EmuQuantizedUpdate, E4m3PerRowEveryGroupKernelMatchesCpuDriver) {
  for (GroupKernel k : kRowKernels)
    EXPECT_GT(all_variants(QFormat::E4M3, Granularity::PerRow, {{5, 769}, {9, 36}}, k), 0);
}

TEST(EmuQuantizedUpdate, Int4PerRowMatchesCpuDriver) {
  EXPECT_GT(all_variants(QFormat::INT4, Granularity::PerRow, {{5, 2}, {5, 30}, {5, 770}, {9, 36}},
                         GroupKernel::Auto),
            0);
  EXPECT_GT(all_variants(QFormat::INT4, Granularity::PerRow, {{5, 766}}, GroupKernel::Registers8),
            0);
}

TEST(EmuQuantizedUpdate, Block128MatchesCpuDriver) {
  EXPECT_GT(all_variants(QFormat::E4M3, Granularity::Block128, {{1, 16}, {7, 33}, {129, 130}},
                         GroupKernel::Auto),
            0);
  EXPECT_GT(
      all_variants(QFormat::INT4, Granularity::Block128, {{7, 34}, {129, 130}}, GroupKernel::Auto),
      0);
}

TEST(EmuQuantizedUpdate, PerTensorMatchesCpuDriver) {
  EXPECT_GT(all_variants(QFormat::E4M3, Granularity::PerTensor, {{1, 1}, {7, 33}, {41, 301}},
                         GroupKernel::Auto),
            0);
  EXPECT_GT(
      all_variants(QFormat::INT4, Granularity::PerTensor, {{1, 16}, {7, 33}}, GroupKernel::Auto),
      0);
}

// Bias corrections of step 100000 (~1): the register kernels' late-step specialisations.
TEST(EmuQuantizedUpdate, LateStepMatchesCpuDriver) {
  EXPECT_GT(all_variants(QFormat::E4M3, Granularity::PerRow, {{5, 769}, {9, 36}}, GroupKernel::Auto,
                         100000),
            0);
  for (GroupKernel k : kRowKernels)
    EXPECT_GT(all_variants(QFormat::E4M3, Granularity::PerRow, {{5, 768}}, k, 100000), 0);
  EXPECT_GT(all_variants(QFormat::INT4, Granularity::PerRow, {{5, 770}}, GroupKernel::Auto, 100000),
            0);
  EXPECT_GT(
      all_variants(QFormat::E4M3, Granularity::Block128, {{129, 130}}, GroupKernel::Auto, 100000),
      0);
  EXPECT_GT(
      all_variants(QFormat::E4M3, Granularity::PerTensor, {{7, 33}}, GroupKernel::Auto, 100000), 0);
}

// Row ranges: the register and two-pass row kernels (33 cols: ranges start mid draw group),
// Block128 on block-row boundaries, and the per-tensor split over INT4 with odd cols (ranges
// cut packed bytes); ECO and Master, SR.
TEST(EmuQuantizedUpdate, RowRangesMatchTheWholeTensorUpdate) {
  emuh::Tally tally;
  for (bool adamw : {true, false})
    for (auto policy : {UpdatePolicy::Master, UpdatePolicy::Eco}) {
      run_ranges_case(tally, adamw, policy, Rounding::SR, QFormat::E4M3, Granularity::PerRow, 9, 36,
                      GroupKernel::Auto, {0, 2, 3, 9});
      run_ranges_case(tally, adamw, policy, Rounding::SR, QFormat::E4M3, Granularity::PerRow, 7, 33,
                      GroupKernel::TwoPass, {0, 1, 7});
      run_ranges_case(tally, adamw, policy, Rounding::SR, QFormat::E4M3, Granularity::Block128, 130, 20,
                      GroupKernel::Auto, {0, 128, 130});
      run_ranges_case(tally, adamw, policy, Rounding::SR, QFormat::INT4, Granularity::PerTensor, 7, 33,
                      GroupKernel::Auto, {0, 3, 4, 7});
    }
  EXPECT_GT(tally.cases, 0);
}
