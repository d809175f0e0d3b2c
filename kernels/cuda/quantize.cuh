// Host entry point of the row-wise quantize kernel (see quantize.cu): fp32 rows -> codes + one
// fp32 scale per row, the forward FP8 weights/activations and the no-master re-quantization.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/qformat.h"
#include "kernels/common/scale_groups.h"

namespace eco::cuda {

// x (rows, cols) fp32 row-major -> codes (code_bytes(format, rows * cols) bytes, row-major;
// INT4 two per byte, even element in the low nibble) and scales (rows) fp32.
// Bit-identical to eco::quantize (src/quant/qtensor.h) on a PerRow QTensor with the same
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
// cols)), bit-identical to eco::quantize (src/quant/qtensor.h) with the same arguments.
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

}  // namespace eco::cuda
