// kernels/cuda/convert.cu (emulated), bit for bit against the CPU equivalents:
//  - bf16_to_f32: every bf16 bit pattern (NaNs included) against eco::bf16_to_float, over
//    2^24 + 4099 elements (the 65536-block grid clamp, so the grid-stride loop runs twice).
//  - round_to_bf16_f32: against the CPU backend's round_to_bf16 (fp32 specials, ties, overflow to
//    inf, subnormals, NaN), in place and out of place.
//  - dequantize / dequantize_bf16: against eco::dequantize (kernels/cpu/quantize.h; the bf16 one rounded
//    once with eco::float_to_bf16), every format x granularity, ragged shapes, codes from the CPU
//    quantizer and raw random code bytes (every code, NaN / inf codes included).
//  - cast_e4m3_rows: against the CPU backend's cast_activations(E4M3Row) on the widened rows,
//    rounded once to bf16; rows of zeros, inf, NaN; C ragged against the 256-thread block; in
//    place; and equal to quantize_cast_e4m3_rows' x_cast (quantize.cu) where that applies.
// Outputs NaN-poisoned, with guard bands. The element-wise kernels run sequentially; the row cast
// (a block max) runs threaded.
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "emu_common.h"
#include "kernels/cuda/convert.cuh"
#include "kernels/cuda/quantize.cuh"
#include "base/backend.h"
#include "kernels/cpu/quantize.h"

namespace {

using namespace emuh;
using bf16 = __nv_bfloat16;
namespace ec = eco::cuda;
using eco::Granularity;
using eco::QFormat;

eco::Tensor f32_view(float* p, int64_t n) { return eco::Tensor{p, {n}, eco::DType::F32}; }

std::vector<float> widen(const std::vector<uint16_t>& x) {
  std::vector<float> v(x.size());
  for (size_t i = 0; i < x.size(); ++i) v[i] = bf(x[i]);
  return v;
}

}  // namespace

TEST(EmuConvert, Bf16ToF32EveryPatternExact) {
  const int64_t n = (int64_t(1) << 24) + 4099;
  std::vector<uint16_t> in(static_cast<size_t>(n));
  for (size_t i = 0; i < in.size(); ++i) in[i] = uint16_t(i * 40503u);  // all 65536, permuted
  Guarded<uint16_t> d_in(in);
  Guarded<float> d_out{static_cast<size_t>(n)};  // NaN (0xFFFFFFFF) until written
  emu::sequential = true;
  EXPECT_EQ(ec::bf16_to_f32(d_out.data(), bf16p(d_in), n), cudaSuccess);
  emu::sequential = false;
  std::vector<float> ref(in.size());
  for (size_t i = 0; i < in.size(); ++i) ref[i] = eco::bf16_to_float(in[i]);
  long first = -1;
  EXPECT_EQ(differ(d_out.host(), ref, &first), 0) << "first " << first;
  EXPECT_TRUE(d_out.guards_intact() && d_in.guards_intact());
}

TEST(EmuConvert, RoundToBf16F32EqualsCpuBackendBitwise) {
  auto be = eco::make_cpu_backend();
  emu::sequential = true;
  uint64_t seed = 1;
  for (int64_t n : {1, 7, 257, 100003})
    for (bool in_place : {false, true}) {
      std::vector<float> x = randn(size_t(n), seed += 10, 10.0f);
      // ties (0x3f808000 rounds to even: down; 0x3f818000: up), overflow to inf, max finite bf16,
      // subnormals, NaN, inf, -0.
      const uint32_t specials[] = {0x3f808000u, 0x3f818000u, 0x7f7fffffu, 0x7f7f7fffu, 0x00000001u,
                                   0x807fffffu, 0x7fc00001u, 0xff800000u, 0x80000000u};
      for (size_t k = 0; k < 9 && k < x.size(); ++k)
        x[x.size() - 1 - k] = eco::f32_from_bits(specials[k]);
      Guarded<float> d_in(x), d_out{size_t(n)};
      float* out = in_place ? d_in.data() : d_out.data();
      EXPECT_EQ(ec::round_to_bf16_f32(out, d_in.data(), n), cudaSuccess);
      std::vector<float> ref(x.size());
      be->round_to_bf16(f32_view(ref.data(), n), f32_view(x.data(), n), n);
      long first = -1;
      const long k = differ(in_place ? d_in.host() : d_out.host(), ref, &first);
      EXPECT_EQ(k, 0) << "n " << n << (in_place ? " in place" : "") << " first " << first;
      if (!in_place) {
        EXPECT_EQ(differ(d_in.host(), x), 0) << "input changed";
      }
      EXPECT_TRUE(d_in.guards_intact() && d_out.guards_intact());
    }
  emu::sequential = false;
}

TEST(EmuConvert, DequantizeEqualsCpuDequantizeBitwise) {
  Tally tally;
  const std::pair<int64_t, int64_t> shapes[] = {{1, 1}, {7, 33}, {5, 30}, {129, 130}, {9, 1030}};
  uint64_t seed = 100;
  emu::sequential = true;
  for (QFormat f : {QFormat::E4M3, QFormat::E5M2, QFormat::INT8, QFormat::INT4})
    for (Granularity g : {Granularity::PerRow, Granularity::PerTensor, Granularity::Block128})
      for (bool raw_codes : {false, true})
        for (auto [rows, cols] : shapes) {
          const int64_t n = rows * cols;
          std::vector<uint8_t> codes(size_t(eco::code_bytes(f, n)));
          std::vector<float> scales(size_t(eco::num_scales(g, rows, cols)));
          eco::QTensor q = eco::qtensor_view(f, g, rows, cols, codes.data(), scales.data());
          if (raw_codes) {  // every byte, scales of either sign and a zero
            std::mt19937_64 r(++seed);
            for (auto& c : codes) c = uint8_t(r());
            for (auto& s : scales) s = float(int64_t(r() % 2001) - 1000) * 1e-3f;
          } else {
            const std::vector<float> x = randn(size_t(n), ++seed, 0.05f);
            eco::quantize(x.data(), q, eco::Rounding::RTN, 7, 3, 11);
          }
          std::vector<float> ref(static_cast<size_t>(n));
          eco::dequantize(q, ref.data());
          Guarded<uint8_t> d_codes(codes);
          Guarded<float> d_scales(scales), d_out{size_t(n)};
          Guarded<uint16_t> d_out16{size_t(n)};
          const cudaError_t e1 =
              ec::dequantize(d_out.data(), d_codes.data(), d_scales.data(), rows, cols, f, g);
          const cudaError_t e2 = ec::dequantize_bf16(bf16p(d_out16), d_codes.data(),
                                                     d_scales.data(), rows, cols, f, g);
          ++tally.cases;
          long first = -1, first16 = -1;
          const long k = differ(d_out.host(), ref, &first);
          const long k16 = differ(d_out16.host(), to_bf16(ref), &first16);
          if (e1 != cudaSuccess || e2 != cudaSuccess || k || k16 || !d_out.guards_intact() ||
              !d_out16.guards_intact() || d_codes.host() != codes) {
            char what[160];
            std::snprintf(what, sizeof what,
                          "%s %s %s %ldx%ld: f32 %ld differ (first %ld), bf16 %ld (first %ld)",
                          eco::qformat_name(f), eco::granularity_name(g),
                          raw_codes ? "raw" : "quantized", long(rows), long(cols), k, first, k16,
                          first16);
            tally.fail(what);
          }
        }
  emu::sequential = false;
  EXPECT_GT(tally.cases, 0);
}

namespace {

void cast_case(Tally& tally, eco::Backend& be, int N, int C, bool in_place, uint64_t seed) {
  char name[64];
  std::snprintf(name, sizeof name, "cast_e4m3_rows %dx%d%s", N, C, in_place ? " in place" : "");
  const std::string tag = name;
  auto check = [&](bool ok, const std::string& what) {
    ++tally.cases;
    if (!ok) tally.fail(tag + ": " + what);
  };
  const size_t n = size_t(N) * C;
  std::vector<uint16_t> x = to_bf16(randn(n, seed, 3.0f));
  // Special rows (when there are rows enough): zeros; an inf; a NaN (ignored by the max);
  // tiny values (subnormal scale territory).
  if (N >= 4) {
    for (int c = 0; c < C; ++c) x[size_t(c)] = c % 2 ? 0x8000 : 0x0000;
    x[size_t(C) + size_t(C / 2)] = 0x7f80;
    x[2 * size_t(C) + size_t(C - 1)] = 0x7fc0;
    for (int c = 0; c < C; ++c) x[3 * size_t(C) + size_t(c)] = uint16_t(0x0001 + c % 7);
  }
  Guarded<uint16_t> d_x(x), d_out{n};  // out: NaN
  bf16* out = in_place ? bf16p(d_x) : bf16p(d_out);
  check(ec::cast_e4m3_rows(out, bf16p(d_x), N, C) == cudaSuccess, "launch");
  // The CPU backend on the widened rows, rounded once.
  std::vector<float> xf = widen(x), ref(n);
  be.cast_activations(eco::Tensor{ref.data(), {N, C}, eco::DType::F32},
                      eco::Tensor{xf.data(), {N, C}, eco::DType::F32}, N, C, eco::ActCast::E4M3Row);
  const std::vector<uint16_t> got = in_place ? d_x.host() : d_out.host();
  long first = -1;
  const long k = differ(got, to_bf16(ref), &first);
  check(k == 0, std::to_string(k) + " differ from the CPU backend, first " + std::to_string(first));
  if (!in_place) check(d_x.host() == x, "x changed");
  check(d_x.guards_intact() && d_out.guards_intact(), "guards");
  if (C % 8 == 0 && !in_place) {  // quantize_cast_e4m3_rows' x_cast: the same bits
    Guarded<uint16_t> cast{n};
    Guarded<uint8_t> codes{n};
    Guarded<float> scales{size_t(N)};
    check(ec::quantize_cast_e4m3_rows(codes.data(), scales.data(), bf16p(cast), bf16p(d_x), N, C) ==
              cudaSuccess,
          "quantize_cast_e4m3_rows launch");
    check(differ(cast.host(), got) == 0, "quantize_cast_e4m3_rows' x_cast differs");
  }
}

}  // namespace

TEST(EmuConvert, CastE4m3RowsEqualsCpuBackendRoundedOnce) {
  Tally tally;
  auto be = eco::make_cpu_backend();
  uint64_t seed = 500;
  for (int C : {1, 7, 255, 256, 257, 1000, 2056})
    for (bool in_place : {false, true})
      cast_case(tally, *be, C > 1000 ? 4 : 5, C, in_place, seed += 10);
  cast_case(tally, *be, 1, 8, false, seed += 10);
  EXPECT_GT(tally.cases, 0);
}

TEST(EmuConvert, RefusesBadShapesAndNullBuffers) {
  const long launches = emu::launches;
  float* f = reinterpret_cast<float*>(16);  // never dereferenced
  bf16* b = reinterpret_cast<bf16*>(16);
  const uint8_t* c = reinterpret_cast<const uint8_t*>(16);
  EXPECT_EQ(ec::bf16_to_f32(f, nullptr, 5), cudaErrorInvalidValue);
  EXPECT_EQ(ec::bf16_to_f32(f, b, -1), cudaErrorInvalidValue);
  EXPECT_EQ(ec::bf16_to_f32(nullptr, nullptr, 0), cudaSuccess);
  EXPECT_EQ(ec::round_to_bf16_f32(nullptr, f, 5), cudaErrorInvalidValue);
  EXPECT_EQ(ec::dequantize(f, c, f, 3, 0, QFormat::E4M3, Granularity::PerRow),
            cudaErrorInvalidValue);
  EXPECT_EQ(ec::dequantize(f, c, nullptr, 3, 4, QFormat::E4M3, Granularity::PerRow),
            cudaErrorInvalidValue);
  EXPECT_EQ(ec::dequantize_bf16(b, c, f, -1, 4, QFormat::INT4, Granularity::PerRow),
            cudaErrorInvalidValue);
  EXPECT_EQ(ec::dequantize(nullptr, nullptr, nullptr, 0, 4, QFormat::INT8, Granularity::PerTensor),
            cudaSuccess);
  EXPECT_EQ(ec::cast_e4m3_rows(b, b, 2, 0), cudaErrorInvalidValue);
  EXPECT_EQ(ec::cast_e4m3_rows(b, nullptr, 2, 8), cudaErrorInvalidValue);
  EXPECT_EQ(ec::cast_e4m3_rows(b, b, int64_t(1) << 31, 8), cudaErrorInvalidValue);
  EXPECT_EQ(ec::cast_e4m3_rows(nullptr, nullptr, 0, 8), cudaSuccess);
  EXPECT_EQ(emu::launches, launches);
}
