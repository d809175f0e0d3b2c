// Row-wise quantization (RTN or SR) of a fp32 (rows, cols) matrix, built from the same
// kernels/common codecs as the CPU reference, so both backends produce identical codes.
// One block of 256 threads per row: block-reduce |x| max -> group_scale -> every element through
// quantize_value with its Philox draw. Each thread writes whole code bytes (INT4: two elements).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/philox.h"
#include "kernels/common/qformat.h"
#include "kernels/cuda/quantize.cuh"

namespace eco::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// Max over the block; every thread gets the result. fmaxf ignores NaNs and is order-independent,
// so this equals the CPU reference's sequential fmaxf.
__device__ float block_max(float v) {
  __shared__ float warp_max[kWarps];
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_max[warp] = v;
  __syncthreads();
  v = lane < kWarps ? warp_max[lane] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  return v;
}

// grid (rows), block (kThreads). x (rows, cols) -> codes (rows, cols / per_byte) bytes,
// scales (rows)
__global__ void __launch_bounds__(kThreads)
    quantize_rows_kernel(const float* __restrict__ x, uint8_t* __restrict__ codes,
                         float* __restrict__ scales, int64_t cols, QFormat f, Rounding rounding,
                         uint64_t seed, uint64_t step, uint32_t tensor_id) {
  const int64_t row = blockIdx.x;
  const float* xr = x + row * cols;

  float m = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) m = fmaxf(m, fabsf(xr[c]));
  const float scale = group_scale(f, block_max(m));
  if (threadIdx.x == 0) scales[row] = scale;

  const int per_byte = f == QFormat::INT4 ? 2 : 1;
  const int64_t row_bytes = cols / per_byte;  // cols is even for INT4
  uint8_t* cr = codes + row * row_bytes;
  for (int64_t b = threadIdx.x; b < row_bytes; b += kThreads) {
    uint32_t byte = 0;
    for (int k = 0; k < per_byte; ++k) {
      const int64_t c = b * per_byte + k;
      const uint32_t bits = rounding == Rounding::SR
                                ? philox_bits(seed, step, tensor_id, uint64_t(row * cols + c))
                                : 0u;
      byte |= uint32_t(quantize_value(f, rounding, xr[c], scale, bits)) << (4 * k);
    }
    cr[b] = uint8_t(byte);
  }
}

}  // namespace

cudaError_t quantize_rows(const float* x, uint8_t* codes, float* scales, int64_t rows,
                          int64_t cols, QFormat format, Rounding rounding, uint64_t seed,
                          uint64_t step, uint32_t tensor_id, cudaStream_t s) {
  if (rows < 0 || cols < 1 || rows > int64_t(INT32_MAX)) return cudaErrorInvalidValue;
  if (format == QFormat::INT4 && cols % 2 != 0) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  if (x == nullptr || codes == nullptr || scales == nullptr) return cudaErrorInvalidValue;
  quantize_rows_kernel<<<unsigned(rows), kThreads, 0, s>>>(x, codes, scales, cols, format,
                                                           rounding, seed, step, tensor_id);
  return cudaGetLastError();
}

}  // namespace eco::cuda
