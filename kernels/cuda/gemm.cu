// The small kernels around the cuBLASLt GEMMs (see gemm.h): the fp32 -> bf16 bias copy the
// BIAS epilogue reads, the bias broadcast of its fallback, the deterministic column sums of
// dout that make the bias gradient, and the outer-product scaling of the row-scaled FP8 GEMM
// on GPUs without OUTER_VEC scales (sm_89).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/gemm.h"

namespace eco::cuda {
namespace {

// Column sums, pass 1: the rows are cut into chunks of kChunkRows; block (32, kRowLanes) sums 32
// columns of one chunk. Thread (x, y) owns column blockIdx.x * 32 + x and rows y, y + kRowLanes,
// ... of the chunk; a warp reads 32 consecutive bf16 of a row (64 contiguous bytes). The
// kRowLanes partial sums are then added in lane order: the summation order depends only on
// (N, OC), so the result is deterministic.
constexpr int kChunkRows = 256;
constexpr int kRowLanes = 8;
constexpr int kThreads = 256;  // the element-wise kernels below

// grid (ceil(OC / 32), chunks), block (32, kRowLanes). partials (chunks, OC)
__global__ void __launch_bounds__(32 * kRowLanes)
    column_sums_pass1(float* __restrict__ partials, const __nv_bfloat16* __restrict__ dout, int N,
                      int OC) {
  __shared__ float lane_sum[kRowLanes][33];
  const int col = blockIdx.x * 32 + threadIdx.x;
  const int row0 = blockIdx.y * kChunkRows;
  const int row1 = min(N, row0 + kChunkRows);
  float s = 0.0f;
  if (col < OC)
    for (int r = row0 + threadIdx.y; r < row1; r += kRowLanes)
      s += __bfloat162float(dout[int64_t(r) * OC + col]);
  lane_sum[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && col < OC) {
    float t = 0.0f;
    for (int y = 0; y < kRowLanes; ++y) t += lane_sum[y][threadIdx.x];
    partials[int64_t(blockIdx.y) * OC + col] = t;
  }
}

// Pass 2: dbias[col] += sum over chunks in chunk order. grid (ceil(OC / kThreads)), block
// (kThreads).
__global__ void __launch_bounds__(kThreads)
    column_sums_pass2(float* __restrict__ dbias, const float* __restrict__ partials,
                      int chunks, int OC) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= OC) return;
  float t = 0.0f;
  for (int c = 0; c < chunks; ++c) t += partials[int64_t(c) * OC + col];
  dbias[col] += t;
}

// grid (ceil(cols / kThreads), min(rows, 65535)), block (kThreads): rows strided over grid.y.
__global__ void __launch_bounds__(kThreads)
    fill_rows_kernel(__nv_bfloat16* __restrict__ out,
                     const __nv_bfloat16* __restrict__ bias, int rows, int cols,
                     int64_t ld) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= cols) return;
  const __nv_bfloat16 b = bias[col];
  for (int r = blockIdx.y; r < rows; r += gridDim.y) out[int64_t(r) * ld + col] = b;
}

int chunk_count(int N) { return (N + kChunkRows - 1) / kChunkRows; }

// out (rows, cols) = bf16(acc * row_scales[r] * col_scales[c] (+ bias[c])): grid
// (ceil(cols / kThreads), min(rows, 65535)), rows strided by gridDim.y.
__global__ void __launch_bounds__(kThreads)
    scale_outer_kernel(__nv_bfloat16* __restrict__ out, const float* __restrict__ acc,
                       const float* __restrict__ row_scales,
                       const float* __restrict__ col_scales,
                       const __nv_bfloat16* __restrict__ bias, int rows, int cols) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  const float cs = col_scales[c], b = bias ? __bfloat162float(bias[c]) : 0.0f;
  for (int r = blockIdx.y; r < rows; r += gridDim.y) {
    const int64_t i = int64_t(r) * cols + c;
    float v = acc[i] * row_scales[r] * cs;
    if (bias) v += b;
    out[i] = __float2bfloat16_rn(v);
  }
}

}  // namespace

cudaError_t scale_outer_to_bf16(__nv_bfloat16* out, const float* acc, const float* row_scales,
                               const float* col_scales, const __nv_bfloat16* bias, int rows,
                               int cols, cudaStream_t s) {
  if (rows < 0 || cols < 0) return cudaErrorInvalidValue;
  if (rows == 0 || cols == 0) return cudaSuccess;
  if (!out || !acc || !row_scales || !col_scales) return cudaErrorInvalidValue;
  const dim3 grid(unsigned((cols + kThreads - 1) / kThreads),
                  unsigned(rows < 65535 ? rows : 65535));
  scale_outer_kernel<<<grid, kThreads, 0, s>>>(out, acc, row_scales, col_scales, bias, rows, cols);
  return cudaGetLastError();
}

cudaError_t fill_rows_with_bias(__nv_bfloat16* out, const __nv_bfloat16* bias, int rows, int cols,
                                int64_t ld, cudaStream_t s) {
  if (rows < 0 || cols < 0 || ld < cols) return cudaErrorInvalidValue;
  if (rows == 0 || cols == 0) return cudaSuccess;
  if (out == nullptr || bias == nullptr) return cudaErrorInvalidValue;
  const dim3 grid(unsigned((cols + kThreads - 1) / kThreads),
                  unsigned(rows < 65535 ? rows : 65535));
  fill_rows_kernel<<<grid, kThreads, 0, s>>>(out, bias, rows, cols, ld);
  return cudaGetLastError();
}

int64_t column_sum_partials(int N, int OC) {
  return N > 0 && OC > 0 ? int64_t(chunk_count(N)) * OC : 0;
}

cudaError_t column_sums_accumulate(float* dbias, float* partials, const __nv_bfloat16* dout, int N,
                                   int OC, cudaStream_t s) {
  if (N < 0 || OC < 0) return cudaErrorInvalidValue;
  if (N == 0 || OC == 0) return cudaSuccess;
  if (dbias == nullptr || partials == nullptr || dout == nullptr) return cudaErrorInvalidValue;
  const int chunks = chunk_count(N);
  if (chunks > 65535) return cudaErrorInvalidValue;  // grid.y limit: N < 2^24 rows
  const dim3 grid1(unsigned((OC + 31) / 32), unsigned(chunks)), block1(32, kRowLanes);
  column_sums_pass1<<<grid1, block1, 0, s>>>(partials, dout, N, OC);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  column_sums_pass2<<<unsigned((OC + kThreads - 1) / kThreads), kThreads, 0, s>>>(
      dbias, partials, chunks, OC);
  return cudaGetLastError();
}

}  // namespace eco::cuda
