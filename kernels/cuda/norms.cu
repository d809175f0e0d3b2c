// LayerNorm / RMSNorm. Launch assumptions (checked by the launchers): N >= 0, C > 0 (any C,
// ragged), buffers non-null (bias, dbias may be null), backward scratch of
// norm_backward_scratch_floats(C) floats. Rows move in chunks of 8 bf16 (elementwise.cuh), as
// 16-byte accesses when C % 8 == 0 and the buffers are 16-byte aligned, else element by element.
//  - Forward (optionally with the residual add fused in front: residual_*norm_forward) and dinp:
//    one warp per row, kWarps rows per block; lane l takes the chunks at
//    8l, 8l + 256, ...; sums are warp butterflies (fixed order). Two-pass variance like the CPU.
//  - dweight/dbias: rows are cut into at most kNormRowChunks chunks (a function of N only). In a
//    block of 256 columns, lane l owns columns 8l..8l+7 and warp w the rows w, w + 8, ... of the
//    chunk; the 8 warp partials are added in warp order into scratch. A second kernel adds the
//    chunk partials the same way (warp w: chunks w, w + 8, ...), 32 columns per block with
//    coalesced loads (24 blocks at GPT-2's C 768, where 256-column blocks made 3). No atomics:
//    bit-identical run to run.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/norms.cuh"

namespace eco::cuda {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kWarps = 4;                        // rows per block of the row kernels
constexpr int kRowStep = 32 * kBf16Chunk;        // elements a warp covers per step
constexpr int kColWarps = 8;                     // warps per block of the parameter kernels
constexpr int kColsPerBlock = 32 * kBf16Chunk;   // columns per block of the parameter kernels
static_assert(kColWarps * 32 == kColsPerBlock);  // one thread per column in the final combine

__device__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ int chunk_count(int C, int c0) { return min(kBf16Chunk, max(0, C - c0)); }

// The residual add fused in front (kResidual): the row x = bf16(a + b) is written to `inp`
// (then the residual stream's buffer) in the first pass, by the lane that later re-reads it, and
// everything after reads it back: the same bits as residual_forward followed by this kernel.
struct ResidualIn {
  const bf16* a = nullptr;
  const bf16* b = nullptr;
};

// x (C) of this row = bf16(a + b) (fp32 add, one rounding, as residual_forward), stored into
// xw; v gets the rounded values.
__device__ void residual_chunk(float (&v)[kBf16Chunk], bf16* xw, const bf16* a, const bf16* b,
                               int count, bool vec) {
  float u[kBf16Chunk];
  load_chunk(v, a, count, vec);
  load_chunk(u, b, count, vec);
  for (int k = 0; k < kBf16Chunk; k++) v[k] = __bfloat162float(__float2bfloat16_rn(v[k] + u[k]));
  store_chunk(xw, v, count, vec);
}

// kRms: out = x * rstd * w; otherwise out = (x - mean) * rstd * w + b.
template <bool kRms, bool kResidual>
__global__ void __launch_bounds__(kWarps * 32)
    norm_forward_kernel(bf16* out, float* mean, float* rstd, bf16* inp, ResidualIn res,
                        const float* weight, const float* bias, int N, int C, float eps,
                        bool vec) {
  const int row = blockIdx.x * kWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const int64_t base = int64_t(row) * C;
  const bf16* x = inp + base;
  bf16* o = out + base;
  float v[kBf16Chunk], m = 0, var = 0;
  // The first pass over the row: from the residual inputs (writing x) or from x.
  const auto first_load = [&](int c0, int count) {
    if constexpr (kResidual)
      residual_chunk(v, inp + base + c0, res.a + base + c0, res.b + base + c0, count, vec);
    else
      load_chunk(v, x + c0, count, vec);
  };
  if constexpr (!kRms) {
    for (int c0 = lane * kBf16Chunk; c0 < C; c0 += kRowStep) {
      const int count = chunk_count(C, c0);
      first_load(c0, count);
      for (int k = 0; k < kBf16Chunk; k++)
        if (k < count) m += v[k];
    }
    m = warp_sum(m) / C;
  } else if constexpr (kResidual) {
    for (int c0 = lane * kBf16Chunk; c0 < C; c0 += kRowStep) first_load(c0, chunk_count(C, c0));
  }
  for (int c0 = lane * kBf16Chunk; c0 < C; c0 += kRowStep) {
    const int count = chunk_count(C, c0);
    load_chunk(v, x + c0, count, vec);
    for (int k = 0; k < kBf16Chunk; k++)
      if (k < count) var += (v[k] - m) * (v[k] - m);
  }
  const float s = 1.0f / sqrtf(warp_sum(var) / C + eps);
  for (int c0 = lane * kBf16Chunk; c0 < C; c0 += kRowStep) {
    const int count = chunk_count(C, c0);
    load_chunk(v, x + c0, count, vec);
    for (int k = 0; k < kBf16Chunk; k++) {
      if (k >= count) break;
      v[k] = (v[k] - m) * s * weight[c0 + k];
      if (!kRms && bias) v[k] += bias[c0 + k];
    }
    store_chunk(o + c0, v, count, vec);
  }
  if (lane == 0) {
    if constexpr (!kRms) mean[row] = m;
    rstd[row] = s;
  }
}

// dinp += LayerNorm: s * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = dout * w;
//         RMSNorm:   s * (dnorm - x * s^2 * mean(dnorm * x)).
template <bool kRms>
__global__ void __launch_bounds__(kWarps * 32)
    norm_backward_dinp_kernel(bf16* dinp, const bf16* dout, const bf16* inp,
                              const float* weight, const float* mean, const float* rstd,
                              int N, int C, bool vec) {
  const int row = blockIdx.x * kWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const int64_t base = int64_t(row) * C;
  const float m = kRms ? 0.0f : mean[row], s = rstd[row];
  float d[kBf16Chunk], x[kBf16Chunk], g[kBf16Chunk], dsum = 0, dot = 0;
  for (int c0 = lane * kBf16Chunk; c0 < C; c0 += kRowStep) {
    const int count = chunk_count(C, c0);
    load_chunk(d, dout + base + c0, count, vec);
    load_chunk(x, inp + base + c0, count, vec);
    for (int k = 0; k < kBf16Chunk; k++) {
      if (k >= count) break;
      const float dnorm = d[k] * weight[c0 + k];
      dsum += dnorm;
      dot += kRms ? dnorm * x[k] : dnorm * (x[k] - m) * s;
    }
  }
  dsum = warp_sum(dsum) / C;
  dot = warp_sum(dot);
  const float k2 = kRms ? s * s * dot / C : dot / C;
  for (int c0 = lane * kBf16Chunk; c0 < C; c0 += kRowStep) {
    const int count = chunk_count(C, c0);
    load_chunk(d, dout + base + c0, count, vec);
    load_chunk(x, inp + base + c0, count, vec);
    load_chunk(g, dinp + base + c0, count, vec);
    for (int k = 0; k < kBf16Chunk; k++) {
      if (k >= count) break;
      const float dnorm = d[k] * weight[c0 + k];
      g[k] += kRms ? s * (dnorm - x[k] * k2) : s * (dnorm - dsum - (x[k] - m) * s * k2);
    }
    store_chunk(dinp + base + c0, g, count, vec);
  }
}

// The 8 warps' column partials (w, b) of a block, added in warp order; thread t gets column t.
__device__ void combine_warps(float (&w)[kBf16Chunk], float (&b)[kBf16Chunk], float& w_out,
                              float& b_out) {
  __shared__ float sw[kColWarps][kColsPerBlock], sb[kColWarps][kColsPerBlock];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int k = 0; k < kBf16Chunk; k++) {
    sw[warp][lane * kBf16Chunk + k] = w[k];
    sb[warp][lane * kBf16Chunk + k] = b[k];
  }
  __syncthreads();
  w_out = b_out = 0;
  for (int j = 0; j < kColWarps; j++) {
    w_out += sw[j][threadIdx.x];
    b_out += sb[j][threadIdx.x];
  }
}

// Stage 1: pw[chunk, c] = sum over the chunk's rows of dout * (x - mean) * rstd (mean = 0 for
// RMSNorm); pb[chunk, c] = sum of dout (pb may be null).
__global__ void __launch_bounds__(kColsPerBlock)
    norm_param_partials_kernel(float* pw, float* pb, const bf16* dout, const bf16* inp,
                               const float* mean, const float* rstd, int N, int C,
                               int rows_per_chunk, bool vec) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, chunk = blockIdx.y;
  const int c0 = blockIdx.x * kColsPerBlock + lane * kBf16Chunk, count = chunk_count(C, c0);
  const int n1 = min(N, (chunk + 1) * rows_per_chunk);
  float w[kBf16Chunk] = {}, b[kBf16Chunk] = {}, d[kBf16Chunk], x[kBf16Chunk];
  for (int n = chunk * rows_per_chunk + warp; count > 0 && n < n1; n += kColWarps) {
    load_chunk(d, dout + int64_t(n) * C + c0, count, vec);
    load_chunk(x, inp + int64_t(n) * C + c0, count, vec);
    const float m = mean ? mean[n] : 0.0f, s = rstd[n];
    for (int k = 0; k < kBf16Chunk; k++) {
      w[k] += d[k] * (x[k] - m) * s;
      b[k] += d[k];
    }
  }
  float w_sum, b_sum;
  combine_warps(w, b, w_sum, b_sum);
  const int c = blockIdx.x * kColsPerBlock + threadIdx.x;
  if (c >= C) return;
  pw[int64_t(chunk) * C + c] = w_sum;
  if (pb) pb[int64_t(chunk) * C + c] = b_sum;
}

// Stage 2: dweight[c] += sum of pw[:, c] (dbias likewise when pb is given). A block takes 32
// columns, lane l column l, and warp w the chunks w, w + 8, ... (coalesced 128-byte rows); the 8
// warp sums are then added in warp order: the summation order stage 1 uses within a block, so
// every column's sum is fixed whatever the grid.
constexpr int kReduceCols = 32;
__global__ void __launch_bounds__(kColWarps * 32)
    norm_param_reduce_kernel(float* dweight, float* dbias, const float* pw,
                             const float* pb, int chunks, int C) {
  __shared__ float sw[kColWarps][kReduceCols], sb[kColWarps][kReduceCols];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int c = blockIdx.x * kReduceCols + lane;
  float w = 0, b = 0;
  if (c < C)
    for (int j = warp; j < chunks; j += kColWarps) {
      w += pw[int64_t(j) * C + c];
      if (pb) b += pb[int64_t(j) * C + c];
    }
  sw[warp][lane] = w;
  sb[warp][lane] = b;
  __syncthreads();
  if (warp != 0 || c >= C) return;
  float w_sum = 0, b_sum = 0;
  for (int j = 0; j < kColWarps; j++) {
    w_sum += sw[j][lane];
    b_sum += sb[j][lane];
  }
  dweight[c] += w_sum;
  if (pb) dbias[c] += b_sum;
}

unsigned row_blocks(int N) { return unsigned((N + kWarps - 1) / kWarps); }
unsigned col_blocks(int C) { return unsigned((C + kColsPerBlock - 1) / kColsPerBlock); }

// inp is read (res.a null) or, with the residual fused in, written with res.a + res.b first.
template <bool kRms>
cudaError_t norm_forward(bf16* out, float* mean, float* rstd, bf16* inp, ResidualIn res,
                         const float* weight, const float* bias, int N, int C, float eps,
                         cudaStream_t s) {
  if (N < 0 || C <= 0) return cudaErrorInvalidValue;
  if (N == 0) return cudaSuccess;
  if (!out || !rstd || !inp || !weight || (!kRms && !mean)) return cudaErrorInvalidValue;
  if ((res.a == nullptr) != (res.b == nullptr)) return cudaErrorInvalidValue;
  const bool vec = C % kBf16Chunk == 0 && aligned16(out) && aligned16(inp) &&
                   (res.a == nullptr || (aligned16(res.a) && aligned16(res.b)));
  if (res.a)
    norm_forward_kernel<kRms, true><<<row_blocks(N), kWarps * 32, 0, s>>>(
        out, mean, rstd, inp, res, weight, bias, N, C, eps, vec);
  else
    norm_forward_kernel<kRms, false><<<row_blocks(N), kWarps * 32, 0, s>>>(
        out, mean, rstd, inp, res, weight, bias, N, C, eps, vec);
  return cudaGetLastError();
}

template <bool kRms>
cudaError_t norm_backward(bf16* dinp, float* dweight, float* dbias, const bf16* dout,
                          const bf16* inp, const float* weight, const float* mean,
                          const float* rstd, int N, int C, float* scratch, cudaStream_t s) {
  if (N < 0 || C <= 0) return cudaErrorInvalidValue;
  if (N == 0) return cudaSuccess;
  if (!dinp || !dweight || !dout || !inp || !weight || !rstd || !scratch || (!kRms && !mean))
    return cudaErrorInvalidValue;
  const bool vec = C % kBf16Chunk == 0 && aligned16(dinp) && aligned16(dout) && aligned16(inp);
  norm_backward_dinp_kernel<kRms>
      <<<row_blocks(N), kWarps * 32, 0, s>>>(dinp, dout, inp, weight, mean, rstd, N, C, vec);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  const int rows_per_chunk = (N + kNormRowChunks - 1) / kNormRowChunks;
  const int chunks = (N + rows_per_chunk - 1) / rows_per_chunk;
  float* pw = scratch;
  float* pb = dbias ? scratch + int64_t(kNormRowChunks) * C : nullptr;
  norm_param_partials_kernel<<<dim3(col_blocks(C), unsigned(chunks)), kColsPerBlock, 0, s>>>(
      pw, pb, dout, inp, mean, rstd, N, C, rows_per_chunk, vec);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  const unsigned reduce_blocks = unsigned((C + kReduceCols - 1) / kReduceCols);
  norm_param_reduce_kernel<<<reduce_blocks, kColWarps * 32, 0, s>>>(dweight, dbias, pw, pb, chunks,
                                                                     C);
  return cudaGetLastError();
}

}  // namespace

cudaError_t layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* inp,
                              const float* weight, const float* bias, int N, int C, float eps,
                              cudaStream_t s) {
  return norm_forward<false>(out, mean, rstd, const_cast<bf16*>(inp), {}, weight, bias, N, C, eps,
                             s);  // not written: no residual inputs
}

cudaError_t residual_layernorm_forward(bf16* resid, bf16* out, float* mean, float* rstd,
                                       const bf16* a, const bf16* b, const float* weight,
                                       const float* bias, int N, int C, float eps,
                                       cudaStream_t s) {
  if (!a || !b) return cudaErrorInvalidValue;
  return norm_forward<false>(out, mean, rstd, resid, {a, b}, weight, bias, N, C, eps, s);
}

cudaError_t residual_rmsnorm_forward(bf16* resid, bf16* out, float* rstd, const bf16* a,
                                     const bf16* b, const float* weight, int N, int C, float eps,
                                     cudaStream_t s) {
  if (!a || !b) return cudaErrorInvalidValue;
  return norm_forward<true>(out, nullptr, rstd, resid, {a, b}, weight, nullptr, N, C, eps, s);
}

cudaError_t layernorm_backward(bf16* dinp, float* dweight, float* dbias, const bf16* dout,
                               const bf16* inp, const float* weight, const float* mean,
                               const float* rstd, int N, int C, float* scratch, cudaStream_t s) {
  return norm_backward<false>(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, scratch,
                              s);
}

cudaError_t rmsnorm_forward(bf16* out, float* rstd, const bf16* inp, const float* weight, int N,
                            int C, float eps, cudaStream_t s) {
  return norm_forward<true>(out, nullptr, rstd, const_cast<bf16*>(inp), {}, weight, nullptr, N, C,
                            eps, s);  // not written: no residual inputs
}

cudaError_t rmsnorm_backward(bf16* dinp, float* dweight, const bf16* dout, const bf16* inp,
                             const float* weight, const float* rstd, int N, int C, float* scratch,
                             cudaStream_t s) {
  return norm_backward<true>(dinp, dweight, nullptr, dout, inp, weight, nullptr, rstd, N, C,
                             scratch, s);
}

}  // namespace eco::cuda
