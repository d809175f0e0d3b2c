// GPU tests: the fused quantized-weight updates (kernels/cuda/optimizer_update.cuh) against the
// CPU backend, whose quantized_*_update runs the CPU driver quantized_update_matrix
// (src/optim/quantized_update.h), and the plain fp32 AdamW / SGDM against the CPU backend's
// loops. Tolerance 0: both backends run the same kernels/common element math with the same
// rounding (--fmad=false, -ffp-contract=off) and the same Philox draws, so every code, scale,
// moment and master weight must carry the same bits, step after step.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "gpu_test.h"
#include "kernels/common/eco_update.h"
#include "kernels/common/format_quantizer.h"
#include "kernels/cuda/optimizer_update.cuh"
#include "model/backend.h"
#include "quant/qtensor.h"

namespace eco {
namespace {

using gputest::poison;
using gputest::randn;
using gputest::to_device;
using gputest::to_host;

// AdamWStep -> AdamWCoeffs and SgdmStep -> SgdmCoeffs: adamw_coeffs / sgdm_coeffs from
// model/backend.h, which both backends use (bias corrections in double, rounded once).

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

struct UpdateCase {
  bool adamw;
  UpdatePolicy policy;
  Rounding rounding;
  QFormat format;
  Granularity granularity;
  int64_t rows, cols;
};

std::string describe(const UpdateCase& k, bool bf16_state) {
  static const char* policies[] = {"master", "naive", "eco"};
  return std::string(k.adamw ? "adamw" : "sgdm") + " " + policies[int(k.policy)] + " " +
         (k.rounding == Rounding::SR ? "sr" : "rtn") + " " + qformat_name(k.format) + " " +
         granularity_name(k.granularity) + " " + std::to_string(k.rows) + "x" +
         std::to_string(k.cols) + (bf16_state ? " bf16 state" : " fp32 state");
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

  auto d_codes = to_device(codes), d_scales = to_device(scales), d_master = to_device(w);
  auto d_m = to_device(m), d_v = to_device(v);
  cuda::DeviceBuffer d_scratch(sizeof(float) * size_t(cuda::quantized_update_scratch_floats(
                                                   k.rows, k.cols, k.format, k.granularity)));
  poison(d_scratch);

  auto cpu = make_cpu_backend(DType::F32);
  const Tensor master_t = master ? Tensor{w.data(), {n}, DType::F32} : Tensor{};
  const Tensor m_t{m.data(), {n}, state_dtype};
  const Tensor v_t = k.adamw ? Tensor{v.data(), {n}, state_dtype} : Tensor{};
  for (int64_t step = 1; step <= 3; ++step) {
    std::vector<float> grad = randn(size_t(n), seed + 10 + uint64_t(step), 0.01f);
    auto d_grad = to_device(grad);
    const Tensor grad_t{grad.data(), {n}, DType::F32};
    const QuantizedStep qs{k.policy, k.rounding, 4242, uint64_t(step), 9};
    const FormatQuantizer fq{k.format, k.rounding, qs.seed, qs.step, qs.tensor_id};
    const QuantizedUpdateBuffers<S, float> b{
        d_codes.get<uint8_t>(), master ? d_master.get<float>() : nullptr, d_grad.get<float>(),
        d_m.template get<S>(), k.adamw ? d_v.template get<S>() : nullptr};
    if (k.adamw) {
      const AdamWStep st{5e-3f, 0.9f, 0.98f, 1e-8f, 0.1f, 0.7f, step};
      cpu->quantized_adamw_update(q, master_t, grad_t, m_t, v_t, st, qs);
      ECO_CHECK_CUDA(cuda::quantized_adamw_update(adamw_coeffs(st), fq, k.policy, b,
                                                  d_scales.get<float>(), k.rows, k.cols,
                                                  k.granularity, d_scratch.get<float>()));
    } else {
      const SgdmStep st{0.05f, 0.9f, 0.1f, 0.7f};
      cpu->quantized_sgdm_update(q, master_t, grad_t, m_t, st, qs);
      ECO_CHECK_CUDA(cuda::quantized_sgdm_update(sgdm_coeffs(st), fq, k.policy, b,
                                                 d_scales.get<float>(), k.rows, k.cols,
                                                 k.granularity, d_scratch.get<float>()));
    }
    ECO_CHECK_CUDA(cudaDeviceSynchronize());
    ASSERT_TRUE(same_bits(to_host<uint8_t>(d_codes, codes.size()), codes))
        << "codes, step " << step;
    ASSERT_TRUE(same_bits(to_host<float>(d_scales, scales.size()), scales))
        << "scales, step " << step;
    ASSERT_TRUE(same_bits(to_host<S>(d_m, m.size()), m)) << "m, step " << step;
    if (k.adamw) ASSERT_TRUE(same_bits(to_host<S>(d_v, v.size()), v)) << "v, step " << step;
    if (master)
      ASSERT_TRUE(same_bits(to_host<float>(d_master, w.size()), w)) << "master, step " << step;
  }
  // Test power: the steps must have moved some codes (AdamW's steps are ~10% of a weight; SR
  // redraws every element; SGDM + RTN may legitimately keep every code).
  if (n >= 64 && (k.adamw || k.rounding == Rounding::SR))
    EXPECT_NE(codes, codes0) << "no code changed in three steps";
}

// Every policy x rounding x state type on each shape.
using Shapes = std::vector<std::pair<int64_t, int64_t>>;

void expect_all_variants_match_cpu(bool adamw, QFormat format, Granularity granularity,
                                   const Shapes& shapes) {
  for (auto policy : {UpdatePolicy::Master, UpdatePolicy::Naive, UpdatePolicy::Eco})
    for (auto rounding : {Rounding::RTN, Rounding::SR})
      for (auto [rows, cols] : shapes) {
        const UpdateCase k{adamw, policy, rounding, format, granularity, rows, cols};
        expect_update_matches_cpu<float>(k);
        expect_update_matches_cpu<uint16_t>(k);
      }
}

// Ragged shapes: one row, odd widths, widths below and above one block's stride, 300 rows.
const Shapes kRaggedShapes = {{1, 16}, {7, 33}, {64, 130}, {300, 1000}, {5, 2049}};
// INT4 per-row groups need even widths (a code byte never spans two rows).
const Shapes kEvenShapes = {{1, 16}, {7, 34}, {64, 130}, {300, 1000}};

TEST(GpuQuantizedUpdate, AdamWE4m3PerRowIsBitIdenticalToCpuDriver) {
  ECO_REQUIRE_GPU();
  expect_all_variants_match_cpu(true, QFormat::E4M3, Granularity::PerRow, kRaggedShapes);
}

TEST(GpuQuantizedUpdate, SgdmE4m3PerRowIsBitIdenticalToCpuDriver) {
  ECO_REQUIRE_GPU();
  expect_all_variants_match_cpu(false, QFormat::E4M3, Granularity::PerRow, kRaggedShapes);
}

TEST(GpuQuantizedUpdate, AdamWInt4PerTensorIsBitIdenticalToCpuDriver) {
  ECO_REQUIRE_GPU();
  // Includes tensors of several per-tensor chunks (300x1000 = 300000 elements) and odd sizes.
  expect_all_variants_match_cpu(true, QFormat::INT4, Granularity::PerTensor, kRaggedShapes);
}

TEST(GpuQuantizedUpdate, SgdmInt4PerTensorIsBitIdenticalToCpuDriver) {
  ECO_REQUIRE_GPU();
  expect_all_variants_match_cpu(false, QFormat::INT4, Granularity::PerTensor, kRaggedShapes);
}

TEST(GpuQuantizedUpdate, AdamWE4m3Block128IsBitIdenticalToCpuDriver) {
  ECO_REQUIRE_GPU();
  expect_all_variants_match_cpu(true, QFormat::E4M3, Granularity::Block128, kRaggedShapes);
}

TEST(GpuQuantizedUpdate, AdamWInt4PerRowIsBitIdenticalToCpuDriver) {
  ECO_REQUIRE_GPU();
  expect_all_variants_match_cpu(true, QFormat::INT4, Granularity::PerRow, kEvenShapes);
}

TEST(GpuQuantizedUpdate, RejectsInt4RowGroupsWithOddWidth) {
  ECO_REQUIRE_GPU();
  cuda::DeviceBuffer codes(64), scales(64), grad(256), m(256), v(256);
  const QuantizedUpdateBuffers<float> b{codes.get<uint8_t>(), nullptr, grad.get<float>(),
                                        m.get<float>(), v.get<float>()};
  const FormatQuantizer fq{QFormat::INT4, Rounding::RTN, 1, 1, 0};
  const AdamWCoeffs c = adamw_coeffs({1e-3f, 0.9f, 0.98f, 1e-8f, 0.0f, 1.0f, 1});
  for (auto g : {Granularity::PerRow, Granularity::Block128})
    EXPECT_EQ(cuda::quantized_adamw_update(c, fq, UpdatePolicy::Eco, b, scales.get<float>(), 2, 31,
                                           g, nullptr),
              cudaErrorInvalidValue);
  // Master without a master weight, and PerTensor without scratch, are refused too.
  EXPECT_EQ(cuda::quantized_adamw_update(c, fq, UpdatePolicy::Master, b, scales.get<float>(), 2, 32,
                                         Granularity::PerRow, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::quantized_adamw_update(c, fq, UpdatePolicy::Eco, b, scales.get<float>(), 2, 32,
                                         Granularity::PerTensor, nullptr),
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
        const AdamWStep st{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.8f, t};
        cpu->adamw_update(Tensor{w.data() + offset, {n}, DType::F32},
                          Tensor{g.data() + offset, {n}, DType::F32},
                          Tensor{m.data() + offset, {n}, DType::F32},
                          Tensor{v.data() + offset, {n}, DType::F32}, n, st);
        ECO_CHECK_CUDA(cuda::fp32_adamw_update(dw.get<float>() + offset, dg.get<float>() + offset,
                                               dm.get<float>() + offset, dv.get<float>() + offset,
                                               n, adamw_coeffs(st)));
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
        const SgdmStep st{0.05f, 0.9f, 0.1f, 0.8f};
        cpu->sgdm_update(Tensor{w.data() + offset, {n}, DType::F32},
                         Tensor{g.data() + offset, {n}, DType::F32},
                         Tensor{m.data() + offset, {n}, DType::F32}, n, st);
        ECO_CHECK_CUDA(cuda::fp32_sgdm_update(dw.get<float>() + offset, dg.get<float>() + offset,
                                              dm.get<float>() + offset, n, sgdm_coeffs(st)));
      }
      ECO_CHECK_CUDA(cudaDeviceSynchronize());
      EXPECT_TRUE(same_bits(to_host<float>(dw, len), w)) << "param";
      EXPECT_TRUE(same_bits(to_host<float>(dm, len), m)) << "m";
    }
}

}  // namespace
}  // namespace eco
