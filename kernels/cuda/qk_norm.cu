// QK-norm (Gemma 3): RMSNorm over each hd-wide q and k head of fused qkv rows, with one gain per
// part (wq for the NH q heads, wk for the KVH k heads); the KVH v heads pass through.
// Row (N, QKV = (NH + 2 KVH) hd): q heads at [0, NH hd), k heads from NH hd, v from (NH + KVH) hd.
// Launch assumptions (checked by the launchers): N >= 0, NH, KVH, hd >= 1, buffers non-null when
// N > 0 (the backward's scratch qk_norm_backward_scratch_floats(hd) floats). Heads move in chunks
// of 8 bf16 (elementwise.cuh), as 16-byte accesses when hd % 8 == 0 and the buffers are 16-byte
// aligned, else element by element.
//  - Forward and dinp: one warp per (row, head), 4 per block; lane l takes the chunks at 8l,
//    8l + 256, ...; sums are warp butterflies (fixed order). The math is the CPU twin's row
//    (kernels/cpu/norms.cpp): rstd = 1 / sqrt(mean(x^2) + eps), out = x rstd w; dx += rstd (d w -
//    x rstd^2 mean(d w x)).
//  - dwq, dwk: the (row, head) pairs of each part are cut into at most kQkRowChunks chunks (a
//    function of N and the head count only); thread c of a block sums column c over its chunk's
//    pairs in order, then one thread per column adds the chunks' partials in order. No atomics:
//    bit-identical run to run.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/norms.cuh"

namespace eco::cuda {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kWarps = 4;                  // (row, head) pairs per block of the row kernels
constexpr int kHeadStep = 32 * kBf16Chunk;  // elements a warp covers per step
constexpr int kColThreads = 256;           // columns per pass of the gain kernels

__device__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ int chunk_count(int hd, int c0) { return min(kBf16Chunk, max(0, hd - c0)); }

// The row and head of warp-pair index p over (N, heads): heads NH + 2 KVH per row in the forward
// and the backward (the v heads copy / pass their gradient).
struct HeadOf {
  int64_t n;
  int j;
};
__device__ HeadOf head_of(int64_t p, int heads) { return {p / heads, int(p % heads)}; }

__global__ void __launch_bounds__(kWarps * 32)
    qk_rmsnorm_forward_kernel(bf16* out, float* rstd, const bf16* inp, const float* wq,
                              const float* wk, int64_t pairs, int NH, int KVH, int hd, float eps,
                              bool vec) {
  const int64_t p = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (p >= pairs) return;
  const HeadOf at = head_of(p, NH + 2 * KVH);
  const int64_t base = (at.n * (NH + 2 * KVH) + at.j) * hd;
  const bf16* x = inp + base;
  bf16* o = out + base;
  float v[kBf16Chunk];
  if (at.j >= NH + KVH) {  // a v head: copied
    for (int c0 = lane * kBf16Chunk; c0 < hd; c0 += kHeadStep) {
      const int count = chunk_count(hd, c0);
      load_chunk(v, x + c0, count, vec);
      store_chunk(o + c0, v, count, vec);
    }
    return;
  }
  const float* w = at.j < NH ? wq : wk;
  float ss = 0;
  for (int c0 = lane * kBf16Chunk; c0 < hd; c0 += kHeadStep) {
    const int count = chunk_count(hd, c0);
    load_chunk(v, x + c0, count, vec);
    for (int k = 0; k < kBf16Chunk; k++)
      if (k < count) ss += v[k] * v[k];
  }
  const float s = 1.0f / sqrtf(warp_sum(ss) / hd + eps);
  for (int c0 = lane * kBf16Chunk; c0 < hd; c0 += kHeadStep) {
    const int count = chunk_count(hd, c0);
    load_chunk(v, x + c0, count, vec);
    for (int k = 0; k < kBf16Chunk; k++)
      if (k < count) v[k] = v[k] * s * w[c0 + k];
    store_chunk(o + c0, v, count, vec);
  }
  if (lane == 0) rstd[at.n * (NH + KVH) + at.j] = s;
}

__global__ void __launch_bounds__(kWarps * 32)
    qk_rmsnorm_backward_dinp_kernel(bf16* dinp, const bf16* dout, const bf16* inp,
                                    const float* wq, const float* wk, const float* rstd,
                                    int64_t pairs, int NH, int KVH, int hd, bool vec) {
  const int64_t p = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (p >= pairs) return;
  const HeadOf at = head_of(p, NH + 2 * KVH);
  const int64_t base = (at.n * (NH + 2 * KVH) + at.j) * hd;
  float d[kBf16Chunk], x[kBf16Chunk], g[kBf16Chunk];
  if (at.j >= NH + KVH) {  // a v head: its gradient passes
    for (int c0 = lane * kBf16Chunk; c0 < hd; c0 += kHeadStep) {
      const int count = chunk_count(hd, c0);
      load_chunk(d, dout + base + c0, count, vec);
      load_chunk(g, dinp + base + c0, count, vec);
      for (int k = 0; k < kBf16Chunk; k++) g[k] += d[k];
      store_chunk(dinp + base + c0, g, count, vec);
    }
    return;
  }
  const float* w = at.j < NH ? wq : wk;
  const float s = rstd[at.n * (NH + KVH) + at.j];
  float dot = 0;
  for (int c0 = lane * kBf16Chunk; c0 < hd; c0 += kHeadStep) {
    const int count = chunk_count(hd, c0);
    load_chunk(d, dout + base + c0, count, vec);
    load_chunk(x, inp + base + c0, count, vec);
    for (int k = 0; k < kBf16Chunk; k++)
      if (k < count) dot += d[k] * w[c0 + k] * x[k];
  }
  const float k2 = s * s * warp_sum(dot) / hd;
  for (int c0 = lane * kBf16Chunk; c0 < hd; c0 += kHeadStep) {
    const int count = chunk_count(hd, c0);
    load_chunk(d, dout + base + c0, count, vec);
    load_chunk(x, inp + base + c0, count, vec);
    load_chunk(g, dinp + base + c0, count, vec);
    for (int k = 0; k < kBf16Chunk; k++)
      if (k < count) g[k] += s * (d[k] * w[c0 + k] - x[k] * k2);
    store_chunk(dinp + base + c0, g, count, vec);
  }
}

// Stage 1: partial[part, chunk, c] = sum over the chunk's (row, head) pairs of the part (q: heads
// [0, NH), k: [NH, NH + KVH)) of dout * inp * rstd at column c, in pair order. grid (chunks, 2).
__global__ void __launch_bounds__(kColThreads)
    qk_gain_partials_kernel(float* partial, const bf16* dout, const bf16* inp, const float* rstd,
                            int N, int NH, int KVH, int hd, int pairs_per_chunk) {
  const int chunk = blockIdx.x, part = blockIdx.y, chunks = gridDim.x;
  const int heads = part == 0 ? NH : KVH, first = part == 0 ? 0 : NH;
  const int64_t pairs = int64_t(N) * heads;
  const int64_t p0 = int64_t(chunk) * pairs_per_chunk;
  const int64_t p1 = p0 + pairs_per_chunk < pairs ? p0 + pairs_per_chunk : pairs;
  for (int c = threadIdx.x; c < hd; c += kColThreads) {
    float acc = 0;
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t n = p / heads;
      const int j = first + int(p % heads);
      const int64_t i = (n * (NH + 2 * KVH) + j) * hd + c;
      acc += __bfloat162float(dout[i]) * __bfloat162float(inp[i]) * rstd[n * (NH + KVH) + j];
    }
    partial[(int64_t(part) * chunks + chunk) * hd + c] = acc;
  }
}

// Stage 2: dwq[c] (part 0) or dwk[c] (part 1) += the chunks' partials in chunk order. One thread
// per (part, column).
__global__ void __launch_bounds__(kColThreads)
    qk_gain_reduce_kernel(float* dwq, float* dwk, const float* partial, int chunks, int hd) {
  const int64_t idx = int64_t(blockIdx.x) * kColThreads + threadIdx.x;
  if (idx >= 2 * int64_t(hd)) return;
  const int part = int(idx / hd), c = int(idx % hd);
  float acc = 0;
  for (int k = 0; k < chunks; ++k) acc += partial[(int64_t(part) * chunks + k) * hd + c];
  float* dw = part == 0 ? dwq : dwk;
  dw[c] += acc;
}

bool shape_ok(int N, int NH, int KVH, int hd) { return N >= 0 && NH >= 1 && KVH >= 1 && hd >= 1; }

unsigned pair_blocks(int64_t pairs) { return unsigned((pairs + kWarps - 1) / kWarps); }

}  // namespace

cudaError_t qk_rmsnorm_forward(bf16* out, float* rstd, const bf16* inp, const float* wq,
                               const float* wk, int N, int NH, int KVH, int hd, float eps,
                               cudaStream_t s) {
  if (!shape_ok(N, NH, KVH, hd)) return cudaErrorInvalidValue;
  if (N == 0) return cudaSuccess;
  if (!out || !rstd || !inp || !wq || !wk || out == inp) return cudaErrorInvalidValue;
  const bool vec = hd % kBf16Chunk == 0 && aligned16(out) && aligned16(inp);
  const int64_t pairs = int64_t(N) * (NH + 2 * KVH);
  qk_rmsnorm_forward_kernel<<<pair_blocks(pairs), kWarps * 32, 0, s>>>(out, rstd, inp, wq, wk,
                                                                       pairs, NH, KVH, hd, eps,
                                                                       vec);
  return cudaGetLastError();
}

cudaError_t qk_rmsnorm_backward(bf16* dinp, float* dwq, float* dwk, const bf16* dout,
                                const bf16* inp, const float* wq, const float* wk,
                                const float* rstd, int N, int NH, int KVH, int hd, float* scratch,
                                cudaStream_t s) {
  if (!shape_ok(N, NH, KVH, hd)) return cudaErrorInvalidValue;
  if (N == 0) return cudaSuccess;
  if (!dinp || !dwq || !dwk || !dout || !inp || !wq || !wk || !rstd || !scratch)
    return cudaErrorInvalidValue;
  const bool vec = hd % kBf16Chunk == 0 && aligned16(dinp) && aligned16(dout) && aligned16(inp);
  const int64_t pairs = int64_t(N) * (NH + 2 * KVH);
  qk_rmsnorm_backward_dinp_kernel<<<pair_blocks(pairs), kWarps * 32, 0, s>>>(
      dinp, dout, inp, wq, wk, rstd, pairs, NH, KVH, hd, vec);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  // Chunks of the larger part's pairs (N NH >= N KVH); the smaller part's last chunks may be
  // empty (their partials are zeros).
  const int64_t most = int64_t(N) * NH;
  const int per_chunk = int((most + kQkRowChunks - 1) / kQkRowChunks);
  const int chunks = int((most + per_chunk - 1) / per_chunk);
  qk_gain_partials_kernel<<<dim3(unsigned(chunks), 2), kColThreads, 0, s>>>(
      scratch, dout, inp, rstd, N, NH, KVH, hd, per_chunk);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  qk_gain_reduce_kernel<<<unsigned((2 * hd + kColThreads - 1) / kColThreads), kColThreads, 0, s>>>(
      dwq, dwk, scratch, chunks, hd);
  return cudaGetLastError();
}

}  // namespace eco::cuda
