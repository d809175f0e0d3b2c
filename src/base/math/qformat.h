// Quantization formats as data plus their element codecs (FP8 E4M3/E5M2, INT8, INT4), shared
// bit for bit by the CPU reference and the CUDA kernels. Values are encoded in grid units
// y = x / scale; scale = absmax / rho per group (see group_scale).
//
// FP8 follows cuda_fp8.h's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, ...) exactly (checked for
// every code and millions of floats in tests/unit/test_qformat.cpp): round to nearest even
// (subnormals included), anything beyond the largest finite value (and +-inf) saturates to +-max,
// any NaN becomes 0x7F, and the sign of zero (and of underflow to zero) is kept.
// The codecs are a few integer and fp32 operations on the fp32 bits, without a table (the GPU's
// hot loops run them per element); they assume IEEE fp32 with subnormals (no flush-to-zero) and
// round-to-nearest, as all of the shared math does.
#pragma once
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "base/math/hd.h"

namespace eco {

enum class QFormat : uint8_t { E4M3, E5M2, INT8, INT4 };
enum class Rounding : uint8_t { RTN, SR };

namespace qcodec {

ECO_HD uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
ECO_HD float f32_from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

// sig * 2^-shift rounded to the nearest integer, ties to even (sig < 2^24, shift >= 1).
ECO_HD uint32_t shift_round_rne(uint32_t sig, int shift) {
  if (shift >= 32) return 0;  // sig < 2^24 < half a unit
  const uint32_t q = sig >> shift, rem = sig & ((1u << shift) - 1u), half = 1u << (shift - 1);
  return q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
}

// sig * 2^-shift rounded down, or up with probability frac = (sig mod 2^shift) / 2^shift,
// deciding by bits < frac * 2^32. Exact (unbiased) for shift <= 32; for larger shifts (values
// below 2^-9 of a grid step) the probability is floored to a multiple of 2^-32.
ECO_HD uint32_t shift_round_sr(uint32_t sig, int shift, uint32_t bits) {
  if (shift >= 56) return 0;  // q = 0 and frac * 2^32 < 1
  const uint64_t s = sig;
  const uint64_t q = s >> shift, rem = s & ((uint64_t(1) << shift) - 1u);
  const uint64_t threshold = shift <= 32 ? rem << (32 - shift) : rem >> (shift - 32);
  return uint32_t(q) + (uint64_t(bits) < threshold ? 1u : 0u);
}

// |y| as significand and exponent: |y| = sig * 2^(exp - 23), sig < 2^24 (fp32 subnormals have
// exp = -126 and no implicit bit). Only for finite y.
struct Unpacked {
  uint32_t sig;
  int exp;
};
ECO_HD Unpacked unpack_abs(uint32_t abs_bits) {
  const uint32_t e = abs_bits >> 23, m = abs_bits & 0x7FFFFFu;
  return e ? Unpacked{m | 0x800000u, int(e) - 127} : Unpacked{m, -126};
}

// FP8 with kMbits mantissa bits and exponent bias kBias; kMaxCode is the largest finite
// magnitude code. Subnormals have exponent 1 - kBias and step 2^(1 - kBias - kMbits). No 64-bit
// arithmetic, and two short paths that the GPU compiler predicates rather than branches: this
// runs once per element in the fused update, which is bound by its instruction count.
//   Normal results, |y| >= 2^(1 - kBias): the fp32 bits a of |y| read as a >> (23 - kMbits) are
//     (fp32 exponent, top kMbits mantissa bits), which minus (127 - kBias) << kMbits is the code
//     truncated toward zero; the 23 - kMbits bits below decide the rounding: RTN adds
//     2^(22 - kMbits) - 1 plus the kept lsb before the shift (round half to even), SR adds 1 when
//     bits < those bits as a 32-bit fraction (a << (9 + kMbits)). A carry out of the mantissa
//     moves into the exponent, and codes past kMaxCode (+-inf included) saturate.
//   Subnormal results: t = |y| * 2^(kBias - 1 + kMbits) is |y| in subnormal steps, exactly (a
//     power-of-two scaling upward; fp32 subnormal y included, IEEE subnormals assumed, i.e. no
//     flush-to-zero, as everywhere in the shared math), below 2^kMbits; the code is rint(t)
//     (RTN; rint(t) = 2^kMbits is the smallest normal) or floor(t) + (bits < frac(t) * 2^32)
//     (SR; frac(t) is exact and frac(t) * 2^32 < 2^32 an integer or floored, as the 32-bit
//     threshold of a fraction with more than 32 bits must be).
// Equal, bit for bit, to the reference in tests/unit/test_fp8_codec.cpp (the previous
// implementation: an explicit significand shifted by a variable amount, 64-bit for SR).
template <int kMbits, int kBias, uint32_t kMaxCode, bool kSr>
ECO_HD uint8_t fp8_encode(float y, uint32_t bits) {
  constexpr int kDrop = 23 - kMbits;                                // fp32 mantissa bits cut
  constexpr uint32_t kOffset = uint32_t(127 - kBias) << kMbits;     // fp32 -> FP8 exponent
  constexpr uint32_t kMinNormal = uint32_t(127 + 1 - kBias) << 23;  // fp32 bits of 2^(1 - kBias)
  constexpr float kSubSteps = float(1u << (kBias - 1 + kMbits));    // 1 / subnormal step
  const uint32_t u = f32_bits(y), a = u & 0x7FFFFFFFu;
  const uint32_t sign = (u >> 24) & 0x80u;
  uint32_t code;
  if constexpr (kSr) {
    uint32_t truncated, threshold;  // round up iff bits < threshold
    if (a >= kMinNormal) {
      truncated = (a >> kDrop) - kOffset;
      threshold = a << (32 - kDrop);
    } else {
      const float t = f32_from_bits(a) * kSubSteps, whole = floorf(t);
      truncated = uint32_t(whole);
      threshold = uint32_t((t - whole) * 0x1.0p32f);
    }
    code = truncated + (bits < threshold ? 1u : 0u);
  } else {
    if (a >= kMinNormal) {
      code = ((a + (1u << (kDrop - 1)) - 1u + ((a >> kDrop) & 1u)) >> kDrop) - kOffset;
    } else {
      code = uint32_t(rintf(f32_from_bits(a) * kSubSteps));
    }
  }
  code = code < kMaxCode ? code : kMaxCode;  // satfinite
  return a > 0x7F800000u ? uint8_t(0x7F) : uint8_t(sign | code);  // NaN: 0x7F, sign dropped
}

// Code -> value (finite codes): the magnitude's bits placed under fp32's exponent field and
// rescaled by 2^(127 - kBias), exact for normal and subnormal codes alike (a subnormal code
// becomes an fp32 subnormal, which the multiply scales up exactly: IEEE subnormals assumed).
template <int kMbits, int kBias>
ECO_HD float fp8_decode(uint8_t code) {
  static_assert(127 - kBias >= 64 && 127 - kBias < 128, "2^(127 - kBias) built from two factors");
  constexpr float kRescale = float(uint64_t(1) << (127 - kBias - 64)) * 0x1.0p64f;  // 2^(127-kBias)
  return f32_from_bits(uint32_t(code & 0x80u) << 24 | uint32_t(code & 0x7Fu) << (23 - kMbits)) *
         kRescale;
}

// Symmetric integer grid [-qmax, qmax]; NaN -> 0. Returns the two's complement value as a byte.
ECO_HD uint8_t int_encode(float y, int qmax, bool sr, uint32_t bits) {
  const uint32_t u = f32_bits(y), a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0;
  int q;
  if (f32_from_bits(a) >= float(qmax)) {
    q = qmax;  // saturate (incl. inf)
  } else {
    const Unpacked p = unpack_abs(a);  // |y| < qmax <= 127, so exp <= 6 and shift >= 17
    const int shift = 23 - p.exp;
    q = int(sr ? shift_round_sr(p.sig, shift, bits) : shift_round_rne(p.sig, shift));
  }
  return uint8_t((u >> 31) ? -q : q);
}

}  // namespace qcodec

// ---- FP8 E4M3: bias 7, 3 mantissa bits, max 448 (0x7E), NaN 0x7F/0xFF, no infinities --------
ECO_HD uint8_t fp8_e4m3_encode_rtn(float y) { return qcodec::fp8_encode<3, 7, 0x7E, false>(y, 0); }
ECO_HD uint8_t fp8_e4m3_encode_sr(float y, uint32_t bits) {
  return qcodec::fp8_encode<3, 7, 0x7E, true>(y, bits);
}
ECO_HD float fp8_e4m3_decode(uint8_t code) {
  const float v = qcodec::fp8_decode<3, 7>(code);
  return (code & 0x7Fu) == 0x7Fu ? qcodec::f32_from_bits(0x7FC00000u | uint32_t(code & 0x80u) << 24)
                                 : v;  // NaN
}

// ---- FP8 E5M2: bias 15, 2 mantissa bits, max 57344 (0x7B), inf 0x7C, NaN 0x7D..0x7F ---------
ECO_HD uint8_t fp8_e5m2_encode_rtn(float y) { return qcodec::fp8_encode<2, 15, 0x7B, false>(y, 0); }
ECO_HD uint8_t fp8_e5m2_encode_sr(float y, uint32_t bits) {
  return qcodec::fp8_encode<2, 15, 0x7B, true>(y, bits);
}
ECO_HD float fp8_e5m2_decode(uint8_t code) {
  // Exponent field 31 (codes 0x7C..0x7F) is inf (mantissa 0) or NaN; fp8_decode would map it to
  // a finite fp32 value, so handle it here.
  if ((code & 0x7Cu) == 0x7Cu) {
    const uint32_t sign = uint32_t(code & 0x80u) << 24;
    return qcodec::f32_from_bits(sign | ((code & 0x03u) ? 0x7FC00000u : 0x7F800000u));
  }
  return qcodec::fp8_decode<2, 15>(code);
}

// ---- the format table ------------------------------------------------------------------------
// rho: the largest grid value (INT4 uses [-7, 7] so the grid is symmetric).
ECO_HD float qformat_max(QFormat f) {
  switch (f) {
    case QFormat::E4M3: return 448.0f;
    case QFormat::E5M2: return 57344.0f;
    case QFormat::INT8: return 127.0f;
    case QFormat::INT4: return 7.0f;
  }
  return 0.0f;
}
ECO_HD int qformat_bits(QFormat f) { return f == QFormat::INT4 ? 4 : 8; }
ECO_HD const char* qformat_name(QFormat f) {
  switch (f) {
    case QFormat::E4M3: return "e4m3";
    case QFormat::E5M2: return "e5m2";
    case QFormat::INT8: return "int8";
    case QFormat::INT4: return "int4";
  }
  return "?";
}

// Code -> grid value. INT8: two's complement byte; INT4: low nibble, two's complement [-8, 7].
ECO_HD float decode(QFormat f, uint8_t code) {
  switch (f) {
    case QFormat::E4M3: return fp8_e4m3_decode(code);
    case QFormat::E5M2: return fp8_e5m2_decode(code);
    case QFormat::INT8: return float(int8_t(code));
    case QFormat::INT4: return float(int(code & 0x0Fu) - ((code & 0x08u) ? 16 : 0));
  }
  return 0.0f;
}

// Grid value y -> nearest code (ties to even), saturating to +-rho; NaN -> 0x7F (FP8) / 0 (INT).
ECO_HD uint8_t encode_rtn(QFormat f, float y) {
  switch (f) {
    case QFormat::E4M3: return fp8_e4m3_encode_rtn(y);
    case QFormat::E5M2: return fp8_e5m2_encode_rtn(y);
    case QFormat::INT8: return qcodec::int_encode(y, 127, false, 0);
    case QFormat::INT4: return uint8_t(qcodec::int_encode(y, 7, false, 0) & 0x0Fu);
  }
  return 0;
}

// Stochastic rounding: the grid neighbour below or above y (subnormals included), the upper one
// with probability (y - lo) / (hi - lo), decided by 32 random bits; grid points map to
// themselves; saturates like encode_rtn. E[decode(encode_sr(y))] = y for |y| <= rho.
ECO_HD uint8_t encode_sr(QFormat f, float y, uint32_t random_bits) {
  switch (f) {
    case QFormat::E4M3: return fp8_e4m3_encode_sr(y, random_bits);
    case QFormat::E5M2: return fp8_e5m2_encode_sr(y, random_bits);
    case QFormat::INT8: return qcodec::int_encode(y, 127, true, random_bits);
    case QFormat::INT4: return uint8_t(qcodec::int_encode(y, 7, true, random_bits) & 0x0Fu);
  }
  return 0;
}

// ---- code storage: one byte per element, INT4 two per byte (element i in nibble i & 1,
// 0 = low). store_code of INT4 is a read-modify-write of the shared byte: not thread-safe for
// the two elements of one byte.
ECO_HD int64_t code_bytes(QFormat f, int64_t n) { return f == QFormat::INT4 ? (n + 1) / 2 : n; }
ECO_HD uint8_t load_code(QFormat f, const uint8_t* codes, int64_t i) {
  if (f != QFormat::INT4) return codes[i];
  return uint8_t((codes[i >> 1] >> ((i & 1) * 4)) & 0x0Fu);
}
ECO_HD void store_code(QFormat f, uint8_t* codes, int64_t i, uint8_t code) {
  if (f != QFormat::INT4) {
    codes[i] = code;
    return;
  }
  const int sh = int(i & 1) * 4;
  codes[i >> 1] = uint8_t((codes[i >> 1] & ~(0x0Fu << sh)) | ((code & 0x0Fu) << sh));
}

// ---- scales ----------------------------------------------------------------------------------
// The fp32 scale of a group whose largest magnitude is absmax: absmax / rho, lowered by one ulp
// when that quotient would give absmax / scale < rho. fp32 division cannot always hit rho exactly
// (absmax / (absmax / rho) != rho for ~16% of mantissas), so we make it >= rho (within one ulp,
// for normal scales): every |x| / scale is then <= rho or saturates onto rho, and the absmax
// element encodes to exactly +-rho under RTN and SR. 0 when absmax == 0.
ECO_HD float group_scale(QFormat f, float absmax) {
  using qcodec::f32_bits, qcodec::f32_from_bits;
  if (absmax == 0.0f) return 0.0f;
  const float rho = qformat_max(f);
  float s = absmax / rho;
  if (absmax / s < rho) {  // only for 0 < s < inf
    const float lower = f32_from_bits(f32_bits(s) - 1u);  // nextafterf(s, 0), without a call
    if (lower > 0.0f) s = lower;
  }
  return s;
}

// x -> code on the grid of `scale` (y = x / scale; IEEE division on both backends). scale 0
// (an all-zero group) gives the code of 0. The element codec of every kernel, hot paths included,
// so it checks nothing: a NaN gets encode_rtn's code. Weights from outside (initialisation,
// import) are checked finite before they reach it (ParamStore::set, non_finite.h).
ECO_HD uint8_t quantize_value(QFormat f, Rounding r, float x, float scale, uint32_t random_bits) {
  if (scale == 0.0f) return encode_rtn(f, 0.0f);
  const float y = x / scale;
  return r == Rounding::SR ? encode_sr(f, y, random_bits) : encode_rtn(f, y);
}
ECO_HD float dequantize_value(QFormat f, uint8_t code, float scale) {
  return decode(f, code) * scale;
}

}  // namespace eco
