// Specification tests of QTensor and the CPU reference quantize/dequantize (base/qtensor.h, kernels/cpu/quantize.h):
// scale groups, error bounds, absmax -> rho, INT4 packing, zero groups, and the Philox keying that
// makes SR deterministic across thread counts (and, by construction, across backends).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/rng.h"
#include "base/math/philox.h"
#include "kernels/cpu/quantize.h"

namespace {

using eco::Granularity;
using eco::QFormat;
using eco::Rounding;

constexpr QFormat kFormats[] = {QFormat::E4M3, QFormat::E5M2, QFormat::INT8, QFormat::INT4};
constexpr Granularity kGranularities[] = {Granularity::PerRow, Granularity::PerTensor,
                                          Granularity::Block128};

// Owns the buffers of a QTensor (the backend does this in the trainer).
struct OwnedQTensor {
  std::vector<uint8_t> codes;
  std::vector<float> scales;
  eco::QTensor q;

  OwnedQTensor(QFormat f, Granularity g, int64_t rows, int64_t cols)
      : codes(size_t(eco::code_bytes(f, rows * cols)), 0xCD),
        scales(size_t(eco::num_scales(g, rows, cols)), -1.0f),
        q(eco::qtensor_view(f, g, rows, cols, codes.data(), scales.data())) {}
};

// Normal values whose rows differ in magnitude (2^-8 .. 2^8), so per-row, per-block and
// per-tensor scales all differ and small rows reach the subnormal grid under a per-tensor scale.
std::vector<float> random_matrix(int64_t rows, int64_t cols, uint64_t seed) {
  eco::Rng rng(seed);
  std::vector<float> x(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    const double row_scale = std::exp2(-8 + 16 * rng.uniform());
    for (int64_t c = 0; c < cols; ++c) x[size_t(r * cols + c)] = float(rng.normal() * row_scale);
  }
  return x;
}

// Half a grid step, relative to |y|, and the subnormal (or integer) step in grid units:
// |x - dq| <= rel * |x| + abs_step / 2 * scale bounds RTN on every format.
struct GridStep {
  double rel, abs_step;
};
GridStep grid_step(QFormat f) {
  switch (f) {
    case QFormat::E4M3: return {0x1.0p-4, 0x1.0p-9};  // 3 mantissa bits; subnormal step 2^-9
    case QFormat::E5M2: return {0x1.0p-3, 0x1.0p-16};
    default: return {0.0, 1.0};
  }
}

TEST(QTensor, NumScalesAndScaleIndexPerGranularity) {
  EXPECT_EQ(eco::num_scales(Granularity::PerRow, 300, 129), 300);
  EXPECT_EQ(eco::num_scales(Granularity::PerTensor, 300, 129), 1);
  EXPECT_EQ(eco::num_scales(Granularity::Block128, 300, 129), 3 * 2);
  EXPECT_EQ(eco::num_scales(Granularity::Block128, 128, 256), 2);
  EXPECT_EQ(eco::scale_index(Granularity::PerRow, 300, 129, 17, 100), 17);
  EXPECT_EQ(eco::scale_index(Granularity::PerTensor, 300, 129, 17, 100), 0);
  EXPECT_EQ(eco::scale_index(Granularity::Block128, 300, 129, 127, 127), 0);
  EXPECT_EQ(eco::scale_index(Granularity::Block128, 300, 129, 127, 128), 1);
  EXPECT_EQ(eco::scale_index(Granularity::Block128, 300, 129, 128, 0), 2);
  EXPECT_EQ(eco::scale_index(Granularity::Block128, 300, 129, 299, 128), 5);
}

// RTN error per element: at most half a grid step of the element's grid cell, in x units (plus
// 2^-20 relative slack for the fp32 division x / scale and the product code * scale).
TEST(QTensor, RtnErrorIsAtMostHalfAGridStep) {
  const int64_t rows = 260, cols = 131;  // ragged 128-blocks
  const std::vector<float> x = random_matrix(rows, cols, 1);
  std::vector<float> dq(x.size());
  for (QFormat f : kFormats)
    for (Granularity g : kGranularities) {
      OwnedQTensor t(f, g, rows, cols);
      eco::quantize(x.data(), t.q, Rounding::RTN, 0, 0, 0);
      eco::dequantize(t.q, dq.data());
      const GridStep s = grid_step(f);
      double worst = 0;  // error / bound
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
          const size_t i = size_t(r * cols + c);
          const double scale = t.scales[size_t(eco::scale_index(g, rows, cols, r, c))];
          const double bound =
              (s.rel * std::fabs(x[i]) + 0.5 * s.abs_step * scale) * (1 + 0x1.0p-20);
          const double err = std::fabs(double(x[i]) - dq[i]);
          ASSERT_LE(err, bound) << eco::qformat_name(f) << " " << eco::granularity_name(g)
                                << " element (" << r << ", " << c << ")";
          worst = std::max(worst, err / bound);
        }
      EXPECT_GT(worst, 0.5) << "the bound is tight: some element comes close to it";
    }
}

// The largest magnitude of each group is stored as exactly +-rho (codes), under RTN and SR.
TEST(QTensor, AbsmaxElementOfEachGroupMapsToRho) {
  const int64_t rows = 200, cols = 300;
  const std::vector<float> x = random_matrix(rows, cols, 2);
  for (QFormat f : kFormats)
    for (Granularity g : kGranularities)
      for (Rounding rnd : {Rounding::RTN, Rounding::SR}) {
        OwnedQTensor t(f, g, rows, cols);
        eco::quantize(x.data(), t.q, rnd, 11, 3, 4);
        const int64_t groups = eco::num_scales(g, rows, cols);
        std::vector<float> amax(size_t(groups), 0.0f);
        std::vector<int64_t> arg(size_t(groups), -1);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < cols; ++c) {
            const int64_t gi = eco::scale_index(g, rows, cols, r, c), i = r * cols + c;
            if (std::fabs(x[size_t(i)]) > amax[size_t(gi)]) {
              amax[size_t(gi)] = std::fabs(x[size_t(i)]);
              arg[size_t(gi)] = i;
            }
          }
        const float rho = eco::qformat_max(f);
        for (int64_t gi = 0; gi < groups; ++gi) {
          const int64_t i = arg[size_t(gi)];
          const float v = eco::decode(f, eco::load_code(f, t.codes.data(), i));
          ASSERT_EQ(v, x[size_t(i)] > 0 ? rho : -rho)
              << eco::qformat_name(f) << " " << eco::granularity_name(g) << " group " << gi;
        }
      }
}

// INT4 with an odd element count (and odd rows, so bytes straddle rows): every element reads
// back the code quantize_value gives it, the unused high nibble is zero.
TEST(QTensor, Int4PackingRoundTripsOddCounts) {
  for (int64_t cols : {1, 3, 5, 127}) {
    const int64_t rows = 3;
    const std::vector<float> x = random_matrix(rows, cols, 3);
    OwnedQTensor t(QFormat::INT4, Granularity::PerRow, rows, cols);
    ASSERT_EQ(t.codes.size(), size_t((rows * cols + 1) / 2));
    eco::quantize(x.data(), t.q, Rounding::SR, 5, 6, 7);
    for (int64_t i = 0; i < rows * cols; ++i) {
      const uint8_t want = eco::quantize_value(QFormat::INT4, Rounding::SR, x[size_t(i)],
                                               t.scales[size_t(i / cols)],
                                               eco::philox_bits(5, 6, 7, uint64_t(i)));
      ASSERT_EQ(eco::load_code(QFormat::INT4, t.codes.data(), i), want) << "element " << i;
    }
    EXPECT_EQ(t.codes.back() >> 4, 0) << "padding nibble";
    std::vector<float> dq(x.size());
    eco::dequantize(t.q, dq.data());
    for (int64_t i = 0; i < rows * cols; ++i)
      EXPECT_EQ(dq[size_t(i)], eco::decode(QFormat::INT4,
                                           eco::load_code(QFormat::INT4, t.codes.data(), i)) *
                                   t.scales[size_t(i / cols)]);
  }
}

// An all-zero group (here: rows 1 and 3, including -0) has scale 0 and only zero codes, and
// dequantizes to zeros; other rows are unaffected.
TEST(QTensor, ZeroRowsGiveZeroScaleAndZeroCodes) {
  const int64_t rows = 4, cols = 6;
  std::vector<float> x = random_matrix(rows, cols, 4);
  for (int64_t c = 0; c < cols; ++c) {
    x[size_t(1 * cols + c)] = 0.0f;
    x[size_t(3 * cols + c)] = c % 2 ? -0.0f : 0.0f;
  }
  for (QFormat f : kFormats)
    for (Rounding rnd : {Rounding::RTN, Rounding::SR}) {
      OwnedQTensor t(f, Granularity::PerRow, rows, cols);
      eco::quantize(x.data(), t.q, rnd, 1, 2, 3);
      std::vector<float> dq(x.size(), 1.0f);
      eco::dequantize(t.q, dq.data());
      for (int64_t r : {1, 3}) {
        EXPECT_EQ(t.scales[size_t(r)], 0.0f);
        for (int64_t c = 0; c < cols; ++c) {
          EXPECT_EQ(eco::load_code(f, t.codes.data(), r * cols + c), 0) << eco::qformat_name(f);
          EXPECT_EQ(dq[size_t(r * cols + c)], 0.0f);
        }
      }
      EXPECT_GT(t.scales[0], 0.0f);
    }
}

// SR codes are quantize_value with philox_bits(seed, step, tensor_id, row-major index): the
// contract the CUDA kernels implement. Changing step or tensor id changes the draws.
TEST(QTensor, SrDrawsArePhiloxBitsOfTheRowMajorIndex) {
  const int64_t rows = 130, cols = 129;
  const std::vector<float> x = random_matrix(rows, cols, 5);
  for (Granularity g : kGranularities) {
    OwnedQTensor t(QFormat::E4M3, g, rows, cols);
    eco::quantize(x.data(), t.q, Rounding::SR, 99, 12, 8);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t i = r * cols + c;
        const float scale = t.scales[size_t(eco::scale_index(g, rows, cols, r, c))];
        ASSERT_EQ(t.codes[size_t(i)],
                  eco::quantize_value(QFormat::E4M3, Rounding::SR, x[size_t(i)], scale,
                                      eco::philox_bits(99, 12, 8, uint64_t(i))));
      }
    OwnedQTensor next_step(QFormat::E4M3, g, rows, cols);
    OwnedQTensor other_tensor(QFormat::E4M3, g, rows, cols);
    eco::quantize(x.data(), next_step.q, Rounding::SR, 99, 13, 8);
    eco::quantize(x.data(), other_tensor.q, Rounding::SR, 99, 12, 9);
    EXPECT_NE(t.codes, next_step.codes);
    EXPECT_NE(t.codes, other_tensor.codes);
    EXPECT_EQ(t.scales, next_step.scales);
  }
}

TEST(QTensor, SrIsIdenticalForOneAndTwoThreads) {
  const int64_t rows = 257, cols = 301;
  const std::vector<float> x = random_matrix(rows, cols, 6);
  const int saved = omp_get_max_threads();
  for (QFormat f : kFormats)
    for (Granularity g : kGranularities) {
      OwnedQTensor one(f, g, rows, cols), two(f, g, rows, cols);
      omp_set_num_threads(1);
      eco::quantize(x.data(), one.q, Rounding::SR, 3, 4, 5);
      omp_set_num_threads(2);
      eco::quantize(x.data(), two.q, Rounding::SR, 3, 4, 5);
      EXPECT_EQ(one.codes, two.codes) << eco::qformat_name(f) << " " << eco::granularity_name(g);
      EXPECT_EQ(one.scales, two.scales);
    }
  omp_set_num_threads(saved);
}

// Averaged over steps (fresh draws each), SR dequantizes to x: the per-element mean over 400
// steps lies within 5 standard errors (gap / (2 sqrt(400)) at most) of x for every element.
TEST(QTensor, SrDequantizesToXOnAverageOverSteps) {
  const int64_t rows = 8, cols = 64, steps = 400;
  const std::vector<float> x = random_matrix(rows, cols, 7);
  std::vector<double> mean(x.size(), 0.0);
  std::vector<float> dq(x.size());
  OwnedQTensor t(QFormat::E4M3, Granularity::PerRow, rows, cols);
  for (int64_t s = 0; s < steps; ++s) {
    eco::quantize(x.data(), t.q, Rounding::SR, 17, uint64_t(s), 2);
    eco::dequantize(t.q, dq.data());
    for (size_t i = 0; i < x.size(); ++i) mean[i] += dq[i] / double(steps);
  }
  for (size_t i = 0; i < x.size(); ++i) {
    const double scale = t.scales[i / size_t(cols)];
    const double y = std::fabs(x[i]) / scale;
    const double gap = y < 0x1.0p-6 ? 0x1.0p-9 : std::exp2(std::floor(std::log2(y)) - 3);
    EXPECT_NEAR(mean[i], x[i], 5 * 0.5 * gap * scale / std::sqrt(double(steps))) << i;
  }
}

}  // namespace
