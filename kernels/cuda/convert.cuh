// Conversions between the representations the CUDA backend moves weights and activations
// through: bf16 <-> fp32, fp32 rounded to bf16 in place of fp32 (bf16-mw's weight view), codes +
// scales -> fp32 or bf16 (a QTensor's dequantized view), and the FP8 E4M3 per-row cast of bf16
// activations. All element math is src/base/math's, so
// every output equals the CPU reference's on the same inputs (bf16 outputs: rounded once more).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "base/math/qformat.h"
#include "base/math/scale_groups.h"

namespace eco::cuda {

// out (n) bf16 = in (n) fp32 rounded to nearest even (src/base/math/bf16.h's float_to_bf16).
cudaError_t f32_to_bf16(__nv_bfloat16* out, const float* in, int64_t n, cudaStream_t s = nullptr);

// out (n) fp32 = in (n) bf16 (exact).
cudaError_t bf16_to_f32(float* out, const __nv_bfloat16* in, int64_t n, cudaStream_t s = nullptr);

// out (n) fp32 = in (n) rounded to bf16 (nearest even, src/base/math/bf16.h), kept in fp32.
// out may alias in.
cudaError_t round_to_bf16_f32(float* out, const float* in, int64_t n, cudaStream_t s = nullptr);

// out (rows, cols) fp32 = dequantize_value(format, code_i, scale of i's group) for the row-major
// codes (code_bytes(format, rows * cols) bytes, INT4 two per byte) and scales
// (scale_group_count(granularity, rows, cols)). Bit-identical to eco::dequantize.
cudaError_t dequantize(float* out, const uint8_t* codes, const float* scales, int64_t rows,
                       int64_t cols, QFormat format, Granularity granularity,
                       cudaStream_t s = nullptr);
// The same values rounded once to bf16 (nearest even): bit-identical to dequantize followed by
// f32_to_bf16, without the fp32 copy (the weight of a quantized layer's backward GEMMs).
cudaError_t dequantize_bf16(__nv_bfloat16* out, const uint8_t* codes, const float* scales,
                            int64_t rows, int64_t cols, QFormat format, Granularity granularity,
                            cudaStream_t s = nullptr);

// out (N, C) bf16 = each row of x (N, C) bf16 quantized to E4M3 with one scale per row
// (group_scale of the row's absmax, RTN) and dequantized: the FP8 treatments' activation cast.
// out may alias x. N < 2^31 rows (one block each), C >= 1. quantize_cast_e4m3_rows (quantize.cuh)
// writes the same out together with the codes and scales (the FP8 forward GEMM's input).
cudaError_t cast_e4m3_rows(__nv_bfloat16* out, const __nv_bfloat16* x, int64_t N, int64_t C,
                           cudaStream_t s = nullptr);

}  // namespace eco::cuda
