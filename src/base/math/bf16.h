// bfloat16 <-> float conversions on raw uint16_t bits, shared by both backends (optimizer state in
// bf16, bf16 gradients). Round-to-nearest-even; NaN becomes the canonical 0x7fff, as cuda_bf16.h's
// __float2bfloat16_rn does, so the CPU and the GPU store identical bits.
#pragma once
#include <cstdint>
#include <cstring>

#include "base/math/hd.h"

namespace eco {

ECO_HD uint32_t f32_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
#endif
}

ECO_HD float f32_from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
#endif
}

// Exact: every bf16 value is a float.
ECO_HD float bf16_to_float(uint16_t b) { return f32_from_bits(uint32_t(b) << 16); }

// Round to nearest, ties to even. Adding 0x7fff + (lsb of the kept half) carries into the kept
// half exactly when the dropped half is above the midpoint, or at it with an odd kept half; a
// carry out of the mantissa bumps the exponent (finite values past bf16's max round to inf).
ECO_HD uint16_t float_to_bf16(float x) {
  const uint32_t u = f32_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;  // NaN
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

}  // namespace eco
