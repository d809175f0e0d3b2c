// kernels/cuda/gemm.cu's small kernels around the cuBLASLt GEMMs, and the fp32 -> bf16 conversion
// they feed (convert.cu) (emulated; scale_outer has its own test_scale_outer.cpp):
//  - f32_to_bf16: bit for bit against eco::float_to_bf16 (the CPU's rounding), fp32 specials,
//    n past the 4096-block grid clamp (the grid-stride loop).
//  - fill_rows_with_bias: every row of out (rows, cols, row stride ld) equal to the bias bits;
//    the padding columns past cols (NaN-poisoned) and the guards untouched; rows past 65535
//    (the grid.y stride loop).
//  - column_sums_accumulate: dbias (pre-filled: += checked) bit for bit against a host loop in
//    the kernel's documented order (chunks of 256 rows; within a chunk row lanes y = r % 8 summed
//    in row order, then the 8 lanes in order; the chunks in order; then added to dbias), and
//    against a float64 sum within k * 2^-24 * (sum |x| + |dbias|), k the longest chain of fp32
//    additions (32 + 8 + chunks + 1; the CPU twin, kernels/cpu/matmul.cpp, sums rows in plain
//    order, so it is not bit-comparable); the same bits with the blocks reversed; partials
//    bounds (guards around column_sum_partials(N, OC) floats, NaN-poisoned before).
// f32_to_bf16 and fill_rows run sequentially; the column sums (a block barrier) threaded.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "emu_common.h"
#include "kernels/cuda/convert.cuh"
#include "kernels/cuda/gemm.h"

namespace {

using namespace emuh;
using bf16 = __nv_bfloat16;
namespace ec = eco::cuda;

}  // namespace

TEST(EmuGemmSmallKernels, F32ToBf16EqualsCpuRoundingBitwise) {
  emu::sequential = true;
  uint64_t seed = 1;
  // 4096 blocks of 256 = 1048576 elements a grid pass: the last two take the stride loop.
  for (int64_t n : {int64_t(1), int64_t(7), int64_t(257), int64_t(100003),
                    (int64_t(1) << 20) + 1000, (int64_t(1) << 21) + 300001}) {
    std::vector<float> x = randn(size_t(n), seed += 10, 100.0f);
    const uint32_t specials[] = {0x3f808000u, 0x3f818000u, 0x7f7fffffu, 0x00000001u,
                                 0x7fc00001u, 0xff800000u, 0x80000000u, 0xff7f8000u};
    for (size_t k = 0; k < 8 && k < x.size(); ++k)
      x[x.size() - 1 - k] = eco::f32_from_bits(specials[k]);
    Guarded<float> d_x(x);
    Guarded<uint16_t> d_out{size_t(n)};  // NaN until written
    EXPECT_EQ(ec::f32_to_bf16(bf16p(d_out), d_x.data(), n), cudaSuccess);
    long first = -1;
    EXPECT_EQ(differ(d_out.host(), to_bf16(x), &first), 0) << "n " << n << " first " << first;
    EXPECT_TRUE(d_out.guards_intact()) << "n " << n;
  }
  emu::sequential = false;
}

TEST(EmuGemmSmallKernels, FillRowsWithBiasWritesRowsAndLeavesPadding) {
  emu::sequential = true;
  Tally tally;
  uint64_t seed = 100;
  const struct {
    int rows, cols;
    int64_t ld;
  } shapes[] = {{1, 1, 1}, {3, 5, 8}, {7, 300, 300}, {2, 513, 520}, {65535, 3, 4}, {140000, 2, 3}};
  for (auto [rows, cols, ld] : shapes) {
    const std::vector<uint16_t> bias = to_bf16(randn(size_t(cols), seed += 10, 1.0f));
    Guarded<uint16_t> d_bias(bias), d_out{size_t(rows) * size_t(ld)};  // NaN until written
    ++tally.cases;
    const cudaError_t e = ec::fill_rows_with_bias(bf16p(d_out), bf16p(d_bias), rows, cols, ld);
    const std::vector<uint16_t> out = d_out.host();
    long bad_rows = 0, bad_pad = 0;
    for (int r = 0; r < rows; ++r)
      for (int64_t c = 0; c < ld; ++c) {
        const uint16_t v = out[size_t(r) * size_t(ld) + size_t(c)];
        if (c < cols && v != bias[size_t(c)]) ++bad_rows;
        if (c >= cols && v != 0xFFFF) ++bad_pad;
      }
    if (e != cudaSuccess || bad_rows || bad_pad || !d_out.guards_intact()) {
      char what[128];
      std::snprintf(what, sizeof what, "%dx%d ld %ld: %ld wrong, %ld padding written", rows, cols,
                    long(ld), bad_rows, bad_pad);
      tally.fail(what);
    }
  }
  emu::sequential = false;
  EXPECT_GT(tally.cases, 0);
}

namespace {

constexpr int kChunkRows = 256, kRowLanes = 8;  // gemm.cu's column-sum blocking

// The kernels' order on the host: per column, per chunk, lanes y summing rows y, y + 8, ... in
// order, the lanes added in order from 0; the chunk sums added in order from 0; then to dbias.
std::vector<float> ordered_column_sums(const std::vector<float>& dbias0,
                                       const std::vector<uint16_t>& dout, int N, int OC) {
  std::vector<float> out = dbias0;
  const int chunks = (N + kChunkRows - 1) / kChunkRows;
  for (int col = 0; col < OC; ++col) {
    float total = 0.0f;
    for (int ch = 0; ch < chunks; ++ch) {
      const int r0 = ch * kChunkRows, r1 = std::min(N, r0 + kChunkRows);
      float chunk = 0.0f;
      for (int y = 0; y < kRowLanes; ++y) {
        float lane = 0.0f;
        for (int r = r0 + y; r < r1; r += kRowLanes) lane += bf(dout[size_t(r) * OC + col]);
        chunk += lane;
      }
      total += chunk;
    }
    out[size_t(col)] += total;
  }
  return out;
}

struct Sums {
  std::vector<float> dbias;
  bool ok;
};
Sums run_column_sums(const std::vector<float>& dbias0, const std::vector<uint16_t>& dout, int N,
                     int OC, bool reversed) {
  Guarded<float> d_dbias(dbias0);
  Guarded<uint16_t> d_dout(dout);
  Guarded<float> partials(
      std::vector<float>(size_t(ec::column_sum_partials(N, OC)), std::nanf("")));
  emu::reverse_blocks = reversed;
  const cudaError_t e =
      ec::column_sums_accumulate(d_dbias.data(), partials.data(), bf16p(d_dout), N, OC);
  emu::reverse_blocks = false;
  return {d_dbias.host(), e == cudaSuccess && d_dbias.guards_intact() && partials.guards_intact() &&
                              d_dout.host() == dout};
}

void column_sums_case(Tally& tally, int N, int OC, uint64_t seed) {
  char name[48];
  std::snprintf(name, sizeof name, "column sums N%d OC%d", N, OC);
  const std::string tag = name;
  auto check = [&](bool ok, const std::string& what) {
    ++tally.cases;
    if (!ok) tally.fail(tag + ": " + what);
  };
  // Magnitudes spread over 2^-12 .. 2^12: sums of bf16 values of one scale are mostly exact in
  // fp32, and only inexact sums tell one summation order from another.
  std::vector<float> x = randn(size_t(N) * OC, seed, 1.0f, 0.1f);
  std::mt19937_64 g(seed + 2);
  for (auto& v : x) v = std::ldexp(v, int(g() % 25) - 12);
  const std::vector<uint16_t> dout = to_bf16(x);
  // 16 finite values past OC: a stray += there would leave the 0xFF guard (a NaN) as is.
  const std::vector<float> dbias0 = randn(size_t(OC) + 16, seed + 1, 3.0f);
  const Sums got = run_column_sums(dbias0, dout, N, OC, false);
  check(got.ok, "launch, guards, partials bounds or dout changed");
  long first = -1;
  const long k = differ(got.dbias, ordered_column_sums(dbias0, dout, N, OC), &first);
  check(k == 0,
        std::to_string(k) + " differ from the ordered host loop, first " + std::to_string(first));
  const Sums rev = run_column_sums(dbias0, dout, N, OC, true);
  check(differ(rev.dbias, got.dbias) == 0, "reversed blocks differ");
  const int chunks = (N + kChunkRows - 1) / kChunkRows;
  const double chain = kChunkRows / kRowLanes + kRowLanes + chunks + 1;
  for (int col = 0; col < OC; ++col) {
    double s = dbias0[size_t(col)], mag = std::fabs(dbias0[size_t(col)]);
    for (int r = 0; r < N; ++r) {
      const double v = bf(dout[size_t(r) * OC + col]);
      s += v, mag += std::fabs(v);
    }
    if (!(std::fabs(got.dbias[size_t(col)] - s) <= chain * 0x1p-24 * mag)) {
      check(false, "off the float64 sum at column " + std::to_string(col));
      break;
    }
  }
}

}  // namespace

TEST(EmuGemmSmallKernels, ColumnSumsAccumulateInDocumentedOrder) {
  Tally tally;
  uint64_t seed = 200;
  const std::pair<int, int> shapes[] = {{1, 1},   {7, 33},    {8, 32},    {256, 64},
                                        {257, 5}, {600, 100}, {1030, 31}, {64, 1000}};
  for (auto [N, OC] : shapes) column_sums_case(tally, N, OC, seed += 10);
  EXPECT_GT(tally.cases, 0);
}

TEST(EmuGemmSmallKernels, RefuseBadArgumentsAndAcceptEmpty) {
  const long launches = emu::launches;
  bf16* b = reinterpret_cast<bf16*>(16);  // never dereferenced
  float* f = reinterpret_cast<float*>(16);
  EXPECT_EQ(ec::f32_to_bf16(b, f, -1), cudaErrorInvalidValue);
  EXPECT_EQ(ec::f32_to_bf16(b, nullptr, 3), cudaErrorInvalidValue);
  EXPECT_EQ(ec::f32_to_bf16(nullptr, nullptr, 0), cudaSuccess);
  EXPECT_EQ(ec::fill_rows_with_bias(b, b, 2, 8, 7), cudaErrorInvalidValue);  // ld < cols
  EXPECT_EQ(ec::fill_rows_with_bias(b, nullptr, 2, 8, 8), cudaErrorInvalidValue);
  EXPECT_EQ(ec::fill_rows_with_bias(nullptr, nullptr, 0, 8, 8), cudaSuccess);
  EXPECT_EQ(ec::column_sums_accumulate(f, f, b, -1, 8), cudaErrorInvalidValue);
  EXPECT_EQ(ec::column_sums_accumulate(f, nullptr, b, 3, 8), cudaErrorInvalidValue);
  EXPECT_EQ(ec::column_sums_accumulate(nullptr, nullptr, nullptr, 0, 8), cudaSuccess);
  EXPECT_EQ(ec::column_sums_accumulate(f, f, b, 65536 * kChunkRows, 8), cudaErrorInvalidValue);
  EXPECT_EQ(ec::column_sum_partials(0, 5), 0);
  EXPECT_EQ(ec::column_sum_partials(257, 5), 10);
  EXPECT_EQ(emu::launches, launches);
}
