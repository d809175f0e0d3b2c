// Host entry points of the quantize kernels (see quantize.cu): fp32 rows -> codes + one fp32
// scale per row (weights, the no-master re-quantization), any granularity, and the bf16
// activations of an FP8 forward GEMM -> E4M3 codes + row scales + their dequantized bf16 copy.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "base/math/qformat.h"
#include "base/math/scale_groups.h"

namespace eco::cuda {

// x (rows, cols) fp32 row-major -> codes (code_bytes(format, rows * cols) bytes, row-major;
// INT4 two per byte, even element in the low nibble) and scales (rows) fp32.
// Bit-identical to eco::quantize (kernels/cpu/quantize.h) on a PerRow QTensor with the same
// rounding, seed, step and tensor_id: same absmax (fmaxf), group_scale, IEEE division and
// Philox draws (philox_bits(seed, step, tensor_id, row * cols + col)).
// Launch assumptions, checked here (cudaErrorInvalidValue otherwise): rows >= 0, cols >= 1,
// rows < 2^31 (one block per row), x / codes / scales non-null when rows > 0, and for INT4 cols
// even (so no byte spans two rows). Any alignment. Do not build with --use_fast_math (it would
// change the division and break the bit-identity).
cudaError_t quantize_rows(const float* x, uint8_t* codes, float* scales, int64_t rows,
                          int64_t cols, QFormat format, Rounding rounding, uint64_t seed,
                          uint64_t step, uint32_t tensor_id, cudaStream_t s = nullptr);

// Any granularity: x (rows, cols) fp32 -> codes + scales (scale_group_count(granularity, rows,
// cols)), bit-identical to eco::quantize (kernels/cpu/quantize.h) with the same arguments.
// PerRow runs quantize_rows (so INT4 needs even cols there); PerTensor reduces per-row maxima
// (scratch: quantize_scratch_floats floats) into one scale; Block128 one block per 128x128 tile.
// The codes are then written one byte per thread (INT4: both nibbles, whichever rows or groups
// they belong to), like the CPU reference. Launch assumptions (cudaErrorInvalidValue otherwise):
// rows >= 0, cols >= 1, rows < 2^31, non-null buffers when rows > 0, scratch for PerTensor.
int64_t quantize_scratch_floats(int64_t rows, int64_t cols, Granularity granularity);
cudaError_t quantize_matrix(const float* x, uint8_t* codes, float* scales, int64_t rows,
                            int64_t cols, QFormat format, Granularity granularity,
                            Rounding rounding, uint64_t seed, uint64_t step, uint32_t tensor_id,
                            float* scratch, cudaStream_t s = nullptr);

// The activation side of the FP8 forward GEMM (GemmEngine::matmul_forward_fp8), in one pass over
// x (N, C) bf16, per token row: scale = group_scale(E4M3, max |x|) -> scales (N) fp32,
// code = E4M3 RTN of x / scale -> codes (N, C) bytes, and x_cast (N, C) bf16 = bf16(decode(code)
// * scale), exactly what cast_e4m3_rows (convert.cuh) writes. Codes and scales are bit-identical
// to eco::quantize of the same values (as fp32) on a PerRow E4M3 QTensor with RTN: the
// src/base/math codecs. x_cast may alias x.
// Launch assumptions, checked here (cudaErrorInvalidValue otherwise): 0 <= N < 2^31 (one block
// per row), C >= 8 and a multiple of 8 (each thread moves 8 elements: 16-byte loads and stores
// of bf16, 8-byte stores of codes), x and x_cast 16-byte aligned, codes 8-byte aligned, non-null
// buffers when N > 0. The FP8 GEMM's own conditions (multiples of 16) are stricter.
cudaError_t quantize_cast_e4m3_rows(uint8_t* codes, float* scales, __nv_bfloat16* x_cast,
                                    const __nv_bfloat16* x, int64_t N, int64_t C,
                                    cudaStream_t s = nullptr);

}  // namespace eco::cuda
