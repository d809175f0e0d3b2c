// Backend::sum_squares_segments on the CPU backends (fp32 and the fp64 gradient-check one): each
// partial against a long double sum of the same squares, within len * 2^-52 of the sum (the
// recursive-summation bound for at most len double additions and, in fp64, one rounding per
// square: <= len * 2^-53 * sum, doubled for margin; the long double reference's own error is
// ~2^-11 of that); and bit for bit the same partial for a segment asked alone, among others, at
// another offset, and under 1 or 2 OpenMP threads (the order is fixed by the segment's length).
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "base/error.h"
#include "base/backend.h"

namespace eco {
namespace {

// Values over 2^-8 .. 2^8 in magnitude, so that the order of the additions changes the bits.
template <class T>
std::vector<T> spread_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal;
  std::uniform_int_distribution<int> exponent(-8, 8);
  std::vector<T> v(n);
  for (auto& x : v) x = T(std::ldexp(normal(rng), exponent(rng)));
  return v;
}

template <class T>
Tensor upload(Backend& be, const std::vector<T>& h) {
  const DType dtype = std::is_same_v<T, double> ? DType::F64 : DType::F32;
  Tensor t = be.alloc("x", {int64_t(h.size())}, dtype, MemCategory::Workspace);
  be.copy_from_host(t, h.data());
  return t;
}

std::vector<double> partials(Backend& be, const Tensor& x, const std::vector<SumSegment>& segs) {
  std::vector<double> out(segs.size(), std::numeric_limits<double>::quiet_NaN());
  be.sum_squares_segments(x, segs, out.data());
  return out;
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

constexpr int64_t kN = 200003;
// Empty, one element, a partial lane group, whole lane groups with ragged tails, overlapping
// segments, a misaligned start, the tensor's last element and the whole tensor.
const std::vector<SumSegment> kSegments = {
    {0, 0},     {0, 1},        {1, 7},         {8, 8},     {3, 1000},  {16, 4099},
    {500, 0},   {7, 100003},   {kN - 1, 1},    {kN, 0},    {0, kN},    {1234, 98304}};

template <class T>
void expect_partials_match_long_double(DType dtype) {
  auto be = make_cpu_backend(dtype);
  const std::vector<T> x = spread_values<T>(size_t(kN), 11);
  const std::vector<double> got = partials(*be, upload(*be, x), kSegments);
  for (size_t k = 0; k < kSegments.size(); ++k) {
    const SumSegment& g = kSegments[k];
    long double ref = 0;
    for (int64_t i = g.offset; i < g.offset + g.length; ++i)
      ref += (long double)x[size_t(i)] * (long double)x[size_t(i)];
    const double tol = double(g.length) * std::ldexp(1.0, -52) * double(ref);
    EXPECT_NEAR(got[k], double(ref), tol) << "segment " << k << " (offset " << g.offset
                                          << ", length " << g.length << ")";
    if (g.length == 0) {
      EXPECT_EQ(got[k], 0.0) << "segment " << k;
    }
  }
}

TEST(CpuSumSquaresSegments, PartialsMatchLongDoubleWithinLengthTimesEpsilon) {
  expect_partials_match_long_double<float>(DType::F32);
}

TEST(CpuSumSquaresSegments, F64BackendPartialsMatchLongDoubleWithinLengthTimesEpsilon) {
  expect_partials_match_long_double<double>(DType::F64);
}

// A segment's partial is the same bits asked alone or among others, and for the same values at
// another (misaligned) offset: the order depends on the length only.
TEST(CpuSumSquaresSegments, SegmentAloneAmongOthersOrMovedGivesTheSameBits) {
  auto be = make_cpu_backend();
  const std::vector<float> x = spread_values<float>(size_t(kN), 12);
  const Tensor t = upload(*be, x);
  const std::vector<double> all = partials(*be, t, kSegments);
  for (size_t k = 0; k < kSegments.size(); ++k) {
    const SumSegment& g = kSegments[k];
    const double alone = partials(*be, t, {g})[0];
    EXPECT_TRUE(same_bits(alone, all[k])) << "segment " << k << ": alone " << alone
                                          << " vs among others " << all[k];
    // The same values 3 elements further on in another tensor.
    std::vector<float> moved(size_t(g.length) + 3, 1e6f);
    std::copy(x.begin() + g.offset, x.begin() + g.offset + g.length, moved.begin() + 3);
    const double there = partials(*be, upload(*be, moved), {{3, g.length}})[0];
    EXPECT_TRUE(same_bits(there, all[k])) << "segment " << k << ": at offset 3 " << there
                                          << " vs " << all[k];
  }
}

TEST(CpuSumSquaresSegments, BitwiseIdenticalForOneAndTwoThreads) {
  auto be = make_cpu_backend();
  const std::vector<float> x = spread_values<float>(size_t(kN), 13);
  const Tensor t = upload(*be, x);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const std::vector<double> one = partials(*be, t, kSegments);
  omp_set_num_threads(2);
  const std::vector<double> two = partials(*be, t, kSegments);
  omp_set_num_threads(saved);
  for (size_t k = 0; k < kSegments.size(); ++k)
    EXPECT_TRUE(same_bits(one[k], two[k])) << "segment " << k << ": " << one[k] << " vs "
                                           << two[k];
}

// An empty segment writes 0 (over a NaN); an empty list writes nothing.
TEST(CpuSumSquaresSegments, EmptySegmentGivesZeroAndNoSegmentsWriteNothing) {
  auto be = make_cpu_backend();
  const Tensor t = upload(*be, spread_values<float>(16, 14));
  EXPECT_EQ(partials(*be, t, {{5, 0}, {16, 0}}), (std::vector<double>{0.0, 0.0}));
  double untouched = -1.0;
  be->sum_squares_segments(t, {}, &untouched);
  EXPECT_EQ(untouched, -1.0);
}

TEST(CpuSumSquaresSegments, SegmentOutsideTheTensorIsAnErrorNamingIt) {
  auto be = make_cpu_backend();
  const Tensor t = upload(*be, spread_values<float>(16, 15));
  double out[3];
  const std::vector<std::vector<SumSegment>> bad = {
      {{0, 4}, {4, 4}, {10, 7}},  // one past the end
      {{0, 4}, {4, 4}, {-1, 2}},  // negative offset
      {{0, 4}, {4, 4}, {2, -1}},  // negative length
      {{0, 4}, {4, 4}, {17, 0}},  // an empty segment past the end
      {{0, 4}, {4, 4}, {1, std::numeric_limits<int64_t>::max()}}};  // offset + length overflows
  for (const auto& segs : bad) {
    try {
      be->sum_squares_segments(t, segs, out);
      ADD_FAILURE() << "accepted segment (" << segs[2].offset << ", " << segs[2].length << ")";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("segment 2 (offset " + std::to_string(segs[2].offset) +
                                           ", length " + std::to_string(segs[2].length) + ")"),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace eco
