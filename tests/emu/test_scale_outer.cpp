// kernels/cuda/gemm.cu's scale_outer_kernel through scale_outer_to_bf16 (emulated):
// out (rows, cols) = bf16(acc * row_scales[r] * col_scales[c] (+ bias[c])) against a plain host
// loop, bit for bit, and against double within bf16 rounding; rows up to 140000 (> 65535: the
// grid.y stride loop runs 2-3 times), bias null and non-null, special accumulators (inf, -0,
// tiny, NaN); guards around out; zero-size and invalid calls. The kernel has no barrier, so most
// cases run the emulator's sequential mode; small ones also run threaded and with the blocks
// reversed, which must give the same bits.
#include <cmath>
#include <string>
#include <vector>

#include "emu_common.h"
#include "kernels/cuda/gemm.h"

namespace {

using namespace emuh;
using bf16 = __nv_bfloat16;

void run(Tally& tally, int rows, int cols, bool with_bias, bool threaded, uint64_t seed) {
  const std::string tag = "rows " + std::to_string(rows) + " cols " + std::to_string(cols) +
                          (with_bias ? " bias" : " no-bias") +
                          (threaded ? " threaded" : " sequential");
  const size_t n = size_t(rows) * cols;
  std::vector<float> acc = randn(n, seed, 200.0f);
  if (n > 4) {  // a few special accumulators
    acc[0] = INFINITY;
    acc[1] = -0.0f;
    acc[2] = 1e-30f;
    acc[3] = std::nanf("");
  }
  std::vector<float> rs = randn(size_t(rows), seed + 1, 0.3f, 1.0f),
                     cs = randn(size_t(cols), seed + 2, 0.002f, 0.01f);
  for (auto& x : rs) x = std::fabs(x) + 1e-3f;
  const std::vector<uint16_t> bias = to_bf16(randn(size_t(cols), seed + 3, 1.0f));
  Guarded<float> d_acc(acc), d_rs(rs), d_cs(cs);
  Guarded<uint16_t> d_bias(bias), d_out(n);
  emu::sequential = !threaded;
  const cudaError_t e = eco::cuda::scale_outer_to_bf16(
      reinterpret_cast<bf16*>(d_out.data()), d_acc.data(), d_rs.data(), d_cs.data(),
      with_bias ? reinterpret_cast<const bf16*>(d_bias.data()) : nullptr, rows, cols);
  std::vector<uint16_t> rev;
  if (threaded) {  // the same launch with the blocks in reverse order
    Guarded<uint16_t> o2(n);
    emu::reverse_blocks = true;
    eco::cuda::scale_outer_to_bf16(
        reinterpret_cast<bf16*>(o2.data()), d_acc.data(), d_rs.data(), d_cs.data(),
        with_bias ? reinterpret_cast<const bf16*>(d_bias.data()) : nullptr, rows, cols);
    emu::reverse_blocks = false;
    rev = o2.host();
  }
  emu::sequential = false;
  std::vector<uint16_t> ref(n);
  long bad_double = 0;
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      const size_t i = size_t(r) * cols + c;
      float v = acc[i] * rs[size_t(r)] * cs[size_t(c)];
      if (with_bias) v += bf(bias[size_t(c)]);
      ref[i] = eco::float_to_bf16(v);
      const double d =
          double(acc[i]) * rs[size_t(r)] * cs[size_t(c)] + (with_bias ? bf(bias[size_t(c)]) : 0.0);
      // bf16 rounding of the result (2^-8 relative) plus the fp32 roundings of the product
      // before the bias is added (which cancellation can make large relative to the result)
      const double p = std::fabs(double(acc[i]) * rs[size_t(r)] * cs[size_t(c)]);
      if (std::isfinite(d) &&
          std::fabs(bf(ref[i]) - d) > std::fabs(d) * 0.0040 + p * 0x1p-22 + 1e-30)
        ++bad_double;
    }
  ++tally.cases;
  long first = -1;
  const std::vector<uint16_t> out = d_out.host();
  const long k = differ(out, ref, &first);
  std::string bad;
  if (e != cudaSuccess) bad += " launch error";
  if (k) bad += " " + std::to_string(k) + " differ, first " + std::to_string(first);
  if (!d_out.guards_intact()) bad += " guards";
  if (threaded && differ(rev, out) != 0) bad += " reversed differs";
  if (bad_double) bad += " " + std::to_string(bad_double) + " off the double reference";
  if (!bad.empty()) tally.fail(tag + ":" + bad);
}
}  // namespace

TEST(EmuScaleOuter, MatchesHostLoopBitwise) {
  Tally tally;
  uint64_t seed = 7;
  for (bool bias : {false, true}) {
    run(tally, 1, 1, bias, true, seed += 10);
    run(tally, 3, 5, bias, true, seed += 10);
    run(tally, 7, 300, bias, true, seed += 10);
    run(tally, 2, 513, bias, true, seed += 10);
    run(tally, 7, 300, bias, false, seed += 10);
    run(tally, 65535, 3, bias, false, seed += 10);
    run(tally, 65536, 1, bias, false, seed += 10);
    run(tally, 140000, 2, bias, false, seed += 10);
  }
  run(tally, 70000, 257, true, false, seed += 10);
  EXPECT_GT(tally.cases, 0);
}

TEST(EmuScaleOuter, RefusesNegativeSizesAndAcceptsEmpty) {
  EXPECT_EQ(eco::cuda::scale_outer_to_bf16(nullptr, nullptr, nullptr, nullptr, nullptr, 0, 5),
            cudaSuccess);
  EXPECT_EQ(eco::cuda::scale_outer_to_bf16(nullptr, nullptr, nullptr, nullptr, nullptr, 5, 0),
            cudaSuccess);
  EXPECT_NE(eco::cuda::scale_outer_to_bf16(nullptr, nullptr, nullptr, nullptr, nullptr, -1, 5),
            cudaSuccess);
  EXPECT_NE(eco::cuda::scale_outer_to_bf16(nullptr, nullptr, nullptr, nullptr, nullptr, 5, 5),
            cudaSuccess);
}
