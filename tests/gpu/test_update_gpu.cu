// GPU tests: the fused quantized-weight updates (kernels/cuda/optimizer_update.cuh) against the
// CPU backend, whose quantized_*_update runs the CPU driver quantized_update_matrix
// (kernels/cpu/quantized_update.h), and the plain fp32 AdamW / SGDM against the CPU backend's
// loops. Tolerance 0: both backends run the same src/base/math element math with the same
// rounding (--fmad=false, -ffp-contract=off) and the same Philox draws, so every code, scale,
// moment and master weight must carry the same bits, step after step.
// The update works in place (codes, scales, m, v are inputs and outputs), so "poisoned outputs"
// means: every device buffer sits inside 0xFF guard bands that must survive, and the buffers the
// update must not write (the master weight outside Master, v under SGDM) start all 0xFF (NaN)
// and must stay so. An element the kernel skipped would keep its old m and v,
// which every step changes, so the bit comparison catches it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "gpu_test.h"
#include "base/math/eco_update.h"
#include "base/math/format_quantizer.h"
#include "kernels/cuda/optimizer_update.cuh"
#include "base/backend.h"
#include "kernels/cpu/quantize.h"

namespace eco {
namespace {

using cuda::GroupKernel;
using gputest::poison;
using gputest::randn;
using gputest::to_device;
using gputest::to_host;

// The coefficients both backends take: adamw_step (src/base/math/optimizer_rules.h; bias
// corrections in double, rounded once), as the optimizer builds them.

// Every element's bits equal; on failure names the first differing index and how many differ.
template <class T>
::testing::AssertionResult same_bits(const std::vector<T>& gpu, const std::vector<T>& cpu) {
  if (gpu.size() != cpu.size()) return ::testing::AssertionFailure() << "sizes differ";
  size_t first = gpu.size(), count = 0;
  for (size_t i = 0; i < gpu.size(); ++i)
    if (std::memcmp(&gpu[i], &cpu[i], sizeof(T)) != 0 && count++ == 0) first = i;
  if (count == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << count << " of " << gpu.size() << " differ, first at " << first << ": gpu "
         << +gpu[first] << " cpu " << +cpu[first];
}

template <class S>
std::vector<S> to_state(const std::vector<float>& x) {
  std::vector<S> s(x.size());
  for (size_t i = 0; i < x.size(); ++i) s[i] = from_f32<S>(x[i]);
  return s;
}

// n elements of T, every byte 0xFF (NaN for float and bf16).
template <class T>
std::vector<T> poison_values(size_t n) {
  std::vector<T> v(n);
  std::memset(v.data(), 0xFF, n * sizeof(T));
  return v;
}

// A device copy of host data inside 0xFF guard bands of kGuard elements, `offset` elements past
// the 16-byte-aligned start of the data region (offset 1 misaligns every pointer, which sends
// the update to its element-wise kernels).
template <class T>
class Guarded {
 public:
  static constexpr size_t kGuard = 16;
  Guarded(const std::vector<T>& h, size_t offset)
      : n_(h.size()), lead_(kGuard + offset), buf_((lead_ + n_ + kGuard) * sizeof(T)) {
    poison(buf_);
    if (n_) ECO_CHECK_CUDA(cudaMemcpy(data(), h.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  T* data() const { return buf_.get<T>() + lead_; }
  std::vector<T> host() const {
    const std::vector<T> all = to_host<T>(buf_, lead_ + n_ + kGuard);
    return std::vector<T>(all.begin() + long(lead_), all.begin() + long(lead_ + n_));
  }
  // The guard bands still all 0xFF.
  ::testing::AssertionResult guards_intact() const {
    const std::vector<uint8_t> all = to_host<uint8_t>(buf_, buf_.bytes());
    for (size_t i = 0; i < all.size(); ++i) {
      const bool in_data = i >= lead_ * sizeof(T) && i < (lead_ + n_) * sizeof(T);
      if (!in_data && all[i] != 0xFF)
        return ::testing::AssertionFailure() << "guard byte " << i << " written";
    }
    return ::testing::AssertionSuccess();
  }

 private:
  size_t n_, lead_;
  cuda::DeviceBuffer buf_;
};

struct UpdateCase {
  bool adamw;
  UpdatePolicy policy;
  Rounding rounding;
  QFormat format;
  Granularity granularity;
  int64_t rows, cols;
  GroupKernel kernel = GroupKernel::Auto;
  size_t offset = 0;  // elements between each buffer's aligned start and the data
  // > 0: AdamW's bias corrections are those of this step (at 100000 both are 1, which the
  // E4M3 Eco register kernels skip: AdamWRule::unbiased()), else those of the update's own step.
  int64_t bias_step = 0;
};

const char* kernel_name(GroupKernel k) {
  static const char* names[] = {"auto", "two-pass", "registers4", "registers8", "registers16"};
  return names[int(k)];
}

std::string describe(const UpdateCase& k, bool bf16_state) {
  static const char* policies[] = {"master", "naive", "eco"};
  return std::string(k.adamw ? "adamw" : "sgdm") + " " + policies[int(k.policy)] + " " +
         (k.rounding == Rounding::SR ? "sr" : "rtn") + " " + qformat_name(k.format) + " " +
         granularity_name(k.granularity) + " " + std::to_string(k.rows) + "x" +
         std::to_string(k.cols) + (bf16_state ? " bf16 state" : " fp32 state") + " kernel " +
         kernel_name(k.kernel) + " offset " + std::to_string(k.offset) +
         (k.bias_step > 0 ? " bias step " + std::to_string(k.bias_step) : "");
}

// Three steps of one update on identical host and device copies; all state compared after each.
template <class S>
void expect_update_matches_cpu(const UpdateCase& k) {
  SCOPED_TRACE(describe(k, std::is_same_v<S, uint16_t>));
  const int64_t n = k.rows * k.cols;
  const uint64_t seed = 1000 * uint64_t(n) + 17 * uint64_t(k.policy) + uint64_t(k.rounding);
  const DType state_dtype = std::is_same_v<S, float> ? DType::F32 : DType::BF16;
  const bool master = k.policy == UpdatePolicy::Master;

  // Weights ~ N(0, 0.05^2) quantized by the CPU reference; moments of a run in progress.
  std::vector<float> w = randn(size_t(n), seed, 0.05f);
  std::vector<uint8_t> codes(size_t(code_bytes(k.format, n)));
  std::vector<float> scales(size_t(num_scales(k.granularity, k.rows, k.cols)));
  QTensor q = qtensor_view(k.format, k.granularity, k.rows, k.cols, codes.data(), scales.data());
  quantize(w.data(), q, Rounding::RTN, seed, 0, 3);
  std::vector<S> m = to_state<S>(randn(size_t(n), seed + 1, 1e-3f));
  std::vector<float> v2 = randn(size_t(n), seed + 2, 1e-3f);
  for (auto& x : v2) x *= x;
  std::vector<S> v = to_state<S>(v2);
  const std::vector<uint8_t> codes0 = codes;

  // The buffers the update must not write start poisoned: master outside Master, v under SGDM.
  const Guarded<uint8_t> d_codes(codes, k.offset);
  const Guarded<float> d_scales(scales, k.offset);
  const Guarded<float> d_master(master ? w : poison_values<float>(size_t(n)), k.offset);
  const Guarded<S> d_m(m, k.offset), d_v(k.adamw ? v : poison_values<S>(size_t(n)), k.offset);
  // PerTensor's scratch (written by the update): guard bands around exactly the floats
  // quantized_update_scratch_floats promises.
  const Guarded<float> d_scratch(poison_values<float>(size_t(cuda::quantized_update_scratch_floats(
                                     k.rows, k.cols, k.format, k.granularity))),
                                 0);

  auto cpu = make_cpu_backend(DType::F32);
  const Tensor master_t = master ? Tensor{w.data(), {n}, DType::F32} : Tensor{};
  const Tensor m_t{m.data(), {n}, state_dtype};
  const Tensor v_t = k.adamw ? Tensor{v.data(), {n}, state_dtype} : Tensor{};
  for (int64_t step = 1; step <= 3; ++step) {
    std::vector<float> grad = randn(size_t(n), seed + 10 + uint64_t(step), 0.01f);
    const Guarded<float> d_grad(grad, k.offset);
    const Tensor grad_t{grad.data(), {n}, DType::F32};
    const QuantizedStep qs{k.policy, k.rounding, 4242, uint64_t(step), 9};
    const FormatQuantizer fq{k.format, k.rounding, qs.seed, qs.step, qs.tensor_id};
    const QuantizedUpdateBuffers<S, float> b{d_codes.data(), d_master.data(), d_grad.data(),
                                             d_m.data(), d_v.data()};
    if (k.adamw) {
      const int64_t t = k.bias_step > 0 ? k.bias_step : step;
      const RuleStep st = adamw_step(5e-3f, 0.9f, 0.98f, 1e-8f, 0.1f, 0.7f, t);
      cpu->quantized_update(q, master_t, grad_t, m_t, v_t, st, qs);
      ECO_CHECK_CUDA(cuda::quantized_update(st, fq, k.policy, b, d_scales.data(), k.rows, k.cols,
                                            k.granularity, d_scratch.data(), nullptr, k.kernel));
    } else {
      const RuleStep st = sgdm_step(0.05f, 0.9f, 0.1f, 0.7f);
      cpu->quantized_update(q, master_t, grad_t, m_t, Tensor{}, st, qs);
      ECO_CHECK_CUDA(cuda::quantized_update(st, fq, k.policy, b, d_scales.data(), k.rows, k.cols,
                                            k.granularity, d_scratch.data(), nullptr, k.kernel));
    }
    ECO_CHECK_CUDA(cudaDeviceSynchronize());
    ASSERT_TRUE(same_bits(d_codes.host(), codes)) << "codes, step " << step;
    ASSERT_TRUE(same_bits(d_scales.host(), scales)) << "scales, step " << step;
    ASSERT_TRUE(same_bits(d_m.host(), m)) << "m, step " << step;
    ASSERT_TRUE(same_bits(d_v.host(), k.adamw ? v : poison_values<S>(size_t(n)))) << "v, step " << step;
    ASSERT_TRUE(same_bits(d_master.host(), master ? w : poison_values<float>(size_t(n))))
        << "master, step " << step;
    for (auto guards : {d_codes.guards_intact(), d_scales.guards_intact(), d_master.guards_intact(),
                        d_m.guards_intact(), d_v.guards_intact(), d_grad.guards_intact(),
                        d_scratch.guards_intact()})
      ASSERT_TRUE(guards) << "step " << step;
    ASSERT_TRUE(same_bits(d_grad.host(), grad)) << "grad is read-only, step " << step;
  }
  // Test power: the steps must have moved some codes (AdamW's steps are ~10% of a weight; SR
  // redraws every E4M3 code with a probability of the step over the grid gap). SGDM's steps are
  // ~0.5% of a weight: under RTN, or on INT4's coarse grid (seen on an H200: 238 INT4 weights, no
  // code moved in three SR steps), every code may legitimately stay.
  if (n >= 64 && (k.adamw || (k.rounding == Rounding::SR && k.format != QFormat::INT4)))
    EXPECT_NE(codes, codes0) << "no code changed in three steps";
}

// Every rule x policy x rounding x state type on each shape, with `kernel` (where it fits the
// shape), at offset 0 and, for widths that allow vector access, offset 1 (misaligned buffers).
// bias_step > 0: AdamW only, with the bias corrections of that step (UpdateCase::bias_step).
using Shapes = std::vector<std::pair<int64_t, int64_t>>;

void expect_all_variants_match_cpu(QFormat format, Granularity granularity, const Shapes& shapes,
                                   GroupKernel kernel = GroupKernel::Auto, int64_t bias_step = 0) {
  for (auto [rows, cols] : shapes) {
    if (!cuda::group_kernel_fits(kernel, granularity, rows, cols)) continue;
    for (size_t offset : {size_t(0), size_t(1)}) {
      if (offset == 1 && (cols % 4 != 0 || granularity == Granularity::PerTensor)) continue;
      for (bool adamw : {true, false})
        for (auto policy : {UpdatePolicy::Master, UpdatePolicy::Naive, UpdatePolicy::Eco})
          for (auto rounding : {Rounding::RTN, Rounding::SR}) {
            if (bias_step > 0 && !adamw) continue;
            const UpdateCase k{adamw,  policy, rounding, format, granularity,
                               rows,   cols,   kernel,   offset, bias_step};
            expect_update_matches_cpu<float>(k);
            expect_update_matches_cpu<uint16_t>(k);
            if (::testing::Test::HasFatalFailure()) return;
          }
    }
  }
}

// Row lengths around the register kernels' quads (4 elements), warps and team sizes, the GPT-2
// widths (768, 3072) and a row too long for 4 and 8 elements per thread (5000); 5 rows, so that
// short rows share a block with idle teams left over. INT4 rows must be even.
const Shapes kRowShapes = {{5, 1}, {5, 31}, {5, 767}, {5, 768}, {5, 769}, {5, 3072}, {5, 5000}};
const Shapes kEvenRowShapes = {{5, 2}, {5, 30}, {5, 766}, {5, 768}, {5, 770}, {5, 3072}, {5, 5000}};
// Block128 (the two-pass kernel): one tile, ragged edge tiles in both directions, full tiles.
const Shapes kTileShapes = {{1, 16}, {7, 33}, {130, 300}, {300, 130}, {129, 256}};
const Shapes kEvenTileShapes = {{1, 16}, {7, 34}, {130, 300}, {300, 130}, {129, 256}};
// PerTensor: includes tensors of several per-tensor chunks (300x1000 = 300000 elements).
const Shapes kTensorShapes = {{1, 16}, {7, 33}, {64, 130}, {300, 1000}, {5, 2049}};

constexpr GroupKernel kRowKernels[] = {GroupKernel::Auto, GroupKernel::TwoPass,
                                       GroupKernel::Registers4, GroupKernel::Registers8,
                                       GroupKernel::Registers16};

TEST(GpuQuantizedUpdate, E4m3PerRowEveryKernelIsBitIdenticalToCpuDriver) {
  ECO_REQUIRE_GPU();
  for (GroupKernel kernel : kRowKernels) {
    SCOPED_TRACE(kernel_name(kernel));
    expect_all_variants_match_cpu(QFormat::E4M3, Granularity::PerRow, kRowShapes, kernel);
  }
}

TEST(GpuQuantizedUpdate, Int4PerRowEveryKernelIsBitIdenticalToCpuDriver) {
  ECO_REQUIRE_GPU();
  for (GroupKernel kernel : kRowKernels) {
    SCOPED_TRACE(kernel_name(kernel));
    expect_all_variants_match_cpu(QFormat::INT4, Granularity::PerRow, kEvenRowShapes, kernel);
  }
}

TEST(GpuQuantizedUpdate, E4m3Block128IsBitIdenticalToCpuDriver) {
  ECO_REQUIRE_GPU();
  expect_all_variants_match_cpu(QFormat::E4M3, Granularity::Block128, kTileShapes);
}

TEST(GpuQuantizedUpdate, Int4Block128IsBitIdenticalToCpuDriver) {
  ECO_REQUIRE_GPU();
  expect_all_variants_match_cpu(QFormat::INT4, Granularity::Block128, kEvenTileShapes);
}

TEST(GpuQuantizedUpdate, Int4PerTensorIsBitIdenticalToCpuDriver) {
  ECO_REQUIRE_GPU();
  expect_all_variants_match_cpu(QFormat::INT4, Granularity::PerTensor, kTensorShapes);
}

TEST(GpuQuantizedUpdate, E4m3PerTensorIsBitIdenticalToCpuDriver) {
  ECO_REQUIRE_GPU();
  expect_all_variants_match_cpu(QFormat::E4M3, Granularity::PerTensor, kTensorShapes);
}

// At a late step both AdamW bias corrections are 1: the E4M3 Eco register kernels skip the two
// divisions by them, the CPU skips them everywhere, and every other kernel divides by 1 (the
// same bits). Every kernel and granularity against the CPU there.
TEST(GpuQuantizedUpdate, AdamWAtLateStepsEveryKernelIsBitIdenticalToCpuDriver) {
  ECO_REQUIRE_GPU();
  constexpr int64_t kLate = 100000;
  for (GroupKernel kernel : kRowKernels) {
    SCOPED_TRACE(kernel_name(kernel));
    expect_all_variants_match_cpu(QFormat::E4M3, Granularity::PerRow, kRowShapes, kernel, kLate);
    if (::testing::Test::HasFatalFailure()) return;
  }
  expect_all_variants_match_cpu(QFormat::INT4, Granularity::PerRow, kEvenRowShapes,
                                GroupKernel::Auto, kLate);
  expect_all_variants_match_cpu(QFormat::E4M3, Granularity::Block128, kTileShapes,
                                GroupKernel::Auto, kLate);
  expect_all_variants_match_cpu(QFormat::E4M3, Granularity::PerTensor, kTensorShapes,
                                GroupKernel::Auto, kLate);
}

// The choice of kernels: which fit, and that a forced one that does not is refused.
TEST(GpuQuantizedUpdate, GroupKernelFitsItsGroupSizes) {
  using cuda::group_kernel_fits;
  const Granularity row = Granularity::PerRow, tile = Granularity::Block128;
  EXPECT_TRUE(group_kernel_fits(GroupKernel::Registers4, row, 1, 2048));  // 512 threads x 4
  EXPECT_FALSE(group_kernel_fits(GroupKernel::Registers4, row, 1, 2049));
  EXPECT_TRUE(group_kernel_fits(GroupKernel::Registers8, row, 1, 4096));
  EXPECT_FALSE(group_kernel_fits(GroupKernel::Registers8, row, 1, 4097));
  EXPECT_TRUE(group_kernel_fits(GroupKernel::Registers16, row, 1, 8192));
  EXPECT_FALSE(group_kernel_fits(GroupKernel::Registers16, row, 1, 8193));
  EXPECT_FALSE(group_kernel_fits(GroupKernel::Registers4, tile, 256, 256));  // tiles: two-pass
  EXPECT_TRUE(group_kernel_fits(GroupKernel::TwoPass, tile, 256, 256));
  EXPECT_FALSE(group_kernel_fits(GroupKernel::TwoPass, Granularity::PerTensor, 8, 8));
  for (GroupKernel k : kRowKernels) EXPECT_TRUE(group_kernel_fits(k, row, 3, 100)) << kernel_name(k);
  EXPECT_TRUE(group_kernel_fits(GroupKernel::Auto, row, 1, int64_t(1) << 30));
}

TEST(GpuQuantizedUpdate, RejectsInt4RowGroupsWithOddWidth) {
  ECO_REQUIRE_GPU();
  cuda::DeviceBuffer codes(64), scales(64), grad(256), m(256), v(256);
  const QuantizedUpdateBuffers<float> b{codes.get<uint8_t>(), nullptr, grad.get<float>(),
                                        m.get<float>(), v.get<float>()};
  const FormatQuantizer fq{QFormat::INT4, Rounding::RTN, 1, 1, 0};
  const RuleStep c = adamw_step(1e-3f, 0.9f, 0.98f, 1e-8f, 0.0f, 1.0f, 1);
  for (auto g : {Granularity::PerRow, Granularity::Block128})
    EXPECT_EQ(cuda::quantized_update(c, fq, UpdatePolicy::Eco, b, scales.get<float>(), 2, 31, g,
                                     nullptr),
              cudaErrorInvalidValue);
  // Master without a master weight, and PerTensor without scratch, are refused too.
  EXPECT_EQ(cuda::quantized_update(c, fq, UpdatePolicy::Master, b, scales.get<float>(), 2, 32,
                                   Granularity::PerRow, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::quantized_update(c, fq, UpdatePolicy::Eco, b, scales.get<float>(), 2, 32,
                                   Granularity::PerTensor, nullptr),
            cudaErrorInvalidValue);
  // A forced kernel that cannot hold the groups: refused before anything runs.
  EXPECT_EQ(cuda::quantized_update(c, fq, UpdatePolicy::Eco, b, scales.get<float>(), 1, 4096,
                                   Granularity::PerRow, nullptr, nullptr, GroupKernel::Registers4),
            cudaErrorInvalidValue);
}

// ---- plain fp32 steps ------------------------------------------------------------------------

// Sizes around the float4 tail; offset 1 makes every pointer 4 mod 16 (the scalar kernel).
constexpr int64_t kSizes[] = {1, 3, 4, 5, 1001, 100003};

TEST(GpuFp32Update, AdamWIsBitIdenticalToCpuBackend) {
  ECO_REQUIRE_GPU();
  auto cpu = make_cpu_backend(DType::F32);
  for (int64_t offset : {0, 1})
    for (int64_t n : kSizes) {
      SCOPED_TRACE("n " + std::to_string(n) + " offset " + std::to_string(offset));
      const size_t len = size_t(n + offset);
      std::vector<float> w = randn(len, 71 + n), g = randn(len, 72 + n, 0.01f),
                         m = randn(len, 73 + n, 1e-3f), v = randn(len, 74 + n, 1e-3f);
      for (auto& x : v) x *= x;
      auto dw = to_device(w), dg = to_device(g), dm = to_device(m), dv = to_device(v);
      for (int64_t t = 1; t <= 3; ++t) {
        const RuleStep st = adamw_step(1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.8f, t);
        cpu->plain_update({{Tensor{w.data() + offset, {n}, DType::F32},
                            Tensor{g.data() + offset, {n}, DType::F32},
                            Tensor{m.data() + offset, {n}, DType::F32},
                            Tensor{v.data() + offset, {n}, DType::F32}, n, st.weight_decay, n}},
                          st);
        ECO_CHECK_CUDA(cuda::fp32_plain_update(dw.get<float>() + offset, dg.get<float>() + offset,
                                               dm.get<float>() + offset, dv.get<float>() + offset,
                                               n, st));
      }
      ECO_CHECK_CUDA(cudaDeviceSynchronize());
      EXPECT_TRUE(same_bits(to_host<float>(dw, len), w)) << "param";
      EXPECT_TRUE(same_bits(to_host<float>(dm, len), m)) << "m";
      EXPECT_TRUE(same_bits(to_host<float>(dv, len), v)) << "v";
    }
}

TEST(GpuFp32Update, SgdmIsBitIdenticalToCpuBackend) {
  ECO_REQUIRE_GPU();
  auto cpu = make_cpu_backend(DType::F32);
  for (int64_t offset : {0, 1})
    for (int64_t n : kSizes) {
      SCOPED_TRACE("n " + std::to_string(n) + " offset " + std::to_string(offset));
      const size_t len = size_t(n + offset);
      std::vector<float> w = randn(len, 81 + n), g = randn(len, 82 + n, 0.01f),
                         m = randn(len, 83 + n, 1e-3f);
      auto dw = to_device(w), dg = to_device(g), dm = to_device(m);
      for (int t = 1; t <= 3; ++t) {
        const RuleStep st = sgdm_step(0.05f, 0.9f, 0.1f, 0.8f);
        cpu->plain_update({{Tensor{w.data() + offset, {n}, DType::F32},
                            Tensor{g.data() + offset, {n}, DType::F32},
                            Tensor{m.data() + offset, {n}, DType::F32}, Tensor{}, n,
                            st.weight_decay, n}},
                          st);
        ECO_CHECK_CUDA(cuda::fp32_plain_update(dw.get<float>() + offset, dg.get<float>() + offset,
                                               dm.get<float>() + offset, nullptr, n, st));
      }
      ECO_CHECK_CUDA(cudaDeviceSynchronize());
      EXPECT_TRUE(same_bits(to_host<float>(dw, len), w)) << "param";
      EXPECT_TRUE(same_bits(to_host<float>(dm, len), m)) << "m";
    }
}

}  // namespace
}  // namespace eco
