// A branch-free float tanh for the CPU kernels' float loops: libm's tanhf is a scalar call that
// keeps a loop from vectorizing; this inlines into `#pragma omp simd` loops. Within 1.34 ulp
// (1.43e-7 relative) of the true tanh on every float, swept exhaustively once (glibc's tanhf is
// within 2 ulp); tests/unit/test_cpu_tanh.cpp keeps a dense grid and the special values.
// CPU only: the CUDA kernels keep eco_tanh (src/base/math/activations.h).
#pragma once
#include <bit>
#include <cstdint>

namespace eco::cpu {

// exp(y) for y in [0, 20] (the caller clamps; n <= 29 keeps 2^n a normal float).
inline float exp_for_tanh(float y) {
  // Cody-Waite reduction y = n ln2 + r, |r| <= ln2/2 (+ a rounding of y log2e): kLn2Hi has 9
  // trailing zero bits, so n * kLn2Hi is exact and y - n * kLn2Hi is exact (Sterbenz).
  constexpr float kLog2e = 1.44269504088896f;
  constexpr float kLn2Hi = 0.693145751953125f;  // 0x3f317200
  constexpr float kLn2Lo = 1.42860682030941723e-6f;
  // Adding 1.5 * 2^23 rounds to an integer (round-to-nearest mode) held in the low mantissa bits.
  constexpr float kShift = 12582912.f;
  const float shifted = y * kLog2e + kShift;
  const int32_t n = std::bit_cast<int32_t>(shifted) - std::bit_cast<int32_t>(kShift);
  const float nf = shifted - kShift;
  const float r = (y - nf * kLn2Hi) - nf * kLn2Lo;
  // exp(r) = 1 + r + r^2 Q(r); Q is the degree-4 Chebyshev fit (mpmath.chebyfit) to
  // (exp(r) - 1 - r) / r^2 on [-ln2/2, ln2/2], max error 6.5e-8, i.e. < 1e-8 on exp(r).
  const float q =
      (((0.00139261761199f * r + 0.00836317307451f) * r + 0.0416665546621f) * r +
       0.166665770256f) * r + 0.5f;
  const float er = 1.f + (r + r * r * q);
  return er * std::bit_cast<float>((n + 127) << 23);  // times 2^n, built in the exponent field
}

// tanh(x) = sign(x) tanh(|x|):
// - |x| < 0.625: |x| + |x|^3 P(x^2), P the degree-5 Chebyshev fit (mpmath.chebyfit) to
//   (tanh(a) - a) / a^3 in s = a^2 on [0, 0.390625], max error 1.6e-9 (the a^3 P term is at most
//   13% of the result, so < 1e-9 relative). Denormals pass through as x, -0 stays -0.
// - otherwise 1 - 2 / (exp(2|x|) + 1): at |x| >= 0.625 the subtraction cancels little (the
//   result is >= 0.55 and the 2 / (e + 1) term <= 0.45). |x| is clamped to 10 for exp, past the
//   point (9.01) where the result rounds to 1: saturates to +-1, infinities included.
// - NaN takes the polynomial branch (the comparison is false) and stays NaN.
// Both branches are computed and one selected, so a loop over it vectorizes.
inline float tanh_simd(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint32_t sign = bits & 0x80000000u;
  const float a = std::bit_cast<float>(bits ^ sign);

  const float s = a * a;
  const float p =
      ((((0.00229274481618f * s - 0.00834394551584f) * s + 0.021768918651f) * s -
        0.0539592595772f) * s + 0.133333035569f) * s - 0.333333331721f;
  const float small = a + a * (s * p);

  const float clamped = a < 10.f ? a : 10.f;  // NaN -> 10, keeping exp's n in range
  const float large = 1.f - 2.f / (exp_for_tanh(2.f * clamped) + 1.f);

  const float r = a >= 0.625f ? large : small;
  return std::bit_cast<float>(std::bit_cast<uint32_t>(r) | sign);
}

}  // namespace eco::cpu
