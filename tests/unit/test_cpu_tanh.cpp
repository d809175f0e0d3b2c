// Accuracy of the CPU kernels' vectorizable float tanh (kernels/cpu/tanh_simd.h) against tanh in
// double, and of the float GELU kernels built on it against the GELU formula in double.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/tanh_simd.h"

namespace {

using eco::cpu::tanh_simd;

// Error of y against ref in units of the last place of floats in ref's binade (denormal spacing
// below FLT_MIN).
double ulps(float y, double ref) {
  int e;
  std::frexp(ref, &e);  // |ref| in [2^(e-1), 2^e)
  return std::abs(double(y) - ref) / std::ldexp(1.0, std::max(e - 24, -149));
}

// Every float in [-20, 20] at a spacing of 2^-14 (2.6M points, all exactly representable) plus
// the floats on either side of the branch point 0.625 and of the saturation point 9.01.
std::vector<float> tanh_grid() {
  std::vector<float> xs;
  for (int i = -20 * 16384; i <= 20 * 16384; i++) xs.push_back(float(i) / 16384.f);
  for (float c : {0.625f, 9.0109f}) {
    float lo = c, hi = c;
    for (int k = 0; k < 1000; k++) {
      lo = std::nextafter(lo, 0.f);
      hi = std::nextafter(hi, 20.f);
      xs.insert(xs.end(), {lo, hi, -lo, -hi});
    }
  }
  return xs;
}

// The worst case over all 2^31 non-negative floats, swept once exhaustively, is 1.33 ulp (1.4e-7
// relative) at x = 0.631, just above the branch point, where exp's error passes through 2/(e+1)
// and the subtraction. 2 ulp (libm's tanhf itself is only within 2) is the bound with margin;
// relative to the result that is at most 2.4e-7 and in fact at most 1.5e-7 here.
TEST(CpuTanhSimd, WithinTwoUlpOfDoubleTanhOnDenseGrid) {
  double worst_ulp = 0, worst_rel = 0;
  float worst_x = 0;
  for (float x : tanh_grid()) {
    const double ref = std::tanh(double(x));
    const float y = tanh_simd(x);
    if (ref == 0) {
      ASSERT_EQ(y, 0.f) << "x " << x;
      continue;
    }
    const double u = ulps(y, ref);
    ASSERT_LE(u, 2.0) << "x " << x << " tanh_simd " << y << " tanh " << ref;
    if (u > worst_ulp) worst_ulp = u, worst_x = x;
    worst_rel = std::max(worst_rel, std::abs(y - ref) / std::abs(ref));
  }
  EXPECT_LE(worst_rel, 1.5e-7);
  std::printf("  tanh_simd on the grid: worst %.3f ulp at x = %.9g, worst rel err %.3g\n",
              worst_ulp, worst_x, worst_rel);
}

TEST(CpuTanhSimd, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(std::bit_cast<uint32_t>(tanh_simd(0.f)), std::bit_cast<uint32_t>(0.f));
  EXPECT_EQ(std::bit_cast<uint32_t>(tanh_simd(-0.f)), std::bit_cast<uint32_t>(-0.f));
  // tanh(x) = x (1 - x^2/3 ...) rounds to x for every denormal and tiny normal.
  for (float x : {FLT_TRUE_MIN, 1e-40f, FLT_MIN, 1e-20f, 1e-10f}) {
    EXPECT_EQ(tanh_simd(x), x);
    EXPECT_EQ(tanh_simd(-x), -x);
  }
  for (float x : {9.1f, 10.f, 20.f, 1e10f, FLT_MAX, inf}) {
    EXPECT_EQ(tanh_simd(x), 1.f) << x;
    EXPECT_EQ(tanh_simd(-x), -1.f) << x;
  }
  EXPECT_TRUE(std::isnan(tanh_simd(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(tanh_simd(-std::numeric_limits<float>::quiet_NaN())));
}

// GELU in double, as src/base/math/activations.h writes it.
double gelu_ref(double x) {
  const double k = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1 + std::tanh(k * (x + 0.044715 * x * x * x)));
}
double gelu_grad_ref(double x) {
  const double k = std::sqrt(2.0 / M_PI);
  const double th = std::tanh(k * (x + 0.044715 * x * x * x));
  return 0.5 * (1 + th) + 0.5 * x * (1 - th * th) * k * (1 + 3 * 0.044715 * x * x);
}

std::vector<float> gelu_grid() {
  std::vector<float> xs;
  for (int i = -12 * 4096; i <= 12 * 4096; i++) xs.push_back(float(i) / 4096.f);
  return xs;
}

// The float formula rounds u (a few ulp of u) and 1 + tanh(u), which cancels for x < 0: an
// error of 1 ulp of 1 in it is 6e-8 absolute, times 0.5 |x|. The error bound is therefore
// absolute in |x|, not relative to gelu(x) (which is ~1e-6 |x| at x = -5). Measured worst on
// this grid: 5.2e-8 (tanh_simd) and 5.7e-8 (libm's tanhf) times (|x| + |gelu(x)|); the bound
// 2 FLT_EPSILON = 2.4e-7 leaves 4x margin yet fails on any error in tanh beyond a few ulp.
TEST(CpuGeluFloat, ForwardMatchesDoubleFormula) {
  const std::vector<float> x = gelu_grid();
  std::vector<float> y(x.size());
  eco::cpu::gelu_forward(y.data(), x.data(), int64_t(x.size()));
  double worst = 0;
  for (size_t i = 0; i < x.size(); i++) {
    const double ref = gelu_ref(x[i]);
    const double scale = std::abs(x[i]) + std::abs(ref);
    ASSERT_LE(std::abs(y[i] - ref), 2 * FLT_EPSILON * scale) << "x " << x[i];
    if (scale > 0) worst = std::max(worst, std::abs(y[i] - ref) / scale);
  }
  std::printf("  gelu_forward<float>: worst |err| / (|x| + |gelu|) = %.3g\n", worst);
}

// The gradient is 0.5 (1 + th) + 0.5 x sech^2(u) k (1 + 3 0.044715 x^2) with sech^2 = 1 - th^2,
// which cancels as |x| grows: an error of 1 ulp of 1 in th is an error of 1e-7 in sech^2, times
// the factor 0.5 |x| k (1 + 3 0.044715 x^2) around it. So the bound scales with the two terms'
// magnitudes with sech^2 taken as 1. Measured worst: 1.16e-7 of that scale with tanh_simd and
// with libm's tanhf alike; the bound is 2 FLT_EPSILON = 2.4e-7 (2x margin).
TEST(CpuGeluFloat, BackwardMatchesDoubleFormula) {
  const std::vector<float> x = gelu_grid();
  const std::vector<float> dout(x.size(), 1.f);
  std::vector<float> dinp(x.size(), 0.f);
  eco::cpu::gelu_backward(dinp.data(), x.data(), dout.data(), int64_t(x.size()));
  double worst = 0;
  const double k = std::sqrt(2.0 / M_PI);
  for (size_t i = 0; i < x.size(); i++) {
    const double xi = x[i], ref = gelu_grad_ref(xi);
    const double th = std::tanh(k * (xi + 0.044715 * xi * xi * xi));
    const double scale = 0.5 * (1 + th) + 0.5 * std::abs(xi) * k * (1 + 3 * 0.044715 * xi * xi);
    ASSERT_LE(std::abs(dinp[i] - ref), 2 * FLT_EPSILON * scale) << "x " << x[i];
    worst = std::max(worst, std::abs(dinp[i] - ref) / scale);
  }
  std::printf("  gelu_backward<float>: worst |err| / scale = %.3g\n", worst);
}

}  // namespace
