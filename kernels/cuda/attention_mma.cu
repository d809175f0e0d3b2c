// Causal attention on tensor cores (attention_mma.cuh): FlashAttention-2's forward and a
// deterministic two-kernel backward, every product an mma.sync.m16n8k16 (bf16 in, fp32 out).
//
// Launch assumptions (attention_mma_supported checks them on the host):
//   - hs = C / NH is a template parameter, one of 32, 64, 128 (a multiple of 16: the k-steps of
//     Q K^T and the n-tile pairs of P V).
//   - qkv, out, dout, dqkv are 16-byte aligned: tiles move by cp.async in 16-byte chunks, and row
//     starts (3C or C elements apart) and head offsets (h * hs) keep that alignment (hs % 8 == 0).
//   - lse and D are plain fp32 arrays (4-byte cp.async); any T >= 1: rows of a tile at or past T
//     are zero-filled, never read from memory, and their results are never written.
//   - grid (NH, B, ceil(T / 64)): B <= 65535 and T <= 65535 * 64; 128 threads (4 warps) per
//     block. The tile index is the slowest grid dimension, so that blocks start in order of work
//     over all heads (see "Work order").
//
// Tiles. Every block owns 64 rows (16 per warp: one mma row block), queries in the forward and dq
// kernels, keys in dkdv, and streams the other side in steps through a double buffer (the next
// step's cp.async runs while this one computes). Shared rows are padded to hs + 8 elements, so the
// 8 row addresses of each ldmatrix phase fall into distinct 16-byte bank groups.
//   forward: S = Q K^T (16 x 64 per warp), online softmax in fp32 registers (running max in
//            log2 units, 2^x on the SFU with scale * log2(e) pre-multiplied), P rounded to bf16
//            as the A operand of O += P V straight from the S accumulators (no shared memory).
//   dq:      per query block, over key steps: S and dP = dO V^T, P = exp2(S * scale log2e - lse
//            log2e) from the saved lse, dS = P (dP - D), dQ += dS K.
//   dkdv:    per key block, over query steps (from the diagonal to T): the transposed products
//            S^T = K Q^T and dP^T = V dO^T, then dV += P^T dO and dK += dS^T Q, again from the
//            accumulators. P and dS are recomputed in both kernels (7 products instead of FA2's 5)
//            so that every gradient element has one owner: no atomics, fixed summation order,
//            bit-identical runs. D = rowsum(dout * out) comes first (attention_rowdot).
// Causality: a block stops at its diagonal (forward, dq) or starts there (dkdv); key tiles above
// the diagonal are never loaded, and only steps that cross the diagonal (or the ragged end of T)
// mask by index. Every query row sees key 0 in its first step, so the running max is finite there
// and exp2 never sees inf - inf.
// Work order: forward and dq blocks start with the last query tiles (the most keys), dkdv with the
// first key tiles (the most queries), so the long blocks do not trail.
// Precision as the GEMM path and FlashAttention: scores, softmax, lse, D and all accumulators in
// fp32; P and dS rounded to bf16 for the products that read them; out written once in bf16,
// dqkv as bf16(dqkv + g), one rounding.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "kernels/common/attention_mma_shapes.h"
#include "kernels/cuda/attention_gemm.cuh"
#include "kernels/cuda/attention_mma.cuh"
#include "kernels/cuda/cuda_check.h"

namespace eco::cuda {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kBlockRows = 16 * kWarps;  // the rows a block owns: queries (fwd, dq), keys (dkdv)
static_assert(kBlockRows == kMmaAttentionRows, "attention_mma_shape_ok's tile rows");
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr size_t kDefaultSmem = 48 * 1024;

// Rows per streamed step: keys (forward, dq) or queries (dkdv). A step's scores cost Step / 2
// fp32 registers per thread per matrix (the backward holds two, plus dq or dk and dv), hence 32
// at hs 128 in the backward.
constexpr int fwd_step(int) { return 64; }
constexpr int bwd_step(int hs) { return hs <= 64 ? 64 : 32; }
constexpr int padded(int hs) { return hs + 8; }

// ---- PTX wrappers (sm_80+) -------------------------------------------------------------------

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return uint32_t(__cvta_generic_to_shared(p));
}
// 16 bytes global -> shared, asynchronously; src_bytes 0 zero-fills (and reads nothing).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src),
               "r"(valid ? 4 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
// d (16 x 8, fp32) += a (16 x 16, bf16, row) * b (16 x 8, bf16, col). Fragments (g = lane / 4,
// c = lane % 4): a = {(g, 2c..2c+1), (g+8, 2c..), (g, 2c+8..), (g+8, 2c+8..)}; b = {(k 2c..2c+1,
// n g), (k 2c+8.., n g)}; d = {(g, 2c), (g, 2c+1), (g+8, 2c), (g+8, 2c+1)}.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// 2^x on the special-function unit, as FlashAttention's exp2f under --use_fast_math: ~2 ulp,
// results below 2^-126 flush to 0 (probabilities that small add nothing), exp2(-inf) = 0.
// (This build has no fast math: exp2f would add a denormal-range fixup to every score.)
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
// Two floats as bf16 (RNE), lo in the low half: the lower column of an A fragment register.
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  uint32_t u;
  memcpy(&u, &v, sizeof u);
  return u;
}

// ---- tiles ------------------------------------------------------------------------------------

// Shared (ROWS, hs + 8) <- rows [r0, r0 + ROWS) x [0, HS) of a bf16 matrix with row stride ld;
// rows at or past T are zero-filled. Asynchronous: part of the caller's next commit group.
template <int ROWS, int HS>
__device__ __forceinline__ void load_tile(bf16* dst, const bf16* src, int64_t ld, int r0, int T) {
  constexpr int kChunks = HS / 8;  // 16-byte chunks per row
  static_assert(ROWS * kChunks % kThreads == 0, "whole chunks per thread");
#pragma unroll
  for (int it = 0; it < ROWS * kChunks / kThreads; ++it) {
    const int i = it * kThreads + int(threadIdx.x), r = i / kChunks, c = i % kChunks;
    const bool valid = r0 + r < T;
    const bf16* g = valid ? src + int64_t(r0 + r) * ld + c * 8 : src;
    cp_async16(smem_addr(dst + r * padded(HS) + c * 8), g, valid);
  }
}
// Shared [0, N) <- src[r0, r0 + N) (fp32), zeros at or past T. Asynchronous as load_tile.
template <int N>
__device__ __forceinline__ void load_row_stats(float* dst, const float* src, int r0, int T) {
  static_assert(N <= kThreads, "one value per thread");
  if (threadIdx.x < N) {
    const int r = r0 + int(threadIdx.x);
    cp_async4(smem_addr(dst + threadIdx.x), r < T ? src + r : src, r < T);
  }
}

// acc (16 x N) = A B^T for the warp: A = 16 rows of (., HS) at `a`, B = N rows of (., HS) at `b`,
// both in shared memory with row stride hs + 8 (Q K^T, dO V^T, K Q^T, V dO^T).
template <int HS, int N>
__device__ __forceinline__ void warp_abt(float (&acc)[N / 8][4], const bf16* a, const bf16* b) {
  const int lane = int(threadIdx.x) % 32;
#pragma unroll
  for (int j = 0; j < N / 8; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  // ldmatrix.x4: lanes 8i..8i+7 address the rows of matrix i. A: matrices (rows 0-7 | 8-15) x
  // (k 0-7 | 8-15) in fragment order; B: (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), ...
  const uint32_t a0 = smem_addr(a + (lane % 16) * padded(HS) + (lane / 16) * 8);
  const uint32_t b0 = smem_addr(b + (lane % 8 + (lane / 16) * 8) * padded(HS) + (lane / 8) % 2 * 8);
#pragma unroll
  for (int kk = 0; kk < HS / 16; ++kk) {
    uint32_t af[4];
    ldmatrix_x4(af, a0 + kk * 16 * sizeof(bf16));
#pragma unroll
    for (int jp = 0; jp < N / 16; ++jp) {
      uint32_t bf[4];
      ldmatrix_x4(bf, b0 + (jp * 16 * padded(HS) + kk * 16) * sizeof(bf16));
      mma_bf16(acc[2 * jp], af, bf[0], bf[1]);
      mma_bf16(acc[2 * jp + 1], af, bf[2], bf[3]);
    }
  }
}

// acc (16 x HS) += P V for the warp: P (16 x N) in the accumulator layout of warp_abt (rounded to
// bf16 here: an m16n8 pair of accumulators is exactly one A fragment), V = N rows of (., HS) in
// shared memory (P V, dS K, P^T dO, dS^T Q). V is row-major along n, hence ldmatrix.trans.
template <int HS, int N>
__device__ __forceinline__ void warp_pv(float (&acc)[HS / 8][4], const float (&p)[N / 8][4],
                                        const bf16* v) {
  const int lane = int(threadIdx.x) % 32;
  // Matrices (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15), transposed.
  const uint32_t v0 = smem_addr(v + (lane % 8 + (lane / 8) % 2 * 8) * padded(HS) + (lane / 16) * 8);
#pragma unroll
  for (int kk = 0; kk < N / 16; ++kk) {
    const float(&lo)[4] = p[2 * kk];      // columns 16kk .. 16kk + 7
    const float(&hi)[4] = p[2 * kk + 1];  // columns 16kk + 8 .. 16kk + 15
    const uint32_t af[4] = {pack_bf16(lo[0], lo[1]), pack_bf16(lo[2], lo[3]),
                            pack_bf16(hi[0], hi[1]), pack_bf16(hi[2], hi[3])};
#pragma unroll
    for (int jp = 0; jp < HS / 16; ++jp) {
      uint32_t bf[4];
      ldmatrix_x4_trans(bf, v0 + (kk * 16 * padded(HS) + jp * 16) * sizeof(bf16));
      mma_bf16(acc[2 * jp], af, bf[0], bf[1]);
      mma_bf16(acc[2 * jp + 1], af, bf[2], bf[3]);
    }
  }
}

// dst[d], dst[d + 1] += g0, g1: one bf16 rounding of (old + g), as the other paths do.
__device__ __forceinline__ void accumulate_pair(bf16* dst, float g0, float g1) {
  __nv_bfloat162* p = reinterpret_cast<__nv_bfloat162*>(dst);
  const float2 old = __bfloat1622float2(*p);
  *p = __floats2bfloat162_rn(old.x + g0, old.y + g1);
}

// ---- kernels ----------------------------------------------------------------------------------

template <int HS>
constexpr size_t forward_smem() {
  return sizeof(bf16) * size_t(kBlockRows + 4 * fwd_step(HS)) * padded(HS);
}
template <int HS>
constexpr size_t dq_smem() {
  return sizeof(bf16) * size_t(2 * kBlockRows + 4 * bwd_step(HS)) * padded(HS);
}
template <int HS>
constexpr size_t dkdv_smem() {
  return dq_smem<HS>() + sizeof(float) * 4 * bwd_step(HS);
}
// Every head size fits the smallest opt-in limit of the architectures built (sm_89 / sm_86:
// 99 KiB per block; sm_80 163, sm_90 227), so the path never fails to launch for shared memory.
constexpr size_t kSmallestSmemOptIn = 99 * 1024;
static_assert(forward_smem<128>() <= kSmallestSmemOptIn && dq_smem<128>() <= kSmallestSmemOptIn &&
                  dkdv_smem<128>() <= kSmallestSmemOptIn,
              "the mma attention's shared memory exceeds sm_89's 99 KiB");

// grid (NH, B, ceil(T / 64)), block kThreads, dynamic smem forward_smem<HS>():
// Q (64, hs + 8), then 2 x {K, V} (64, hs + 8).
template <int HS>
__global__ void __launch_bounds__(kThreads)
    mma_forward_kernel(bf16* __restrict__ out, float* __restrict__ lse,
                       const bf16* __restrict__ qkv, int T, int C, int NH, float scale_log2) {
  constexpr int LD = padded(HS), KT = fwd_step(HS);
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* qs = reinterpret_cast<bf16*>(smem);
  bf16* kv = qs + kBlockRows * LD;
  const int q0 = (int(gridDim.z) - 1 - int(blockIdx.z)) * kBlockRows;  // longest rows first
  const int h = int(blockIdx.x), b = int(blockIdx.y);
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int row0 = q0 + warp * 16 + lane / 4;  // this thread's queries: row0, row0 + 8
  const int64_t ld = 3 * int64_t(C);
  const bf16* q = qkv + int64_t(b) * T * ld + int64_t(h) * HS;  // (T, hs), row stride 3C
  const bf16* k = q + C;
  const bf16* v = q + 2 * C;
  const int steps = (min(q0 + kBlockRows, T) + KT - 1) / KT;  // causal: up to the diagonal

  load_tile<kBlockRows, HS>(qs, q, ld, q0, T);
  load_tile<KT, HS>(kv, k, ld, 0, T);
  load_tile<KT, HS>(kv + KT * LD, v, ld, 0, T);
  cp_async_commit();

  float o[HS / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY};  // running max of the scores, times log2(e)
  float l[2] = {0.0f, 0.0f};            // this thread's part of the running sum
  for (int n = 0; n < steps; ++n) {
    const int kv0 = n * KT;
    const bf16* ks = kv + (n % 2) * 2 * KT * LD;
    const bf16* vs = ks + KT * LD;
    if (n + 1 < steps) {  // the other buffer was released by the previous step's final barrier
      bf16* next = kv + ((n + 1) % 2) * 2 * KT * LD;
      load_tile<KT, HS>(next, k, ld, kv0 + KT, T);
      load_tile<KT, HS>(next + KT * LD, v, ld, kv0 + KT, T);
    }
    cp_async_commit();
    cp_async_wait<1>();  // this step's group has landed (for this thread's copies) ...
    __syncthreads();     // ... and for everyone's

    float s[KT / 8][4];
    warp_abt<HS, KT>(s, qs + warp * 16 * LD, ks);
    if (kv0 + KT - 1 > q0) {  // the diagonal step: key j > query t is masked
#pragma unroll
      for (int j = 0; j < KT / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (kv0 + 8 * j + 2 * (lane % 4) + e % 2 > row0 + 8 * (e / 2)) s[j][e] = -INFINITY;
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {  // elements 2r, 2r + 1 of every tile are row row0 + 8r
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < KT / 8; ++j) mx = fmaxf(mx, fmaxf(s[j][2 * r], s[j][2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 1));  // the row's 4 threads (a quad)
      mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 2));
      const float m_new = fmaxf(m[r], mx * scale_log2);  // finite: key kv0 <= row is unmasked
      const float alpha = exp2_approx(m[r] - m_new);     // 0 on the first step
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < KT / 8; ++j)
#pragma unroll
        for (int e = 2 * r; e < 2 * r + 2; ++e) {
          s[j][e] = exp2_approx(fmaf(s[j][e], scale_log2, -m_new));  // masked: 2^-inf = 0
          sum += s[j][e];
        }
      l[r] = fmaf(l[r], alpha, sum);
      m[r] = m_new;
#pragma unroll
      for (int d = 0; d < HS / 8; ++d) {
        o[d][2 * r] *= alpha;
        o[d][2 * r + 1] *= alpha;
      }
    }
    warp_pv<HS, KT>(o, s, vs);
    __syncthreads();  // every warp is done with this buffer before the next step refills it
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int t = row0 + 8 * r;
    float sum = l[r] + __shfl_xor_sync(0xFFFFFFFFu, l[r], 1);  // same bits in all 4 lanes
    sum += __shfl_xor_sync(0xFFFFFFFFu, sum, 2);
    if (t >= T) continue;
    const float inv = __frcp_rn(sum);
    bf16* orow = out + (int64_t(b) * T + t) * C + int64_t(h) * HS + 2 * (lane % 4);
#pragma unroll
    for (int d = 0; d < HS / 8; ++d)
      *reinterpret_cast<__nv_bfloat162*>(orow + 8 * d) =
          __floats2bfloat162_rn(o[d][2 * r] * inv, o[d][2 * r + 1] * inv);
    if (lane % 4 == 0) lse[(int64_t(b) * NH + h) * T + t] = m[r] * kLn2 + logf(sum);
  }
}

// grid (NH, B, ceil(T / 64)), block kThreads, dynamic smem dq_smem<HS>(): Q, dO (64, hs + 8),
// then 2 x {K, V} (KT, hs + 8). dqkv's q part += dQ for the block's 64 queries.
template <int HS>
__global__ void __launch_bounds__(kThreads)
    mma_backward_dq_kernel(bf16* __restrict__ dqkv, const float* __restrict__ D,
                           const bf16* __restrict__ dout, const bf16* __restrict__ qkv,
                           const float* __restrict__ lse, int T, int C, int NH, float scale,
                           float scale_log2) {
  constexpr int LD = padded(HS), KT = bwd_step(HS);
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* qs = reinterpret_cast<bf16*>(smem);
  bf16* dos = qs + kBlockRows * LD;
  bf16* kv = dos + kBlockRows * LD;
  const int q0 = (int(gridDim.z) - 1 - int(blockIdx.z)) * kBlockRows;
  const int h = int(blockIdx.x), b = int(blockIdx.y);
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int row0 = q0 + warp * 16 + lane / 4;
  const int64_t ld = 3 * int64_t(C), bh = int64_t(b) * NH + h;
  const bf16* q = qkv + int64_t(b) * T * ld + int64_t(h) * HS;
  const bf16* k = q + C;
  const bf16* v = q + 2 * C;
  const bf16* dO = dout + int64_t(b) * T * C + int64_t(h) * HS;  // (T, hs), row stride C
  const int steps = (min(q0 + kBlockRows, T) + KT - 1) / KT;

  load_tile<kBlockRows, HS>(qs, q, ld, q0, T);
  load_tile<kBlockRows, HS>(dos, dO, C, q0, T);
  load_tile<KT, HS>(kv, k, ld, 0, T);
  load_tile<KT, HS>(kv + KT * LD, v, ld, 0, T);
  cp_async_commit();

  float lse2[2], Dr[2];  // per row: lse * log2(e) and D (0 past T: those rows are not written)
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int t = row0 + 8 * r;
    lse2[r] = t < T ? lse[bh * T + t] * kLog2e : 0.0f;
    Dr[r] = t < T ? D[bh * T + t] : 0.0f;
  }
  float dq[HS / 8][4] = {};
  for (int n = 0; n < steps; ++n) {
    const int kv0 = n * KT;
    const bf16* ks = kv + (n % 2) * 2 * KT * LD;
    const bf16* vs = ks + KT * LD;
    if (n + 1 < steps) {
      bf16* next = kv + ((n + 1) % 2) * 2 * KT * LD;
      load_tile<KT, HS>(next, k, ld, kv0 + KT, T);
      load_tile<KT, HS>(next + KT * LD, v, ld, kv0 + KT, T);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();

    float s[KT / 8][4], dp[KT / 8][4];
    warp_abt<HS, KT>(s, qs + warp * 16 * LD, ks);
    warp_abt<HS, KT>(dp, dos + warp * 16 * LD, vs);
    const bool diagonal = kv0 + KT - 1 > q0;
#pragma unroll
    for (int j = 0; j < KT / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e / 2;
        const bool masked = diagonal && kv0 + 8 * j + 2 * (lane % 4) + e % 2 > row0 + 8 * r;
        const float p = masked ? 0.0f : exp2_approx(fmaf(s[j][e], scale_log2, -lse2[r]));
        s[j][e] = p * (dp[j][e] - Dr[r]);  // dS
      }
    warp_pv<HS, KT>(dq, s, ks);  // dQ += dS K
    __syncthreads();
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int t = row0 + 8 * r;
    if (t >= T) continue;
    bf16* dqrow = dqkv + (int64_t(b) * T + t) * ld + int64_t(h) * HS + 2 * (lane % 4);
#pragma unroll
    for (int d = 0; d < HS / 8; ++d)
      accumulate_pair(dqrow + 8 * d, dq[d][2 * r] * scale, dq[d][2 * r + 1] * scale);
  }
}

// grid (NH, B, ceil(T / 64)), block kThreads, dynamic smem dkdv_smem<HS>(): K, V (64, hs + 8),
// 2 x {Q, dO} (QT, hs + 8), then 2 x {lse, D} (QT) fp32. dqkv's k and v parts += dK, dV for the
// block's 64 keys.
template <int HS>
__global__ void __launch_bounds__(kThreads, 2)
    mma_backward_dkdv_kernel(bf16* __restrict__ dqkv, const float* __restrict__ D,
                             const bf16* __restrict__ dout, const bf16* __restrict__ qkv,
                             const float* __restrict__ lse, int T, int C, int NH, float scale,
                             float scale_log2) {
  constexpr int LD = padded(HS), QT = bwd_step(HS);
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* ks = reinterpret_cast<bf16*>(smem);
  bf16* vs = ks + kBlockRows * LD;
  bf16* qdo = vs + kBlockRows * LD;                           // 2 x {Q, dO}
  float* stats = reinterpret_cast<float*>(qdo + 4 * QT * LD);  // 2 x {lse, D}
  const int j0 = int(blockIdx.z) * kBlockRows;  // first key tiles see the most queries: first
  const int h = int(blockIdx.x), b = int(blockIdx.y);
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int key0 = j0 + warp * 16 + lane / 4;  // this thread's keys: key0, key0 + 8
  const int64_t ld = 3 * int64_t(C), bh = int64_t(b) * NH + h;
  const bf16* q = qkv + int64_t(b) * T * ld + int64_t(h) * HS;
  const bf16* dO = dout + int64_t(b) * T * C + int64_t(h) * HS;
  const float* lse_bh = lse + bh * T;
  const float* D_bh = D + bh * T;
  const int steps = (T - j0 + QT - 1) / QT;  // causal: queries from the diagonal (j0) to T

  load_tile<kBlockRows, HS>(ks, q + C, ld, j0, T);
  load_tile<kBlockRows, HS>(vs, q + 2 * C, ld, j0, T);
  load_tile<QT, HS>(qdo, q, ld, j0, T);
  load_tile<QT, HS>(qdo + QT * LD, dO, C, j0, T);
  load_row_stats<QT>(stats, lse_bh, j0, T);
  load_row_stats<QT>(stats + QT, D_bh, j0, T);
  cp_async_commit();

  float dk[HS / 8][4] = {}, dv[HS / 8][4] = {};
  for (int n = 0; n < steps; ++n) {
    const int i0 = j0 + n * QT;
    const bf16* qb = qdo + (n % 2) * 2 * QT * LD;
    const bf16* dob = qb + QT * LD;
    const float* lses = stats + (n % 2) * 2 * QT;
    const float* Ds = lses + QT;
    if (n + 1 < steps) {
      bf16* next = qdo + ((n + 1) % 2) * 2 * QT * LD;
      float* next_stats = stats + ((n + 1) % 2) * 2 * QT;
      load_tile<QT, HS>(next, q, ld, i0 + QT, T);
      load_tile<QT, HS>(next + QT * LD, dO, C, i0 + QT, T);
      load_row_stats<QT>(next_stats, lse_bh, i0 + QT, T);
      load_row_stats<QT>(next_stats + QT, D_bh, i0 + QT, T);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();

    float s[QT / 8][4], dp[QT / 8][4];  // S^T, dP^T: rows = the warp's keys, columns = queries
    warp_abt<HS, QT>(s, ks + warp * 16 * LD, qb);
    warp_abt<HS, QT>(dp, vs + warp * 16 * LD, dob);
    // Masks: query i < key j (steps crossing the block's diagonal) and i >= T (the ragged end;
    // its rows are zero-filled, this keeps them out by index rather than by value).
    const bool edge = i0 < j0 + kBlockRows - 1 || i0 + QT > T;
#pragma unroll
    for (int j = 0; j < QT / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = 8 * j + 2 * (lane % 4) + e % 2, i = i0 + col;
        const bool masked = edge && (key0 + 8 * (e / 2) > i || i >= T);
        const float lse2 = lses[col] * kLog2e;
        const float p = masked ? 0.0f : exp2_approx(fmaf(s[j][e], scale_log2, -lse2));
        s[j][e] = p;                          // P^T
        dp[j][e] = p * (dp[j][e] - Ds[col]);  // dS^T
      }
    warp_pv<HS, QT>(dv, s, dob);  // dV += P^T dO
    warp_pv<HS, QT>(dk, dp, qb);  // dK += dS^T Q
    __syncthreads();
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int j = key0 + 8 * r;
    if (j >= T) continue;
    bf16* dkrow = dqkv + (int64_t(b) * T + j) * ld + C + int64_t(h) * HS + 2 * (lane % 4);
#pragma unroll
    for (int d = 0; d < HS / 8; ++d) {
      accumulate_pair(dkrow + 8 * d, dk[d][2 * r] * scale, dk[d][2 * r + 1] * scale);
      accumulate_pair(dkrow + C + 8 * d, dv[d][2 * r], dv[d][2 * r + 1]);
    }
  }
}

// ---- host side --------------------------------------------------------------------------------

bool aligned16(const void* p) { return p != nullptr && reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// 1/sqrt(hs) in fp32, as the CPU twin and the other paths compute it.
float score_scale(int hs) { return 1.0f / std::sqrt(float(hs)); }

dim3 grid_for(int B, int T, int NH) {
  return dim3(unsigned(NH), unsigned(B), unsigned((T + kBlockRows - 1) / kBlockRows));
}

// Above 48 KiB of dynamic shared memory a kernel must opt in (sm_80: 163 KiB, sm_89: 99 KiB).
template <class Kernel>
cudaError_t allow_smem(Kernel kernel, size_t bytes) {
  if (bytes <= kDefaultSmem) return cudaSuccess;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
}

// Raises eco::Error for a call the path does not take, naming the shapes.
[[noreturn]] void reject(const char* what, int B, int T, int C, int NH) {
  char ctx[384];
  std::snprintf(ctx, sizeof ctx,
                "B=%d T=%d C=%d NH=%d: the mma path needs B, T, NH >= 1, B <= 65535, "
                "T <= 65535 * 64, C %% NH == 0, head size C/NH one of 32, 64, 128, 16-byte aligned "
                "non-null bf16 buffers and non-null lse / D (use the GEMM path or the flash "
                "kernel otherwise)",
                B, T, C, NH);
  fail(__FILE__, __LINE__, what, "cudaErrorInvalidValue", "unsupported call", ctx);
}

// A launch's status as eco::Error naming the kernel and the shapes.
void check_launch(cudaError_t e, const char* what, int B, int T, int C, int NH) {
  if (e == cudaSuccess) return;
  char ctx[96];
  std::snprintf(ctx, sizeof ctx, "B=%d T=%d C=%d NH=%d", B, T, C, NH);
  fail(__FILE__, __LINE__, what, cudaGetErrorName(e), cudaGetErrorString(e), ctx);
}

template <int HS>
cudaError_t launch_forward(bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH,
                           cudaStream_t s) {
  constexpr size_t smem = forward_smem<HS>();
  if (const cudaError_t e = allow_smem(mma_forward_kernel<HS>, smem); e != cudaSuccess) return e;
  mma_forward_kernel<HS><<<grid_for(B, T, NH), kThreads, smem, s>>>(out, lse, qkv, T, C, NH,
                                                                    score_scale(HS) * kLog2e);
  return cudaGetLastError();
}

template <int HS>
cudaError_t launch_backward(bf16* dqkv, const float* D, const bf16* dout, const bf16* qkv,
                            const float* lse, int B, int T, int C, int NH, cudaStream_t s) {
  constexpr size_t smem_dq = dq_smem<HS>(), smem_dkdv = dkdv_smem<HS>();
  if (const cudaError_t e = allow_smem(mma_backward_dq_kernel<HS>, smem_dq); e != cudaSuccess)
    return e;
  if (const cudaError_t e = allow_smem(mma_backward_dkdv_kernel<HS>, smem_dkdv); e != cudaSuccess)
    return e;
  const float scale = score_scale(HS), scale_log2 = scale * kLog2e;
  mma_backward_dq_kernel<HS><<<grid_for(B, T, NH), kThreads, smem_dq, s>>>(
      dqkv, D, dout, qkv, lse, T, C, NH, scale, scale_log2);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  mma_backward_dkdv_kernel<HS><<<grid_for(B, T, NH), kThreads, smem_dkdv, s>>>(
      dqkv, D, dout, qkv, lse, T, C, NH, scale, scale_log2);
  return cudaGetLastError();
}

}  // namespace

bool attention_mma_supported(int B, int T, int C, int NH,
                             std::initializer_list<const void*> matrices) {
  if (!attention_mma_shape_ok(B, T, C, NH)) return false;
  for (const void* p : matrices)
    if (!aligned16(p)) return false;
  return true;
}

void attention_mma_forward(bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH,
                           cudaStream_t s) {
  if (!attention_mma_supported(B, T, C, NH, {out, qkv}) || lse == nullptr)
    reject("attention_mma_forward", B, T, C, NH);
  cudaError_t e = cudaErrorInvalidValue;
  switch (C / NH) {
    case 32: e = launch_forward<32>(out, lse, qkv, B, T, C, NH, s); break;
    case 64: e = launch_forward<64>(out, lse, qkv, B, T, C, NH, s); break;
    case 128: e = launch_forward<128>(out, lse, qkv, B, T, C, NH, s); break;
  }
  check_launch(e, "attention_mma_forward", B, T, C, NH);
}

void attention_mma_backward(bf16* dqkv, float* D, const bf16* dout, const bf16* qkv,
                            const bf16* out, const float* lse, int B, int T, int C, int NH,
                            cudaStream_t s) {
  if (!attention_mma_supported(B, T, C, NH, {dqkv, dout, qkv, out}) || lse == nullptr ||
      D == nullptr)
    reject("attention_mma_backward", B, T, C, NH);
  check_launch(attention_rowdot(D, dout, out, B, T, C, NH, s),
               "attention_mma_backward: D = rowsum(dout * out)", B, T, C, NH);
  cudaError_t e = cudaErrorInvalidValue;
  switch (C / NH) {
    case 32: e = launch_backward<32>(dqkv, D, dout, qkv, lse, B, T, C, NH, s); break;
    case 64: e = launch_backward<64>(dqkv, D, dout, qkv, lse, B, T, C, NH, s); break;
    case 128: e = launch_backward<128>(dqkv, D, dout, qkv, lse, B, T, C, NH, s); break;
  }
  check_launch(e, "attention_mma_backward", B, T, C, NH);
}

}  // namespace eco::cuda
