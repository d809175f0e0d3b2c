// Quantization (RTN or SR) of a fp32 (rows, cols) matrix, built from the same src/base/math
// codecs as the CPU reference, so both backends produce identical codes.
// Row-wise: one block of 256 threads per row: block-reduce |x| max -> group_scale -> every
// element through quantize_value with its Philox draw. Each thread takes 4 consecutive elements
// at a time (one Philox call, whole INT4 bytes). Per tensor / 128x128 tiles: the group maxima
// first, then 4 elements per thread.
// The FP8 forward's bf16 activations: one block per token row, 8 elements per thread and access.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "base/math/bf16.h"
#include "base/math/format_quantizer.h"
#include "base/math/philox.h"
#include "base/math/qformat.h"
#include "base/math/scale_groups.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/quantize.cuh"

namespace eco::cuda {
namespace {

constexpr int kThreads = 256;

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
  const float scale = group_scale(f, block_max<kThreads>(m));
  if (threadIdx.x == 0) scales[row] = scale;

  // Units of 4 consecutive elements per thread (whole code bytes: cols is even for INT4), so
  // that a unit is one SR draw group when the row starts at a multiple of 4; the cursor draws
  // both groups of a unit that straddles two.
  const FormatQuantizer fq{f, rounding, seed, step, tensor_id};
  GroupDrawCursor<FormatQuantizer> draw{fq};
  const bool int4 = f == QFormat::INT4;
  for (int64_t c0 = 4 * int64_t(threadIdx.x); c0 < cols; c0 += 4 * kThreads) {
    uint32_t word = 0;
    const int count = cols - c0 < 4 ? int(cols - c0) : 4;
    for (int k = 0; k < count; ++k) {
      const uint64_t i = uint64_t(row * cols + c0 + k);
      word |= uint32_t(fq.encode(xr[c0 + k], scale, draw(i))) << (int4 ? 4 * k : 8 * k);
    }
    if (int4) {
      for (int k = 0; 2 * k < count; ++k)
        codes[(row * cols + c0) / 2 + k] = uint8_t(word >> (8 * k));
    } else {
      for (int k = 0; k < count; ++k) codes[row * cols + c0 + k] = uint8_t(word >> (8 * k));
    }
  }
}

// grid (rows), block (kThreads): row_max[r] = max |x| over row r.
__global__ void __launch_bounds__(kThreads)
    row_absmax_kernel(float* __restrict__ row_max, const float* __restrict__ x, int64_t cols) {
  const float* xr = x + int64_t(blockIdx.x) * cols;
  float m = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) m = fmaxf(m, fabsf(xr[c]));
  m = block_max<kThreads>(m);
  if (threadIdx.x == 0) row_max[blockIdx.x] = m;
}

// One block: scales[0] = group_scale(max of the rows' maxima).
__global__ void __launch_bounds__(kThreads)
    tensor_scale_kernel(float* __restrict__ scales, const float* __restrict__ row_max, int64_t rows,
                        QFormat f) {
  float m = 0.0f;
  for (int64_t r = threadIdx.x; r < rows; r += kThreads) m = fmaxf(m, row_max[r]);
  m = block_max<kThreads>(m);
  if (threadIdx.x == 0) scales[0] = group_scale(f, m);
}

// grid (tiles), block (kThreads): scales[k] = group_scale(max |x| over 128x128 tile k).
__global__ void __launch_bounds__(kThreads)
    tile_scale_kernel(float* __restrict__ scales, const float* __restrict__ x, int64_t rows,
                      int64_t cols, QFormat f) {
  const GroupSpan t = scale_group_span(Granularity::Block128, rows, cols, blockIdx.x);
  float m = 0.0f;
  for (int64_t e = threadIdx.x; e < t.rows * t.cols; e += kThreads)
    m = fmaxf(m, fabsf(x[t.index(e / t.cols, e % t.cols)]));
  m = block_max<kThreads>(m);
  if (threadIdx.x == 0) scales[blockIdx.x] = group_scale(f, m);
}

// Grid-stride over units of 4 elements (unit u: elements 4u .. 4u + 3, exactly SR draw group u,
// and whole code bytes); element i uses its group's scale.
__global__ void __launch_bounds__(kThreads)
    encode_kernel(const float* __restrict__ x, uint8_t* __restrict__ codes,
                  const float* __restrict__ scales, int64_t n, int64_t cols, QFormat f,
                  Granularity g, Rounding rounding, uint64_t seed, uint64_t step,
                  uint32_t tensor_id) {
  const FormatQuantizer fq{f, rounding, seed, step, tensor_id};
  const bool int4 = f == QFormat::INT4;
  const int64_t units = (n + 3) / 4;
  for (int64_t u = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; u < units;
       u += int64_t(gridDim.x) * blockDim.x) {
    const Philox4x32 draws = fq.draws(uint64_t(u));
    const int count = n - 4 * u < 4 ? int(n - 4 * u) : 4;
    uint32_t word = 0;
    for (int k = 0; k < count; ++k) {
      const int64_t i = 4 * u + k, r = i / cols, c = i - r * cols;
      word |= uint32_t(fq.encode(x[i], scales[scale_group_index(g, cols, r, c)],
                                 philox_word(draws, uint32_t(k))))
              << (int4 ? 4 * k : 8 * k);
    }
    if (int4) {
      for (int k = 0; 2 * k < count; ++k) codes[2 * u + k] = uint8_t(word >> (8 * k));
    } else {
      for (int k = 0; k < count; ++k) codes[4 * u + k] = uint8_t(word >> (8 * k));
    }
  }
}

// grid (N), block (kThreads): row r of x (N, C) bf16 -> scales[r], codes (N, C) and x_cast (N, C)
// bf16 (see quantize_cast_e4m3_rows). Thread t handles the 8-element vectors t, t + kThreads, ...
// of the row: one 16-byte load of bf16, one 8-byte store of codes, one 16-byte store of x_cast
// (little-endian: element k of a vector sits in bits 16 * (k % 2) of word k / 2, and in byte k of
// the code vector). The row is read twice (max, then encode); the second read mostly hits L1/L2.
// x_cast may alias x: every thread reads its elements for the max before block_max synchronises,
// and later rewrites only the elements it has just read.
__global__ void __launch_bounds__(kThreads)
    quantize_cast_e4m3_rows_kernel(uint8_t* __restrict__ codes, float* __restrict__ scales,
                                   uint16_t* x_cast, const uint16_t* x, int64_t C) {
  const int64_t row = blockIdx.x, vecs = C / 8;
  const uint4* xr = reinterpret_cast<const uint4*>(x + row * C);
  uint4* cr = reinterpret_cast<uint4*>(x_cast + row * C);
  uint2* qr = reinterpret_cast<uint2*>(codes + row * C);

  float m = 0.0f;
  for (int64_t v = threadIdx.x; v < vecs; v += kThreads) {
    const uint4 p = xr[v];
    const uint32_t w[4] = {p.x, p.y, p.z, p.w};
    for (int k = 0; k < 8; ++k)
      m = fmaxf(m, fabsf(bf16_to_float(uint16_t(w[k / 2] >> (16 * (k % 2))))));
  }
  const float scale = group_scale(QFormat::E4M3, block_max<kThreads>(m));
  if (threadIdx.x == 0) scales[row] = scale;

  for (int64_t v = threadIdx.x; v < vecs; v += kThreads) {
    const uint4 p = xr[v];
    const uint32_t w[4] = {p.x, p.y, p.z, p.w};
    uint32_t q[2] = {0u, 0u}, out[4] = {0u, 0u, 0u, 0u};
    for (int k = 0; k < 8; ++k) {
      const float val = bf16_to_float(uint16_t(w[k / 2] >> (16 * (k % 2))));
      const uint8_t code = quantize_value(QFormat::E4M3, Rounding::RTN, val, scale, 0u);
      q[k / 4] |= uint32_t(code) << (8 * (k % 4));
      out[k / 2] |= uint32_t(float_to_bf16(dequantize_value(QFormat::E4M3, code, scale)))
                    << (16 * (k % 2));
    }
    qr[v] = make_uint2(q[0], q[1]);
    cr[v] = make_uint4(out[0], out[1], out[2], out[3]);
  }
}

}  // namespace

int64_t quantize_scratch_floats(int64_t rows, int64_t /*cols*/, Granularity granularity) {
  return granularity == Granularity::PerTensor ? rows : 0;
}

cudaError_t quantize_matrix(const float* x, uint8_t* codes, float* scales, int64_t rows,
                            int64_t cols, QFormat format, Granularity granularity,
                            Rounding rounding, uint64_t seed, uint64_t step, uint32_t tensor_id,
                            float* scratch, cudaStream_t s) {
  if (granularity == Granularity::PerRow)
    return quantize_rows(x, codes, scales, rows, cols, format, rounding, seed, step, tensor_id, s);
  if (rows < 0 || cols < 1 || rows > int64_t(INT32_MAX)) return cudaErrorInvalidValue;
  if (rows == 0) {  // the CPU reference's empty tensor: its scales are 0
    if (!scales) return cudaErrorInvalidValue;
    return cudaMemsetAsync(scales, 0,
                           sizeof(float) * size_t(scale_group_count(granularity, rows, cols)), s);
  }
  if (!x || !codes || !scales) return cudaErrorInvalidValue;
  if (granularity == Granularity::PerTensor) {
    if (!scratch) return cudaErrorInvalidValue;
    row_absmax_kernel<<<unsigned(rows), kThreads, 0, s>>>(scratch, x, cols);
    if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    tensor_scale_kernel<<<1, kThreads, 0, s>>>(scales, scratch, rows, format);
  } else {
    const int64_t tiles = scale_group_count(granularity, rows, cols);
    if (tiles > int64_t(INT32_MAX)) return cudaErrorInvalidValue;
    tile_scale_kernel<<<unsigned(tiles), kThreads, 0, s>>>(scales, x, rows, cols, format);
  }
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  const int64_t units = (rows * cols + 3) / 4;
  const int64_t blocks = std::min<int64_t>((units + kThreads - 1) / kThreads, int64_t(1) << 16);
  encode_kernel<<<unsigned(blocks), kThreads, 0, s>>>(x, codes, scales, rows * cols, cols, format,
                                                      granularity, rounding, seed, step,
                                                      tensor_id);
  return cudaGetLastError();
}

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

cudaError_t quantize_cast_e4m3_rows(uint8_t* codes, float* scales, __nv_bfloat16* x_cast,
                                    const __nv_bfloat16* x, int64_t N, int64_t C,
                                    cudaStream_t s) {
  if (N < 0 || N > int64_t(INT32_MAX) || C < 8 || C % 8 != 0) return cudaErrorInvalidValue;
  if (N == 0) return cudaSuccess;
  if (!codes || !scales || !x_cast || !x) return cudaErrorInvalidValue;
  const auto aligned = [](const void* p, uintptr_t a) {
    return reinterpret_cast<uintptr_t>(p) % a == 0;
  };
  if (!aligned(x, 16) || !aligned(x_cast, 16) || !aligned(codes, 8)) return cudaErrorInvalidValue;
  quantize_cast_e4m3_rows_kernel<<<unsigned(N), kThreads, 0, s>>>(
      codes, scales, reinterpret_cast<uint16_t*>(x_cast), reinterpret_cast<const uint16_t*>(x), C);
  return cudaGetLastError();
}

}  // namespace eco::cuda
