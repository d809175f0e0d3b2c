// Host emulation of the cuda_bf16.h pieces the kernels use: the conversions follow
// src/base/math/bf16.h (RNE, NaN -> 0x7fff); they were checked equal to the real header's host
// functions on all 2^32 floats when the emulator was written (tests/emu/README.md).
#pragma once
#include <cstdint>
#include "cuda_runtime.h"
#include "base/math/bf16.h"
struct __nv_bfloat16 {
  unsigned short x;
};
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return {eco::float_to_bf16(f)}; }
inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
inline float __bfloat162float(__nv_bfloat16 b) { return eco::bf16_to_float(b.x); }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { return {u}; }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.x; }
// Pairs (attention kernels): x is the low half of the 32-bit word, as in the real header.
struct alignas(4) __nv_bfloat162 {
  __nv_bfloat16 x, y;
};
inline __nv_bfloat162 __floats2bfloat162_rn(float lo, float hi) {
  return {__float2bfloat16_rn(lo), __float2bfloat16_rn(hi)};
}
inline float2 __bfloat1622float2(__nv_bfloat162 v) {
  return {__bfloat162float(v.x), __bfloat162float(v.y)};
}
inline float __low2float(__nv_bfloat162 v) { return __bfloat162float(v.x); }
inline float __high2float(__nv_bfloat162 v) { return __bfloat162float(v.y); }
