// kernels/cuda/reductions.cu (emulated) sum_squares: against a long double sum of the same
// squares (every fp32 square is exact in double; only the double summation order differs),
// within 1e-12 relative as tests/gpu claims, and against the CPU twin within the same bound;
// the same bits on a second run and with the stage-1 blocks reversed (the order depends on n
// only); *out is written, not accumulated (pre-filled with NaN); scratch past the used partials
// is never read (NaN there would show) and nothing past kSumSquaresScratch is written.
// n covers 0, a partial warp, one block, several blocks with ragged tails, and the clamp to 1024
// blocks with the grid-stride loop. Threaded (shuffles and barriers): 256 threads a block.
// sum_squares_segments: each partial against the CPU twin (both double sums of exact fp32
// squares in different orders, each within (len - 1) 2^-53 sum of the exact value, so
// |gpu - cpu| <= 2 len 2^-53 sum); the same bits for a segment alone, among others, moved to a
// misaligned offset, with the blocks reversed and with 2 blocks striding over the segments.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "emu_common.h"
#include "sweep.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cuda/reductions.cuh"

namespace {

using namespace emuh;
namespace ec = eco::cuda;

struct Result {
  double value;
  bool ok;  // launch succeeded, guards intact, x unchanged
};

Result run(const std::vector<float>& x, bool reversed) {
  Guarded<float> d_x(x);
  Guarded<double> out(std::vector<double>{std::nan("")});
  Guarded<double> scratch(std::vector<double>(ec::kSumSquaresScratch, std::nan("")));
  emu::reverse_blocks = reversed;
  const cudaError_t e = ec::sum_squares(out.data(), d_x.data(), int64_t(x.size()), scratch.data());
  emu::reverse_blocks = false;
  return {out.host()[0],
          e == cudaSuccess && out.guards_intact() && scratch.guards_intact() && d_x.host() == x};
}

void sum_case(Tally& tally, int64_t n, bool rerun, uint64_t seed) {
  char tag[48];
  std::snprintf(tag, sizeof tag, "n%ld", long(n));
  auto check = [&](bool ok, const std::string& what) {
    ++tally.cases;
    if (!ok) tally.fail(std::string(tag) + ": " + what);
  };
  std::vector<float> x = randn(size_t(n), seed, 0.01f);
  // A subnormal input; the last element large (a dropped tail shows); once a square near 1e61,
  // which would hide everything else.
  if (n > 3) x[2] = 1e-40f, x[size_t(n) - 1] = 100.0f;
  if (n == 1000) x[1] = 3e30f;
  const Result got = run(x, false);
  check(got.ok, "launch, guards or x changed");
  long double ref = 0;
  for (float v : x) ref += (long double)(double(v) * double(v));
  const double cpu = eco::cpu::sum_squares(x.data(), n);
  check(std::isfinite(got.value), "not finite");
  char what[160];
  std::snprintf(what, sizeof what, "got %.17g, long double %.17Lg, CPU twin %.17g", got.value, ref,
                cpu);
  check(std::fabs(got.value - double(ref)) <= 1e-12 * double(ref),
        std::string("vs long double: ") + what);
  check(std::fabs(got.value - cpu) <= 1e-12 * cpu, std::string("vs the CPU twin: ") + what);
  if (n == 0) check(got.value == 0.0, "n = 0 must write 0");
  if (rerun) {  // run to run, and with the blocks in reverse order
    const Result again = run(x, false), rev = run(x, true);
    check(std::memcmp(&again.value, &got.value, sizeof(double)) == 0, "second run differs");
    check(std::memcmp(&rev.value, &got.value, sizeof(double)) == 0, "reversed blocks differ");
  }
}

}  // namespace

// 4096 elements a block (16 a thread); reruns only with several blocks.
TEST(EmuReductions, SumSquaresMatchesLongDoubleAndCpuTwin) {
  Tally tally;
  uint64_t seed = 1;
  for (int64_t n : {0, 1, 31, 1000, 4096, 4097, 70001}) sum_case(tally, n, n > 4096, seed += 10);
  EXPECT_GT(tally.cases, 0);
}

// 1024 * 4096 + 5 elements: the clamp to 1024 blocks, and the grid-stride loop that the gradient
// norm of a real model runs (5 s alone in the emulator, 30 s beside another test under ctest -j2:
// label exhaustive, `ctest -L exhaustive`; skipped in the default run).
TEST(EmuReductions, SumSquaresPastTheBlockClampTakesTheStrideLoop) {
  if (!emuh::full_sweep()) GTEST_SKIP() << "exhaustive only (ECO_EMU_FULL=1)";
  Tally tally;
  sum_case(tally, int64_t(1024) * 4096 + 5, false, 99);
  EXPECT_GT(tally.cases, 0);
}

TEST(EmuReductions, SumSquaresRefusesBadArguments) {
  const long launches = emu::launches;
  double* d = reinterpret_cast<double*>(16);  // never dereferenced
  const float* x = reinterpret_cast<const float*>(16);
  EXPECT_EQ(ec::sum_squares(d, x, -1, d), cudaErrorInvalidValue);
  EXPECT_EQ(ec::sum_squares(nullptr, x, 5, d), cudaErrorInvalidValue);
  EXPECT_EQ(ec::sum_squares(d, x, 5, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(ec::sum_squares(d, nullptr, 5, d), cudaErrorInvalidValue);
  EXPECT_EQ(emu::launches, launches);
}

// ---- sum_squares_segments ---------------------------------------------------------------------
namespace {

constexpr int64_t kSegN = 4000;
// Empty, one element, a partial warp, exactly one block's stride, longer than the block with a
// ragged tail, a few thousand elements, overlapping, and the last element.
const std::vector<eco::SumSegment> kSegs = {{0, 0},    {5, 1},       {7, 31},      {40, 256},
                                            {300, 700}, {1000, 2999}, {600, 1200}, {kSegN - 1, 1}};

// Values over 2^-6 .. 2^6 in magnitude, so that the summation order changes the bits.
std::vector<float> spread(size_t n, uint64_t seed) {
  std::vector<float> x = randn(n, seed, 1.0f);
  std::mt19937_64 g(seed + 1);
  std::uniform_int_distribution<int> e(-6, 6);
  for (auto& v : x) v = std::ldexp(v, e(g));
  return x;
}

struct Partials {
  std::vector<double> out;
  bool ok;  // launch succeeded, guards intact, x and the table unchanged
};

Partials run_segments(const std::vector<float>& x, const std::vector<eco::SumSegment>& segs,
                      bool reversed = false, int max_blocks = ec::kSumSegmentsMaxBlocks) {
  Guarded<float> d_x(x);
  Guarded<eco::SumSegment> d_segs(segs);
  Guarded<double> out(std::vector<double>(segs.size(), std::nan("")));
  emu::reverse_blocks = reversed;
  const cudaError_t e = ec::sum_squares_segments(out.data(), d_x.data(), d_segs.data(),
                                                 int64_t(segs.size()), nullptr, max_blocks);
  emu::reverse_blocks = false;
  const std::vector<eco::SumSegment> segs_after = d_segs.host();
  const bool table_same =
      std::memcmp(segs_after.data(), segs.data(), segs.size() * sizeof(eco::SumSegment)) == 0;
  return {out.host(), e == cudaSuccess && out.guards_intact() && d_x.guards_intact() &&
                          d_x.host() == x && table_same};
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

}  // namespace

TEST(EmuReductions, SumSquaresSegmentsMatchCpuTwin) {
  const std::vector<float> x = spread(size_t(kSegN), 21);
  const Partials got = run_segments(x, kSegs);
  ASSERT_TRUE(got.ok) << "launch, guards, x or the table changed";
  std::vector<double> cpu(kSegs.size());
  eco::cpu::sum_squares_segments(cpu.data(), x.data(), kSegs.data(), int64_t(kSegs.size()));
  for (size_t k = 0; k < kSegs.size(); ++k) {
    const double tol = 2.0 * double(kSegs[k].length) * std::ldexp(1.0, -53) * cpu[k];
    EXPECT_NEAR(got.out[k], cpu[k], tol) << "segment " << k << " (offset " << kSegs[k].offset
                                         << ", length " << kSegs[k].length << ")";
  }
  EXPECT_EQ(got.out[0], 0.0) << "an empty segment must write 0";
  EXPECT_EQ(got.out[1], double(x[5]) * double(x[5])) << "one element: its square";
}

TEST(EmuReductions, SumSquaresSegmentAloneAmongOthersOrMovedGivesTheSameBits) {
  const std::vector<float> x = spread(size_t(kSegN), 22);
  const Partials all = run_segments(x, kSegs);
  ASSERT_TRUE(all.ok);
  // Reversed blocks, and 2 blocks striding over the 8 segments.
  const Partials rev = run_segments(x, kSegs, /*reversed=*/true);
  const Partials strided = run_segments(x, kSegs, false, /*max_blocks=*/2);
  ASSERT_TRUE(rev.ok && strided.ok);
  // Every segment moved one element on (its start no longer where it was relative to 16 bytes).
  std::vector<float> shifted(x.size() + 1, 7.0f);
  std::copy(x.begin(), x.end(), shifted.begin() + 1);
  std::vector<eco::SumSegment> moved = kSegs;
  for (auto& g : moved) g.offset += 1;
  const Partials there = run_segments(shifted, moved);
  ASSERT_TRUE(there.ok);
  for (size_t k = 0; k < kSegs.size(); ++k) {
    const Partials alone = run_segments(x, {kSegs[k]});
    ASSERT_TRUE(alone.ok);
    EXPECT_TRUE(same_bits(alone.out[0], all.out[k])) << "segment " << k << " alone";
    EXPECT_TRUE(same_bits(rev.out[k], all.out[k])) << "segment " << k << ", reversed blocks";
    EXPECT_TRUE(same_bits(strided.out[k], all.out[k])) << "segment " << k << ", 2 blocks";
    EXPECT_TRUE(same_bits(there.out[k], all.out[k])) << "segment " << k << ", moved";
  }
}

TEST(EmuReductions, SumSquaresSegmentsRefusesBadArguments) {
  const long launches = emu::launches;
  double* d = reinterpret_cast<double*>(16);  // never dereferenced
  const float* x = reinterpret_cast<const float*>(16);
  const auto* segs = reinterpret_cast<const eco::SumSegment*>(16);
  EXPECT_EQ(ec::sum_squares_segments(d, x, segs, -1), cudaErrorInvalidValue);
  EXPECT_EQ(ec::sum_squares_segments(nullptr, x, segs, 3), cudaErrorInvalidValue);
  EXPECT_EQ(ec::sum_squares_segments(d, x, nullptr, 3), cudaErrorInvalidValue);
  EXPECT_EQ(ec::sum_squares_segments(d, x, segs, 3, nullptr, 0), cudaErrorInvalidValue);
  EXPECT_EQ(ec::sum_squares_segments(d, x, segs, 3, nullptr, ec::kSumSegmentsMaxBlocks + 1),
            cudaErrorInvalidValue);
  EXPECT_EQ(ec::sum_squares_segments(nullptr, nullptr, nullptr, 0), cudaSuccess);  // nothing
  EXPECT_EQ(emu::launches, launches);
}
