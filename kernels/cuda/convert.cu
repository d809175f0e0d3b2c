// Conversion kernels (see convert.cuh). Element-wise ones are grid-stride loops; the E4M3 row
// cast is one block per row (block max of |x|, then every element).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "base/math/bf16.h"
#include "base/math/qformat.h"
#include "base/math/scale_groups.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/convert.cuh"

namespace eco::cuda {
namespace {

constexpr int kThreads = 256;

unsigned grid_for(int64_t n) {
  return unsigned(std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, int64_t(1) << 16));
}

__global__ void __launch_bounds__(kThreads)
    bf16_to_f32_kernel(float* __restrict__ out, const __nv_bfloat16* __restrict__ in,
                       int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = __bfloat162float(in[i]);
}

// out may alias in: each element is read, then written, by one thread.
__global__ void __launch_bounds__(kThreads)
    round_to_bf16_f32_kernel(float* out, const float* in, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = bf16_to_float(float_to_bf16(in[i]));
}

// Out = float, or __nv_bfloat16 (the fp32 value rounded once, as f32_to_bf16 would round it).
template <class Out>
__global__ void __launch_bounds__(kThreads)
    dequantize_kernel(Out* __restrict__ out, const uint8_t* __restrict__ codes,
                      const float* __restrict__ scales, int64_t n, int64_t cols,
                      QFormat f, Granularity g) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i - r * cols;
    const float v =
        dequantize_value(f, load_code(f, codes, i), scales[scale_group_index(g, cols, r, c)]);
    if constexpr (std::is_same_v<Out, float>)
      out[i] = v;
    else
      out[i] = __float2bfloat16_rn(v);
  }
}

template <class Out>
cudaError_t launch_dequantize(Out* out, const uint8_t* codes, const float* scales, int64_t rows,
                              int64_t cols, QFormat format, Granularity granularity,
                              cudaStream_t s) {
  if (rows < 0 || cols < 1) return cudaErrorInvalidValue;
  const int64_t n = rows * cols;
  if (n == 0) return cudaSuccess;
  if (!out || !codes || !scales) return cudaErrorInvalidValue;
  dequantize_kernel<Out><<<grid_for(n), kThreads, 0, s>>>(out, codes, scales, n, cols, format,
                                                          granularity);
  return cudaGetLastError();
}

// grid (N), block (kThreads). Every thread reads its elements for the max before the block
// synchronises inside block_max, and later rewrites only its own elements: in place is safe.
__global__ void __launch_bounds__(kThreads)
    cast_e4m3_rows_kernel(__nv_bfloat16* out, const __nv_bfloat16* x, int64_t C) {
  const __nv_bfloat16* xr = x + int64_t(blockIdx.x) * C;
  __nv_bfloat16* orow = out + int64_t(blockIdx.x) * C;
  float m = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += kThreads) m = fmaxf(m, fabsf(__bfloat162float(xr[c])));
  const float scale = group_scale(QFormat::E4M3, block_max<kThreads>(m));
  for (int64_t c = threadIdx.x; c < C; c += kThreads) {
    const float v = __bfloat162float(xr[c]);
    const uint8_t code = quantize_value(QFormat::E4M3, Rounding::RTN, v, scale, 0u);
    orow[c] = __float2bfloat16_rn(dequantize_value(QFormat::E4M3, code, scale));
  }
}

__global__ void __launch_bounds__(kThreads)
    f32_to_bf16_kernel(__nv_bfloat16* __restrict__ out, const float* __restrict__ in,
                       int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = __float2bfloat16_rn(in[i]);
}

}  // namespace

cudaError_t f32_to_bf16(__nv_bfloat16* out, const float* in, int64_t n, cudaStream_t s) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (out == nullptr || in == nullptr) return cudaErrorInvalidValue;
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  f32_to_bf16_kernel<<<unsigned(blocks < 4096 ? blocks : 4096), kThreads, 0, s>>>(out, in, n);
  return cudaGetLastError();
}

cudaError_t bf16_to_f32(float* out, const __nv_bfloat16* in, int64_t n, cudaStream_t s) {
  if (n < 0 || (n > 0 && (!out || !in))) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  bf16_to_f32_kernel<<<grid_for(n), kThreads, 0, s>>>(out, in, n);
  return cudaGetLastError();
}

cudaError_t round_to_bf16_f32(float* out, const float* in, int64_t n, cudaStream_t s) {
  if (n < 0 || (n > 0 && (!out || !in))) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  round_to_bf16_f32_kernel<<<grid_for(n), kThreads, 0, s>>>(out, in, n);
  return cudaGetLastError();
}

cudaError_t dequantize(float* out, const uint8_t* codes, const float* scales, int64_t rows,
                       int64_t cols, QFormat format, Granularity granularity, cudaStream_t s) {
  return launch_dequantize(out, codes, scales, rows, cols, format, granularity, s);
}

cudaError_t dequantize_bf16(__nv_bfloat16* out, const uint8_t* codes, const float* scales,
                            int64_t rows, int64_t cols, QFormat format, Granularity granularity,
                            cudaStream_t s) {
  return launch_dequantize(out, codes, scales, rows, cols, format, granularity, s);
}

cudaError_t cast_e4m3_rows(__nv_bfloat16* out, const __nv_bfloat16* x, int64_t N, int64_t C,
                           cudaStream_t s) {
  if (N < 0 || N > int64_t(INT32_MAX) || C < 1) return cudaErrorInvalidValue;
  if (N == 0) return cudaSuccess;
  if (!out || !x) return cudaErrorInvalidValue;
  cast_e4m3_rows_kernel<<<unsigned(N), kThreads, 0, s>>>(out, x, C);
  return cudaGetLastError();
}

}  // namespace eco::cuda
