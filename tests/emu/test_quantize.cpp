// kernels/cuda/quantize.cu (emulated) against the CPU quantizer quantize(), bit for bit: codes
// and scales of every format x granularity x rounding on ragged shapes, with guard bytes around
// the outputs that must survive. By default the 129-row shape (a second row of 128x128 tiles) runs
// under Block128 only: per row and per tensor it adds nothing but 129 blocks of 256 emulated
// threads (the sweep's most expensive cases); and each format x granularity x rounding takes
// every other one of the small shapes (1 x 1, 7 x 33, 5 x 30, 9 x 1030), the next combination the
// others, so that every shape meets every format and granularity under one rounding or the
// other. ECO_EMU_FULL=1 (label exhaustive) runs every shape under every combination.
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "emu_common.h"
#include "sweep.h"
#include "kernels/cuda/quantize.cuh"
#include "kernels/cpu/quantize.h"

using namespace eco;

TEST(EmuQuantize, EveryFormatAndGranularityMatchesCpuQuantizer) {
  emuh::Tally tally;
  const std::pair<int64_t, int64_t> shapes[] = {{1, 1}, {7, 33}, {5, 30}, {129, 130}, {9, 1030}};
  uint64_t seed = 5;
  int combo = 0;
  for (QFormat f : {QFormat::E4M3, QFormat::E5M2, QFormat::INT8, QFormat::INT4})
    for (Granularity g : {Granularity::PerRow, Granularity::PerTensor, Granularity::Block128})
      for (Rounding r : {Rounding::RTN, Rounding::SR}) {
        ++combo;
        int small = 0;  // the small shapes, counted
        for (auto [rows, cols] : shapes) {
          small += rows <= 128;
          if (f == QFormat::INT4 && g == Granularity::PerRow && cols % 2) continue;
          if (rows > 128 && g != Granularity::Block128 && !emuh::full_sweep()) continue;
          if (rows <= 128 && (small + combo) % 2 && !emuh::full_sweep()) continue;
          ++tally.cases;
          const int64_t n = rows * cols;
          std::vector<float> x = emuh::randn(size_t(n), ++seed, 0.05f);
          x[size_t(n / 2)] = 0.0f;
          std::vector<uint8_t> codes(size_t(code_bytes(f, n)));
          std::vector<float> scales(size_t(num_scales(g, rows, cols)));
          QTensor qc = qtensor_view(f, g, rows, cols, codes.data(), scales.data());
          quantize(x.data(), qc, r, 7, 3, 11);
          std::vector<uint8_t> dcodes(codes.size() + 64, 0xAB);
          std::vector<float> dscales(scales.size() + 16, -1.0f);
          std::vector<float> scratch(size_t(cuda::quantize_scratch_floats(rows, cols, g)) + 1);
          cudaError_t e;
          if (g == Granularity::PerRow)
            e = cuda::quantize_rows(x.data(), dcodes.data() + 32, dscales.data() + 8, rows, cols, f,
                                    r, 7, 3, 11);
          else
            e = cuda::quantize_matrix(x.data(), dcodes.data() + 32, dscales.data() + 8, rows, cols,
                                      f, g, r, 7, 3, 11, scratch.data());
          bool ok = e == cudaSuccess &&
                    std::memcmp(dcodes.data() + 32, codes.data(), codes.size()) == 0 &&
                    std::memcmp(dscales.data() + 8, scales.data(), scales.size() * 4) == 0;
          for (size_t i = 0; i < 32; ++i)
            ok = ok && dcodes[i] == 0xAB && dcodes[32 + codes.size() + i] == 0xAB;
          for (size_t i = 0; i < 8; ++i)
            ok = ok && dscales[i] == -1.0f && dscales[8 + scales.size() + i] == -1.0f;
          if (!ok)
            tally.fail(std::string(qformat_name(f)) + " " + granularity_name(g) +
                       (r == Rounding::SR ? " sr " : " rtn ") + std::to_string(rows) + "x" +
                       std::to_string(cols));
        }
      }
  EXPECT_GT(tally.cases, 0);
}
