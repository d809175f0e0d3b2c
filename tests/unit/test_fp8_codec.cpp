// The FP8 codecs of src/base/math/qformat.h (branch-free, made for the GPU's per-element loops)
// against their previous implementation, kept here verbatim as the reference: an explicit
// significand shifted by a variable amount (64-bit for SR), with branches. Bits must not change:
// SR decisions and codes feed checkpoints, resumed runs and the CPU/GPU bit-identity.
// What pins the SR encoder exactly: for every value, the reference's own rounding threshold T
// (round up iff bits < T) is probed at T - 1 and T, so the decision boundary is compared, not
// sampled. RTN is also checked against cuda_fp8.h in test_qformat.cpp (and, exhaustively, by its
// DISABLED test).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/rng.h"
#include "base/math/qformat.h"

namespace {

using eco::QFormat;

// ---- the reference: qformat.h's FP8 codec before 2026-11 ----------------------------------
namespace reference {

uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

uint32_t shift_round_rne(uint32_t sig, int shift) {
  if (shift >= 32) return 0;
  const uint32_t q = sig >> shift, rem = sig & ((1u << shift) - 1u), half = 1u << (shift - 1);
  return q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
}

// The SR threshold (round up iff bits < threshold) and the truncated significand.
struct SrParts {
  uint32_t q;
  uint64_t threshold;
};
SrParts shift_parts_sr(uint32_t sig, int shift) {
  if (shift >= 56) return {0, 0};
  const uint64_t s = sig;
  const uint64_t q = s >> shift, rem = s & ((uint64_t(1) << shift) - 1u);
  return {uint32_t(q), shift <= 32 ? rem << (32 - shift) : rem >> (shift - 32)};
}
uint32_t shift_round_sr(uint32_t sig, int shift, uint32_t bits) {
  const SrParts p = shift_parts_sr(sig, shift);
  return p.q + (uint64_t(bits) < p.threshold ? 1u : 0u);
}

struct Unpacked {
  uint32_t sig;
  int exp;
};
Unpacked unpack_abs(uint32_t abs_bits) {
  const uint32_t e = abs_bits >> 23, m = abs_bits & 0x7FFFFFu;
  return e ? Unpacked{m | 0x800000u, int(e) - 127} : Unpacked{m, -126};
}

uint8_t fp8_encode(float y, int mbits, int bias, uint32_t max_code, bool sr, uint32_t bits) {
  const uint32_t u = f32_bits(y), a = u & 0x7FFFFFFFu;
  const uint32_t sign = (u >> 24) & 0x80u;
  if (a > 0x7F800000u) return 0x7F;
  if (a == 0x7F800000u) return uint8_t(sign | max_code);
  const Unpacked p = unpack_abs(a);
  const int emin = 1 - bias;
  const bool subnormal = p.exp < emin;
  const int shift = 23 - mbits + (subnormal ? emin - p.exp : 0);
  const uint32_t q = sr ? shift_round_sr(p.sig, shift, bits) : shift_round_rne(p.sig, shift);
  uint32_t code = subnormal ? q : (uint32_t(p.exp + bias - 1) << mbits) + q;
  if (code > max_code) code = max_code;
  return uint8_t(sign | code);
}

// The SR threshold of y (0 for NaN and inf, whose code no draw changes).
uint64_t sr_threshold(float y, int mbits, int bias) {
  const uint32_t a = f32_bits(y) & 0x7FFFFFFFu;
  if (a >= 0x7F800000u) return 0;
  const Unpacked p = unpack_abs(a);
  const int emin = 1 - bias;
  const int shift = 23 - mbits + (p.exp < emin ? emin - p.exp : 0);
  return shift_parts_sr(p.sig, shift).threshold;
}

float fp8_decode(uint8_t code, int mbits, int bias) {
  const uint32_t sign = uint32_t(code & 0x80u) << 24;
  const uint32_t e = (code & 0x7Fu) >> mbits, m = code & ((1u << mbits) - 1u);
  if (e == 0) {
    const float mag = float(m) * f32_from_bits(uint32_t(127 + 1 - bias - mbits) << 23);
    return sign ? -mag : mag;
  }
  return f32_from_bits(sign | (uint32_t(int(e) - bias + 127) << 23) | (m << (23 - mbits)));
}
float e4m3_decode(uint8_t code) {
  if ((code & 0x7Fu) == 0x7Fu) return f32_from_bits(0x7FC00000u | uint32_t(code & 0x80u) << 24);
  return fp8_decode(code, 3, 7);
}
float e5m2_decode(uint8_t code) {
  if ((code & 0x7Cu) == 0x7Cu) {
    const uint32_t sign = uint32_t(code & 0x80u) << 24;
    return f32_from_bits(sign | ((code & 0x03u) ? 0x7FC00000u : 0x7F800000u));
  }
  return fp8_decode(code, 2, 15);
}

}  // namespace reference

// ---- the comparison -------------------------------------------------------------------------

struct Fp8 {
  QFormat format;
  int mbits, bias;
  uint32_t max_code;
};
constexpr Fp8 kE4m3{QFormat::E4M3, 3, 7, 0x7E}, kE5m2{QFormat::E5M2, 2, 15, 0x7B};

uint8_t new_sr(const Fp8& f, float y, uint32_t bits) { return eco::encode_sr(f.format, y, bits); }
uint8_t new_rtn(const Fp8& f, float y) { return eco::encode_rtn(f.format, y); }
uint8_t ref_sr(const Fp8& f, float y, uint32_t bits) {
  return reference::fp8_encode(y, f.mbits, f.bias, f.max_code, true, bits);
}
uint8_t ref_rtn(const Fp8& f, float y) {
  return reference::fp8_encode(y, f.mbits, f.bias, f.max_code, false, 0);
}

// Counts the values (out of those given) where the new encoder differs from the reference:
// RTN, and SR at the draws 0, 1, 2^31, ~0, `extra`, and at the reference's threshold T - 1 and T
// (the two sides of the decision). Reports the first few.
int64_t mismatches_at(const Fp8& f, float y, uint32_t extra, int64_t* reported) {
  int64_t bad = 0;
  auto check = [&](const char* what, uint32_t bits, uint8_t got, uint8_t want) {
    if (got == want) return;
    ++bad;
    if ((*reported)++ < 10)
      ADD_FAILURE() << eco::qformat_name(f.format) << " " << what << " y=" << y << " (bits 0x"
                    << std::hex << reference::f32_bits(y) << ", draw 0x" << bits << "): new 0x"
                    << int(got) << ", reference 0x" << int(want);
  };
  check("rtn", 0, new_rtn(f, y), ref_rtn(f, y));
  const uint64_t t = reference::sr_threshold(y, f.mbits, f.bias);
  const uint32_t below = uint32_t(t == 0 ? 0 : t - 1), at = uint32_t(t > 0xFFFFFFFFu ? 0xFFFFFFFFu : t);
  const uint32_t draws[] = {0u, 1u, 0x80000000u, 0xFFFFFFFFu, extra, below, at};
  for (uint32_t b : draws) check("sr", b, new_sr(f, y, b), ref_sr(f, y, b));
  return bad;
}

// Values that exercise every branch of the reference: zeros, fp32 subnormals, every FP8 grid
// value and midpoint (exact ties) with 3 fp32 neighbours on each side, the normal/subnormal
// border, the smallest FP8 subnormal and below (down to where the SR threshold is floored and
// then zero), max, past max, infinities and NaNs, both signs.
std::vector<float> edge_values(const Fp8& f) {
  std::vector<float> grid;
  for (int c = 0; c < 0x80; ++c) {
    const float v = reference::fp8_decode(uint8_t(c), f.mbits, f.bias);
    if (std::isfinite(v) && c <= int(f.max_code)) grid.push_back(v);
  }
  grid.push_back(2 * grid.back());
  using reference::f32_from_bits;
  std::vector<float> base = {0.0f, f32_from_bits(1), f32_from_bits(0x7FFFFF), 0x1.0p-126f,
                             0x1.0p-100f, 0x1.0p-60f, INFINITY, NAN, f32_from_bits(0x7F800001u),
                             f32_from_bits(0x7FFFFFFFu), 3.4e38f};
  const float sub_step = std::ldexp(1.0f, 1 - f.bias - f.mbits);
  for (int k = -40; k <= 2; ++k) base.push_back(sub_step * std::ldexp(1.0f, k));  // shifts 20 .. 62
  for (size_t i = 0; i + 1 < grid.size(); ++i) {
    base.push_back(grid[i]);
    base.push_back(grid[i] / 2 + grid[i + 1] / 2);
    base.push_back(grid[i] * 0.75f + grid[i + 1] * 0.25f);
  }
  std::vector<float> out;
  for (float v : base)
    for (float s : {1.0f, -1.0f}) {
      float lo = s * v, hi = s * v;
      for (int k = 0; k < 4; ++k) {
        out.push_back(lo);
        out.push_back(hi);
        lo = std::nextafter(lo, -INFINITY);
        hi = std::nextafter(hi, INFINITY);
      }
    }
  return out;
}

TEST(Fp8Codec, EncodeMatchesThePreviousImplementationOnEdgeCases) {
  for (const Fp8& f : {kE4m3, kE5m2}) {
    int64_t bad = 0, reported = 0;
    const std::vector<float> ys = edge_values(f);
    for (size_t i = 0; i < ys.size(); ++i)
      bad += mismatches_at(f, ys[i], uint32_t(i * 0x9E3779B9u), &reported);
    EXPECT_EQ(bad, 0) << eco::qformat_name(f.format) << ": of " << ys.size() << " values";
  }
}

// 2 x 10^7 random (value, draw) pairs per format: random fp32 bit patterns (every class), values
// log-uniform from far below the smallest subnormal to past max, and uniform within +-1.1 max;
// each also at the reference threshold's two sides.
TEST(Fp8Codec, EncodeMatchesThePreviousImplementationOnRandomPairs) {
  for (const Fp8& f : {kE4m3, kE5m2}) {
    eco::Rng rng(f.mbits * 1000 + 17);
    const float rho = eco::qformat_max(f.format);
    const double lo = std::log2(double(std::ldexp(1.0f, 1 - f.bias - f.mbits))) - 40;
    const double hi = std::log2(double(rho)) + 2;
    int64_t bad = 0, reported = 0;
    const int n = 2500000;  // x (RTN + 7 SR draws) = 2 * 10^7 comparisons
    for (int i = 0; i < n; ++i) {
      const uint64_t r = rng.next_u64();
      float y;
      switch (i % 3) {
        case 0: y = reference::f32_from_bits(uint32_t(r)); break;
        case 1: y = float((r & 1 ? -1 : 1) * std::exp2(lo + (hi - lo) * rng.uniform())); break;
        default: y = float((rng.uniform() * 2 - 1) * 1.1 * rho);
      }
      bad += mismatches_at(f, y, uint32_t(r >> 32), &reported);
    }
    EXPECT_EQ(bad, 0) << eco::qformat_name(f.format);
  }
}

// Every fp32 bit pattern (2^32 values x RTN and 7 SR draws, both formats; a few minutes on two
// cores): run with --gtest_also_run_disabled_tests after changing the codec.
TEST(Fp8Codec, DISABLED_EncodeMatchesThePreviousImplementationOnEveryFloat) {
  for (const Fp8& f : {kE4m3, kE5m2}) {
    int64_t bad = 0;
#pragma omp parallel for reduction(+ : bad) schedule(static)
    for (int64_t u = 0; u <= int64_t(0xFFFFFFFF); ++u) {
      const float y = reference::f32_from_bits(uint32_t(u));
      int64_t local_reported = 10;  // no per-thread gtest reports; the count says it all
      bad += mismatches_at(f, y, uint32_t(u) * 0x9E3779B9u ^ 0x5bd1e995u, &local_reported);
    }
    EXPECT_EQ(bad, 0) << eco::qformat_name(f.format);
    std::printf("[          ] %s: 2^32 floats x 8 encodings compared, %lld mismatches\n",
                eco::qformat_name(f.format), (long long)bad);
  }
}

// All 256 codes decode to the reference's bits (NaN payloads and signed zeros included).
TEST(Fp8Codec, DecodeMatchesThePreviousImplementationOnAllCodes) {
  for (int c = 0; c < 256; ++c) {
    using reference::f32_bits;
    const uint8_t code = uint8_t(c);
    EXPECT_EQ(f32_bits(eco::decode(QFormat::E4M3, code)), f32_bits(reference::e4m3_decode(code)))
        << "e4m3 code " << c;
    EXPECT_EQ(f32_bits(eco::decode(QFormat::E5M2, code)), f32_bits(reference::e5m2_decode(code)))
        << "e5m2 code " << c;
  }
}

}  // namespace
