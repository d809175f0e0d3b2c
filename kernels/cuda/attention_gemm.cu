// The row kernels of the tensor-core attention (attention_gemm.cuh): causal softmax, its recompute
// from lse, the softmax gradient, and D = rowsum(dout * out). The GEMMs around them are in
// attention_gemm.cpp.
//
// One warp per row (h, t) of an (NH, T, ld) matrix, 8 rows per 256-thread block. A lane handles
// 4 consecutive columns per step (float4 / 8-byte bf16 loads and stores: ld % 8 == 0 and
// 16-byte aligned bases make every row 16-byte aligned), 128 columns per warp step. Causality:
// only columns j <= t are read; the last step of a row may read up to 3 columns past t (inside
// the row's ld), which are masked by index, never by value (they may hold anything).
// Deterministic: sums run per lane in column order, then an xor butterfly.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cuda/attention_gemm.cuh"

namespace eco::cuda {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kThreads = 256;
constexpr int kRowsPerBlock = kThreads / 32;
constexpr int kColsPerLane = 4;
constexpr int kColsPerStep = 32 * kColsPerLane;

// Sum or max over the warp; every lane ends with the same bits (both ops are commutative).
template <bool kMax>
__device__ float warp_reduce(float v) {
  for (int o = 16; o > 0; o >>= 1) {
    const float w = __shfl_xor_sync(0xFFFFFFFFu, v, o);
    v = kMax ? fmaxf(v, w) : v + w;
  }
  return v;
}

__device__ void load4(float (&x)[4], const float* src) {
  const float4 v = *reinterpret_cast<const float4*>(src);
  x[0] = v.x;
  x[1] = v.y;
  x[2] = v.z;
  x[3] = v.w;
}
__device__ void load4(float (&x)[4], const bf16* src) {
  uint2 u = *reinterpret_cast<const uint2*>(src);
  __nv_bfloat162 lo, hi;
  memcpy(&lo, &u.x, sizeof lo);
  memcpy(&hi, &u.y, sizeof hi);
  x[0] = __low2float(lo);
  x[1] = __high2float(lo);
  x[2] = __low2float(hi);
  x[3] = __high2float(hi);
}
__device__ void store4(bf16* dst, const float (&x)[4]) {
  const __nv_bfloat162 lo = __floats2bfloat162_rn(x[0], x[1]);
  const __nv_bfloat162 hi = __floats2bfloat162_rn(x[2], x[3]);
  uint2 u;
  memcpy(&u.x, &lo, sizeof lo);
  memcpy(&u.y, &hi, sizeof hi);
  *reinterpret_cast<uint2*>(dst) = u;
}

// Row r = h*T + t of the warp, or -1 past the last row (the whole warp returns together).
__device__ int64_t warp_row(int64_t rows) {
  const int64_t r = int64_t(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
  return r < rows ? r : -1;
}

// grid ceil(NH*T / 8), block kThreads. kHaveLse: lse is read (backward's recompute); otherwise
// computed (max, then the sum of exp(S - max), both over j <= t) and written.
template <bool kHaveLse>
__global__ void __launch_bounds__(kThreads)
    causal_softmax_kernel(bf16* __restrict__ P, float* __restrict__ lse_out,
                          const float* __restrict__ S, const float* __restrict__ lse_in, int T,
                          int64_t ld, int64_t rows) {
  const int64_t r = warp_row(rows);
  if (r < 0) return;
  const int lane = threadIdx.x & 31, t = int(r % T);
  const float* srow = S + r * ld;
  bf16* prow = P + r * ld;
  float x[4];

  float lse;
  if constexpr (kHaveLse) {
    lse = lse_in[r];
  } else {
    float m = -INFINITY;  // lane 0 always sees column 0 <= t: the warp's max is finite
    for (int j = kColsPerLane * lane; j <= t; j += kColsPerStep) {
      load4(x, srow + j);
      for (int e = 0; e < kColsPerLane; ++e)
        if (j + e <= t) m = fmaxf(m, x[e]);
    }
    m = warp_reduce<true>(m);
    float l = 0.0f;
    for (int j = kColsPerLane * lane; j <= t; j += kColsPerStep) {
      load4(x, srow + j);
      for (int e = 0; e < kColsPerLane; ++e)
        if (j + e <= t) l += expf(x[e] - m);
    }
    l = warp_reduce<false>(l);  // >= 1: the max's own term
    lse = m + logf(l);
    if (lane == 0) lse_out[r] = lse;
  }

  // Every column j < T is written (the P @ V and P^T @ dO GEMMs read whole rows): zeros past t.
  for (int j = kColsPerLane * lane; j < T; j += kColsPerStep) {
    float p[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (j <= t) {
      load4(x, srow + j);
      for (int e = 0; e < kColsPerLane; ++e)
        if (j + e <= t) p[e] = expf(x[e] - lse);
    }
    store4(prow + j, p);
  }
}

// grid ceil(NH*T / 8), block kThreads. In place: P_to_dS holds P on entry, dS on exit (j <= t).
__global__ void __launch_bounds__(kThreads)
    softmax_backward_kernel(bf16* __restrict__ P_to_dS, const float* __restrict__ dP,
                            const float* __restrict__ D, int T, int64_t ld, int64_t rows) {
  const int64_t r = warp_row(rows);
  if (r < 0) return;
  const int lane = threadIdx.x & 31, t = int(r % T);
  const float Dr = D[r];
  bf16* row = P_to_dS + r * ld;
  const float* dprow = dP + r * ld;
  for (int j = kColsPerLane * lane; j <= t; j += kColsPerStep) {
    float p[4], dp[4], ds[4];
    load4(p, row + j);
    load4(dp, dprow + j);
    for (int e = 0; e < kColsPerLane; ++e) ds[e] = j + e <= t ? p[e] * (dp[e] - Dr) : 0.0f;
    store4(row + j, ds);
  }
}

// grid ceil(B*T*NH / 8), block kThreads. Row r = (b*T + t)*NH + h is the hs contiguous values
// of head h in token (b, t) of dout / out (C = NH * hs).
__global__ void __launch_bounds__(kThreads)
    rowdot_kernel(float* __restrict__ D, const bf16* __restrict__ dout,
                  const bf16* __restrict__ out, int T, int NH, int hs, int64_t rows) {
  const int64_t r = warp_row(rows);
  if (r < 0) return;
  const int lane = threadIdx.x & 31, h = int(r % NH);
  const int64_t bt = r / NH, b = bt / T;
  const int t = int(bt % T);
  const bf16* a = dout + r * hs;
  const bf16* o = out + r * hs;
  float acc = 0.0f;
  for (int d = lane; d < hs; d += 32)
    acc = fmaf(__bfloat162float(a[d]), __bfloat162float(o[d]), acc);
  acc = warp_reduce<false>(acc);
  if (lane == 0) D[(b * NH + h) * T + t] = acc;
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The row kernels' common checks; the grid's block count (0 when invalid).
unsigned row_blocks(int NH, int T, int64_t ld, std::initializer_list<const void*> matrices) {
  if (NH < 1 || T < 1 || ld < T || ld % 8 != 0) return 0;
  for (const void* p : matrices)
    if (p == nullptr || !aligned16(p)) return 0;
  const int64_t blocks = (int64_t(NH) * T + kRowsPerBlock - 1) / kRowsPerBlock;
  return blocks <= INT32_MAX ? unsigned(blocks) : 0u;
}

// Both softmax entry points: lse_out written (forward) or lse_in read (recompute).
template <bool kHaveLse>
cudaError_t launch_causal_softmax(bf16* P, float* lse_out, const float* S, const float* lse_in,
                                  int NH, int T, int64_t ld, cudaStream_t s) {
  const unsigned blocks = row_blocks(NH, T, ld, {P, S});
  if (blocks == 0 || (kHaveLse ? lse_in : lse_out) == nullptr) return cudaErrorInvalidValue;
  causal_softmax_kernel<kHaveLse>
      <<<blocks, kThreads, 0, s>>>(P, lse_out, S, lse_in, T, ld, int64_t(NH) * T);
  return cudaGetLastError();
}

}  // namespace

cudaError_t attention_causal_softmax(bf16* P, float* lse, const float* S, int NH, int T,
                                     int64_t ld, cudaStream_t s) {
  return launch_causal_softmax<false>(P, lse, S, nullptr, NH, T, ld, s);
}

cudaError_t attention_causal_probs(bf16* P, const float* S, const float* lse, int NH, int T,
                                   int64_t ld, cudaStream_t s) {
  return launch_causal_softmax<true>(P, nullptr, S, lse, NH, T, ld, s);
}

cudaError_t attention_softmax_backward(bf16* P_to_dS, const float* dP, const float* D, int NH,
                                       int T, int64_t ld, cudaStream_t s) {
  const unsigned blocks = row_blocks(NH, T, ld, {P_to_dS, dP});
  if (blocks == 0 || D == nullptr) return cudaErrorInvalidValue;
  softmax_backward_kernel<<<blocks, kThreads, 0, s>>>(P_to_dS, dP, D, T, ld, int64_t(NH) * T);
  return cudaGetLastError();
}

cudaError_t attention_rowdot(float* D, const bf16* dout, const bf16* out, int B, int T, int C,
                             int NH, cudaStream_t s) {
  if (B < 1 || T < 1 || NH < 1 || C < NH || C % NH != 0 || !D || !dout || !out)
    return cudaErrorInvalidValue;
  const int64_t rows = int64_t(B) * T * NH, blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  if (blocks > INT32_MAX) return cudaErrorInvalidValue;
  rowdot_kernel<<<unsigned(blocks), kThreads, 0, s>>>(D, dout, out, T, NH, C / NH, rows);
  return cudaGetLastError();
}

}  // namespace eco::cuda
