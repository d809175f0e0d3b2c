// The CPU reference quantizer and dequantizer of a QTensor, and the FP8 activation cast, which
// the CUDA kernels (kernels/cuda/quantize.cuh) must match bit for bit.
#pragma once
#include <cstdint>

#include "base/qtensor.h"

namespace eco {

// x (rows, cols) fp32 -> q.codes, q.scales. Per group: scale = group_scale(absmax); per element
// i = r * cols + c: code = quantize_value(x[i], scale, philox_bits(seed, step, tensor_id, i)).
// Deterministic and independent of the OpenMP thread count. NaNs are ignored by the absmax.
void quantize(const float* x, QTensor& q, Rounding rounding, uint64_t seed, uint64_t step,
              uint32_t tensor_id);

// q -> out (rows, cols) fp32: decode(code) * scale.
void dequantize(const QTensor& q, float* out);

namespace cpu {
// The FP8 treatments' activation cast: every row of x (N, C) quantized to E4M3 with one scale
// per row (RTN) and dequantized again into out (may alias x).
void cast_rows_e4m3(float* out, const float* x, int N, int C);
}  // namespace cpu

}  // namespace eco
