// kernels/cuda/rope.cu (emulated) against the CPU twin (kernels/cpu/rope.cpp):
//  - rope_forward: every bf16 output (rotated q, k; v copied) equal bit for bit to the twin's fp32
//    result on the widened bf16 input, rounded once; the output NaN-poisoned, with guard bands.
//  - rope_backward: dinp (pre-filled: += is checked) likewise, bit for bit.
// Both sides take the angle t * theta^(-2i/hs) in double from libm's pow / cos / sin; in the
// emulator that is the same glibc on both sides, hence bits. On the GPU, CUDA's double pow / sin /
// cos may differ from glibc by an ulp, which is why tests/gpu compares with 5e-3 norm-wise.
// Also against a float64 rotation: within one bf16 rounding (2^-8 relative) plus the fp32
// products' error. Shapes of tests/gpu (head sizes 8, 6 (odd half), 64, 100; positions up to
// 256). No barrier: sequential mode.
//  - rope_forward_gqa / rope_backward_gqa (grouped-query rows: NH q heads, KVH k heads, KVH v
//    heads): bit for bit against eco::cpu::rope_*_gqa, query heads per kv head 1, 2, 4, head sizes
//    6, 16, 256 and both of Gemma 3's bases (1e4 local, 1e6 global).
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "emu_common.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cuda/rope.cuh"

namespace {

using namespace emuh;
using bf16 = __nv_bfloat16;
namespace ec = eco::cuda;

struct Shape {
  int B, T, C, NH;
};
const Shape kShapes[] = {{1, 1, 16, 2}, {2, 7, 36, 6}, {2, 64, 768, 12}, {1, 257, 1000, 10}};
constexpr float kTheta = 10000.0f;

std::vector<float> widen(const std::vector<uint16_t>& x) {
  std::vector<float> v(x.size());
  for (size_t i = 0; i < x.size(); ++i) v[i] = bf(x[i]);
  return v;
}

// Largest violation of |got - ref| <= 2^-8 |ref| + 2^-22 (|x_a| + |x_b|) against a float64
// rotation of src (by -angle when backward) added to base: one bf16 rounding plus the fp32
// roundings of cos, sin, the two products and the sum (each <= 2^-24 of its operands).
double worst_vs_double(const std::vector<uint16_t>& got, const std::vector<float>& src,
                       const std::vector<float>& base, const Shape& s, bool backward) {
  const int hs = s.C / s.NH, half = hs / 2;
  double worst = 0;
  for (int n = 0; n < s.B * s.T; ++n) {
    const int t = n % s.T;
    const size_t row = size_t(n) * 3 * s.C;
    for (int c = 0; c < 3 * s.C; ++c) {
      const size_t j = row + size_t(c);
      double ref, mag;
      if (c >= 2 * s.C) {
        ref = src[j], mag = std::fabs(src[j]);
      } else {
        const int i = c % hs < half ? c % hs : c % hs - half;
        const size_t a = j - size_t(c % hs - i), b = a + size_t(half);
        const double ang = t * std::pow(double(kTheta), -2.0 * i / hs) * (backward ? -1 : 1);
        ref = j == a ? src[a] * std::cos(ang) - src[b] * std::sin(ang)
                     : src[b] * std::cos(ang) + src[a] * std::sin(ang);
        mag = std::fabs(src[a]) + std::fabs(src[b]);
      }
      ref += base.empty() ? 0.0 : base[j];
      const double err = std::fabs(bf(got[j]) - ref);
      const double tol =
          0x1p-8 * std::fabs(ref) + 0x1p-22 * (mag + (base.empty() ? 0 : std::fabs(base[j])));
      if (!(err <= tol)) worst = std::max(worst, std::isnan(err) ? INFINITY : err / tol);
    }
  }
  return worst;
}

void rope_case(Tally& tally, const Shape& s, bool backward, uint64_t seed) {
  char name[96];  // (snprintf: "B" + std::to_string trips g++ 12's -Wrestrict at -O3)
  std::snprintf(name, sizeof name, "%s B%d T%d C%d NH%d", backward ? "backward" : "forward", s.B,
                s.T, s.C, s.NH);
  const std::string tag = name;
  auto check = [&](bool ok, const std::string& what) {
    ++tally.cases;
    if (!ok) tally.fail(tag + ": " + what);
  };
  const size_t n = size_t(s.B) * s.T * 3 * s.C;
  const std::vector<uint16_t> src = to_bf16(randn(n, seed, 1.0f));
  const std::vector<uint16_t> dinp0 =
      backward ? to_bf16(randn(n, seed + 1, 1.0f)) : std::vector<uint16_t>(n, 0xFFFF);  // NaN
  Guarded<uint16_t> d_src(src), d_dst(dinp0);
  emu::sequential = true;
  const cudaError_t e =
      backward ? ec::rope_backward(bf16p(d_dst), bf16p(d_src), s.B, s.T, s.C, s.NH, kTheta)
               : ec::rope_forward(bf16p(d_dst), bf16p(d_src), s.B, s.T, s.C, s.NH, kTheta);
  emu::sequential = false;
  check(e == cudaSuccess, "launch");
  const std::vector<float> x = widen(src);
  std::vector<float> ref = backward ? widen(dinp0) : std::vector<float>(n);
  if (backward)
    eco::cpu::rope_backward(ref.data(), x.data(), s.B, s.T, s.C, s.NH, kTheta);
  else
    eco::cpu::rope_forward(ref.data(), x.data(), s.B, s.T, s.C, s.NH, kTheta);
  const std::vector<uint16_t> got = d_dst.host();
  long first = -1;
  const long k = differ(got, to_bf16(ref), &first);
  check(k == 0, std::to_string(k) + " differ from the CPU twin, first " + std::to_string(first));
  check(d_src.host() == src && d_src.guards_intact() && d_dst.guards_intact(),
        "src changed or guards broken");
  const double worst =
      worst_vs_double(got, x, backward ? widen(dinp0) : std::vector<float>(), s, backward);
  check(worst == 0, "off the float64 rotation, worst error / tolerance " + std::to_string(worst));
}

}  // namespace

TEST(EmuRope, ForwardEqualsCpuTwinRoundedOnce) {
  Tally tally;
  uint64_t seed = 1;
  for (const Shape& s : kShapes) rope_case(tally, s, false, seed += 10);
  EXPECT_GT(tally.cases, 0);
}

TEST(EmuRope, BackwardAccumulatesLikeCpuTwinBitwise) {
  Tally tally;
  uint64_t seed = 100;
  for (const Shape& s : kShapes) rope_case(tally, s, true, seed += 10);
  EXPECT_GT(tally.cases, 0);
}

namespace {

struct GqaShape {
  int B, T, NH, KVH, hs;
  float theta;
};

void rope_gqa_case(Tally& tally, const GqaShape& s, bool backward, uint64_t seed) {
  char name[96];
  std::snprintf(name, sizeof name, "gqa %s B%d T%d NH%d KVH%d hs%d theta %g",
                backward ? "backward" : "forward", s.B, s.T, s.NH, s.KVH, s.hs, double(s.theta));
  const std::string tag = name;
  auto check = [&](bool ok, const std::string& what) {
    ++tally.cases;
    if (!ok) tally.fail(tag + ": " + what);
  };
  const size_t n = size_t(s.B) * s.T * (s.NH + 2 * s.KVH) * s.hs;
  const std::vector<uint16_t> src = to_bf16(randn(n, seed, 1.0f));
  const std::vector<uint16_t> dinp0 =
      backward ? to_bf16(randn(n, seed + 1, 1.0f)) : std::vector<uint16_t>(n, 0xFFFF);  // NaN
  Guarded<uint16_t> d_src(src), d_dst(dinp0);
  emu::sequential = true;
  const cudaError_t e =
      backward ? ec::rope_backward_gqa(bf16p(d_dst), bf16p(d_src), s.B, s.T, s.NH, s.KVH, s.hs,
                                       s.theta)
               : ec::rope_forward_gqa(bf16p(d_dst), bf16p(d_src), s.B, s.T, s.NH, s.KVH, s.hs,
                                      s.theta);
  emu::sequential = false;
  check(e == cudaSuccess, "launch");
  const std::vector<float> x = widen(src);
  std::vector<float> ref = backward ? widen(dinp0) : std::vector<float>(n);
  if (backward)
    eco::cpu::rope_backward_gqa(ref.data(), x.data(), s.B, s.T, s.NH, s.KVH, s.hs, s.theta);
  else
    eco::cpu::rope_forward_gqa(ref.data(), x.data(), s.B, s.T, s.NH, s.KVH, s.hs, s.theta);
  long first = -1;
  const long k = differ(d_dst.host(), to_bf16(ref), &first);
  check(k == 0, std::to_string(k) + " differ from the CPU twin, first " + std::to_string(first));
  check(d_src.host() == src && d_src.guards_intact() && d_dst.guards_intact(),
        "src changed or guards broken");
}

const GqaShape kGqaShapes[] = {{2, 7, 4, 1, 16, 1e4f},
                               {1, 9, 4, 2, 6, 1e6f},
                               {1, 5, 2, 1, 256, 1e6f},
                               {1, 3, 2, 2, 8, 1e4f}};

}  // namespace

TEST(EmuRope, GroupedQueryRowsEqualCpuTwinBitwise) {
  Tally tally;
  uint64_t seed = 300;
  for (const GqaShape& s : kGqaShapes) {
    rope_gqa_case(tally, s, false, seed += 10);
    rope_gqa_case(tally, s, true, seed += 10);
  }
  EXPECT_GT(tally.cases, 0);
}

// As tests/gpu: an odd head size (36 / 4 = 9) and out == inp are refused before any launch.
TEST(EmuRope, RefusesOddHeadSizeAndAliasing) {
  const long launches = emu::launches;
  bf16* a = reinterpret_cast<bf16*>(16);  // never dereferenced
  bf16* b = reinterpret_cast<bf16*>(32);
  EXPECT_EQ(ec::rope_forward(b, a, 1, 1, 36, 4, kTheta), cudaErrorInvalidValue);
  EXPECT_EQ(ec::rope_forward(a, a, 1, 1, 36, 6, kTheta), cudaErrorInvalidValue);
  EXPECT_EQ(ec::rope_backward(a, a, 1, 1, 36, 6, kTheta), cudaErrorInvalidValue);
  EXPECT_EQ(ec::rope_forward(b, a, 1, 1, 36, 0, kTheta), cudaErrorInvalidValue);
  EXPECT_EQ(ec::rope_forward(nullptr, nullptr, 0, 1, 36, 6, kTheta), cudaSuccess);
  EXPECT_EQ(ec::rope_forward_gqa(b, a, 1, 1, 4, 1, 7, kTheta), cudaErrorInvalidValue);  // odd hs
  EXPECT_EQ(ec::rope_forward_gqa(b, a, 1, 1, 4, 0, 8, kTheta), cudaErrorInvalidValue);  // KVH 0
  EXPECT_EQ(ec::rope_backward_gqa(a, a, 1, 1, 4, 1, 8, kTheta), cudaErrorInvalidValue);
  EXPECT_EQ(emu::launches, launches);
}
