// Causal attention on tensor cores (attention_mma.cuh): FlashAttention-2's forward and a
// deterministic two-kernel backward, every product an mma.sync.m16n8k16 (bf16 in, fp32 out).
// Grouped-query (KVH key/value heads, each read by NH / KVH query heads), optionally within a
// sliding window, scores scaled by q_scalar^-1/2 (src/base/math/attention_shape.h); multi-head
// attention is the case KVH = NH, window 0, q_scalar = hs.
//
// Launch assumptions (attention_mma_supported checks them on the host):
//   - hs is a template parameter, one of 32, 64, 128, 256 (a multiple of 16: the k-steps of
//     Q K^T and the n-tile pairs of P V).
//   - qkv, out, dout, dqkv are 16-byte aligned: tiles move by cp.async in 16-byte chunks, and row
//     starts ((NH + 2 KVH) hs or NH hs elements apart) and head offsets (multiples of hs) keep
//     that alignment (hs % 8 == 0).
//   - lse and D are plain fp32 arrays; any T >= 1: rows of a tile at or past T are zero-filled,
//     never read from memory, and their results are never written.
//   - grid (NH, B, ceil(T / 64)) (dkdv: (KVH x slices, B, ceil(T / 64))): B <= 65535 and
//     T <= 65535 * 64; 128 threads (4 warps) per block. The tile index is the slowest grid
//     dimension, so that blocks start in order of work over all heads (see "Work order").
//
// Tiles. Every block owns 64 rows (16 per warp: one mma row block), queries of one query head in
// the forward and dq kernels, keys of one kv head in dkdv, and streams the other side in steps
// through a double buffer (the next step's cp.async runs while this one computes). Shared rows
// are padded to hs + 8 elements, so the 8 row addresses of each ldmatrix phase fall into distinct
// 16-byte bank groups. Step rows (fwd_step, bwd_step) shrink with hs: registers (a step's scores
// cost step / 2 fp32 per thread per matrix) and shared memory (hs 256: 99 KiB, sm_89's limit).
//   forward: S = Q K^T (16 x step per warp), online softmax in fp32 registers (running max in
//            log2 units, 2^x on the SFU with scale * log2(e) pre-multiplied), P rounded to bf16
//            as the A operand of O += P V straight from the S accumulators (no shared memory).
//   dq:      per query block, over key steps: S and dP = dO V^T, P = exp2(S * scale log2e - lse
//            log2e) from the saved lse, dS = P (dP - D), dQ += dS K.
//   dkdv:    per key block of a kv head, over the query heads of its group in order and their
//            query steps: the transposed products S^T = K Q^T and dP^T = V dO^T, then dV += P^T dO
//            and dK += dS^T Q, again from the accumulators (lse and D of a step's queries read
//            from global memory). At hs 256 dK and dV of 16 keys x 256 would hold 256 fp32
//            registers per thread: the block computes a slice of their columns (dkdv_slices
//            blocks per key block, each recomputing S^T and dP^T: 1.5x the products, no spills).
//            P and dS are recomputed in both kernels (7 products instead of FA2's 5) so that
//            every gradient element has one owner: no atomics, fixed summation order,
//            bit-identical runs. D = rowsum(dout * out) comes first (attention_rowdot).
// Causality and the window: a query block streams keys from the first one its first query sees
// (t - window + 1, else 0) to its diagonal, a key block queries from its diagonal to the last one
// that sees its last key (j + window - 1, else T - 1): steps wholly outside every row's window
// are never loaded (a windowed layer costs O(T window)), and only steps that cross the diagonal,
// the window's edge or the ragged end of T mask by index (attention_sees). A row that has seen
// no key yet (a step before its window opens) keeps its running max at -inf; the softmax then
// exponentiates against 0, so exp2 never sees inf - inf.
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

#include "base/math/attention_mma_shapes.h"
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

// Rows per streamed step: keys (forward, dq) or queries (dkdv). A step's scores cost step / 2
// fp32 registers per thread per matrix (the backward holds two, plus dq or dk and dv), hence
// fewer rows as hs grows; at hs 256 also to keep shared memory within 99 KiB.
constexpr int fwd_step(int hs) { return hs <= 128 ? 64 : 32; }
constexpr int bwd_step(int hs) { return hs <= 64 ? 64 : hs <= 128 ? 32 : 16; }
// The column slices of dK and dV a dkdv block computes (see the file comment).
constexpr int dkdv_slices(int hs) { return hs <= 128 ? 1 : 2; }
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

// acc (16 x COLS) += P V for the warp: P (16 x N) in the accumulator layout of warp_abt (rounded
// to bf16 here: an m16n8 pair of accumulators is exactly one A fragment), V = N rows of COLS
// columns at v in shared memory with row stride hs + 8 (P V, dS K, P^T dO, dS^T Q: all of a head,
// COLS = HS, or a slice of its columns). V is row-major along n, hence ldmatrix.trans.
template <int HS, int COLS, int N>
__device__ __forceinline__ void warp_pv(float (&acc)[COLS / 8][4], const float (&p)[N / 8][4],
                                        const bf16* v) {
  static_assert(COLS % 16 == 0 && COLS <= HS, "whole n-tile pairs of the head");
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
    for (int jp = 0; jp < COLS / 16; ++jp) {
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
  return dq_smem<HS>();  // K, V (64 rows), 2 x {Q, dO} (step rows)
}
// Every head size fits the smallest opt-in limit of the architectures built (sm_89 / sm_86:
// 99 KiB per block; sm_80 163, sm_90 227), so the path never fails to launch for shared memory.
constexpr size_t kSmallestSmemOptIn = 99 * 1024;
template <int HS>
constexpr bool fits_smallest_opt_in() {
  return forward_smem<HS>() <= kSmallestSmemOptIn && dq_smem<HS>() <= kSmallestSmemOptIn &&
         dkdv_smem<HS>() <= kSmallestSmemOptIn;
}
static_assert(fits_smallest_opt_in<128>() && fits_smallest_opt_in<256>(),
              "the mma attention's shared memory exceeds sm_89's 99 KiB");

// Whether a step of keys [kv0, kv0 + KT) of a query block [q0, q0 + 64) needs masking by index:
// it crosses the diagonal (a key past q0) or the window's left edge (a key before the first one
// query q0 + 63 sees).
template <int KT>
__device__ __forceinline__ bool key_step_masked(int kv0, int q0, int window) {
  return kv0 + KT - 1 > q0 ||
         (window > 0 && kv0 < attention_first_key(q0 + kBlockRows - 1, window));
}

// grid (NH, B, ceil(T / 64)), block kThreads, dynamic smem forward_smem<HS>():
// Q (64, hs + 8), then 2 x {K, V} (KT, hs + 8).
template <int HS>
__global__ void __launch_bounds__(kThreads)
    mma_forward_kernel(bf16* __restrict__ out, float* __restrict__ lse,
                       const bf16* __restrict__ qkv, int T, AttentionShape a, float scale_log2) {
  constexpr int LD = padded(HS), KT = fwd_step(HS);
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* qs = reinterpret_cast<bf16*>(smem);
  bf16* kv = qs + kBlockRows * LD;
  const int q0 = (int(gridDim.z) - 1 - int(blockIdx.z)) * kBlockRows;  // longest rows first
  const int h = int(blockIdx.x), b = int(blockIdx.y), g = h / a.group();
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int row0 = q0 + warp * 16 + lane / 4;  // this thread's queries: row0, row0 + 8
  const int64_t ld = a.qkv_width();
  const bf16* seq = qkv + int64_t(b) * T * ld;
  const bf16* q = seq + a.q_col(h);  // (T, hs), row stride QKV
  const bf16* k = seq + a.k_col(g);
  const bf16* v = seq + a.v_col(g);
  // Keys from the first one query q0 sees to the block's diagonal.
  const int kv_begin = attention_first_key(q0, a.window);
  const int steps = (min(q0 + kBlockRows, T) - kv_begin + KT - 1) / KT;

  load_tile<kBlockRows, HS>(qs, q, ld, q0, T);
  load_tile<KT, HS>(kv, k, ld, kv_begin, T);
  load_tile<KT, HS>(kv + KT * LD, v, ld, kv_begin, T);
  cp_async_commit();

  float o[HS / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY};  // running max of the scores, times log2(e)
  float l[2] = {0.0f, 0.0f};            // this thread's part of the running sum
  for (int n = 0; n < steps; ++n) {
    const int kv0 = kv_begin + n * KT;
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
    if (key_step_masked<KT>(kv0, q0, a.window)) {  // keys past the row or before its window
#pragma unroll
      for (int j = 0; j < KT / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (!attention_sees(row0 + 8 * (e / 2), kv0 + 8 * j + 2 * (lane % 4) + e % 2, a.window))
            s[j][e] = -INFINITY;
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {  // elements 2r, 2r + 1 of every tile are row row0 + 8r
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < KT / 8; ++j) mx = fmaxf(mx, fmaxf(s[j][2 * r], s[j][2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 1));  // the row's 4 threads (a quad)
      mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 2));
      const float m_new = fmaxf(m[r], mx * scale_log2);
      // -inf while the row has seen no key (only before its window opens): exponentiate against
      // 0 then (every masked score gives 2^-inf = 0).
      const float m_base = m_new == -INFINITY ? 0.0f : m_new;
      const float alpha = exp2_approx(m[r] - m_base);  // 0 on the row's first keys
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < KT / 8; ++j)
#pragma unroll
        for (int e = 2 * r; e < 2 * r + 2; ++e) {
          s[j][e] = exp2_approx(fmaf(s[j][e], scale_log2, -m_base));  // masked: 2^-inf = 0
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
    warp_pv<HS, HS, KT>(o, s, vs);
    __syncthreads();  // every warp is done with this buffer before the next step refills it
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int t = row0 + 8 * r;
    float sum = l[r] + __shfl_xor_sync(0xFFFFFFFFu, l[r], 1);  // same bits in all 4 lanes
    sum += __shfl_xor_sync(0xFFFFFFFFu, sum, 2);
    if (t >= T) continue;
    const float inv = __frcp_rn(sum);
    bf16* orow = out + (int64_t(b) * T + t) * a.out_width() + a.q_col(h) + 2 * (lane % 4);
#pragma unroll
    for (int d = 0; d < HS / 8; ++d)
      *reinterpret_cast<__nv_bfloat162*>(orow + 8 * d) =
          __floats2bfloat162_rn(o[d][2 * r] * inv, o[d][2 * r + 1] * inv);
    if (lane % 4 == 0) lse[(int64_t(b) * a.NH + h) * T + t] = m[r] * kLn2 + logf(sum);
  }
}

// grid (NH, B, ceil(T / 64)), block kThreads, dynamic smem dq_smem<HS>(): Q, dO (64, hs + 8),
// then 2 x {K, V} (KT, hs + 8). dqkv's q part += dQ for the block's 64 queries.
template <int HS>
__global__ void __launch_bounds__(kThreads)
    mma_backward_dq_kernel(bf16* __restrict__ dqkv, const float* __restrict__ D,
                           const bf16* __restrict__ dout, const bf16* __restrict__ qkv,
                           const float* __restrict__ lse, int T, AttentionShape a, float scale,
                           float scale_log2) {
  constexpr int LD = padded(HS), KT = bwd_step(HS);
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* qs = reinterpret_cast<bf16*>(smem);
  bf16* dos = qs + kBlockRows * LD;
  bf16* kv = dos + kBlockRows * LD;
  const int q0 = (int(gridDim.z) - 1 - int(blockIdx.z)) * kBlockRows;
  const int h = int(blockIdx.x), b = int(blockIdx.y), g = h / a.group();
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int row0 = q0 + warp * 16 + lane / 4;
  const int64_t ld = a.qkv_width(), ldo = a.out_width(), bh = int64_t(b) * a.NH + h;
  const bf16* seq = qkv + int64_t(b) * T * ld;
  const bf16* q = seq + a.q_col(h);
  const bf16* k = seq + a.k_col(g);
  const bf16* v = seq + a.v_col(g);
  const bf16* dO = dout + int64_t(b) * T * ldo + a.q_col(h);  // (T, hs), row stride NH hs
  const int kv_begin = attention_first_key(q0, a.window);
  const int steps = (min(q0 + kBlockRows, T) - kv_begin + KT - 1) / KT;

  load_tile<kBlockRows, HS>(qs, q, ld, q0, T);
  load_tile<kBlockRows, HS>(dos, dO, ldo, q0, T);
  load_tile<KT, HS>(kv, k, ld, kv_begin, T);
  load_tile<KT, HS>(kv + KT * LD, v, ld, kv_begin, T);
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
    const int kv0 = kv_begin + n * KT;
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
    const bool edge = key_step_masked<KT>(kv0, q0, a.window);
#pragma unroll
    for (int j = 0; j < KT / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e / 2;
        const bool masked =
            edge && !attention_sees(row0 + 8 * r, kv0 + 8 * j + 2 * (lane % 4) + e % 2, a.window);
        const float p = masked ? 0.0f : exp2_approx(fmaf(s[j][e], scale_log2, -lse2[r]));
        s[j][e] = p * (dp[j][e] - Dr[r]);  // dS
      }
    warp_pv<HS, HS, KT>(dq, s, ks);  // dQ += dS K
    __syncthreads();
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int t = row0 + 8 * r;
    if (t >= T) continue;
    bf16* dqrow = dqkv + (int64_t(b) * T + t) * ld + a.q_col(h) + 2 * (lane % 4);
#pragma unroll
    for (int d = 0; d < HS / 8; ++d)
      accumulate_pair(dqrow + 8 * d, dq[d][2 * r] * scale, dq[d][2 * r + 1] * scale);
  }
}

// grid (KVH * dkdv_slices(HS), B, ceil(T / 64)), block kThreads, dynamic smem dkdv_smem<HS>():
// K, V (64, hs + 8), then 2 x {Q, dO} (QT, hs + 8). dqkv's k and v parts of kv head
// blockIdx.x / slices += dK, dV (columns of slice blockIdx.x % slices) for the block's 64 keys,
// summed over the group's query heads in order.
template <int HS>
__global__ void __launch_bounds__(kThreads, 2)
    mma_backward_dkdv_kernel(bf16* __restrict__ dqkv, const float* __restrict__ D,
                             const bf16* __restrict__ dout, const bf16* __restrict__ qkv,
                             const float* __restrict__ lse, int T, AttentionShape a, float scale,
                             float scale_log2) {
  constexpr int LD = padded(HS), QT = bwd_step(HS), COLS = HS / dkdv_slices(HS);
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* ks = reinterpret_cast<bf16*>(smem);
  bf16* vs = ks + kBlockRows * LD;
  bf16* qdo = vs + kBlockRows * LD;  // 2 x {Q, dO}
  const int j0 = int(blockIdx.z) * kBlockRows;  // first key tiles see the most queries: first
  const int g = int(blockIdx.x) / dkdv_slices(HS), col0 = int(blockIdx.x) % dkdv_slices(HS) * COLS;
  const int b = int(blockIdx.y);
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int key0 = j0 + warp * 16 + lane / 4;  // this thread's keys: key0, key0 + 8
  const int64_t ld = a.qkv_width(), ldo = a.out_width();
  const bf16* seq = qkv + int64_t(b) * T * ld;
  // Queries from the diagonal (j0) to the last one that sees the block's last key, for each of
  // the group's query heads: the steps of all heads run as one sequence through the buffers.
  const int i_end = attention_query_end(min(j0 + kBlockRows, T) - 1, a.window, T);
  const int head_steps = (i_end - j0 + QT - 1) / QT, steps = a.group() * head_steps;
  const int h0 = g * a.group();
  const auto q_of = [&](int n) { return seq + a.q_col(h0 + n / head_steps); };
  const auto dO_of = [&](int n) {
    return dout + int64_t(b) * T * ldo + a.q_col(h0 + n / head_steps);
  };
  const auto i0_of = [&](int n) { return j0 + n % head_steps * QT; };

  load_tile<kBlockRows, HS>(ks, seq + a.k_col(g), ld, j0, T);
  load_tile<kBlockRows, HS>(vs, seq + a.v_col(g), ld, j0, T);
  load_tile<QT, HS>(qdo, q_of(0), ld, j0, T);
  load_tile<QT, HS>(qdo + QT * LD, dO_of(0), ldo, j0, T);
  cp_async_commit();

  float dk[COLS / 8][4] = {}, dv[COLS / 8][4] = {};
  for (int n = 0; n < steps; ++n) {
    const int i0 = i0_of(n);
    const int64_t bh = int64_t(b) * a.NH + h0 + n / head_steps;
    const bf16* qb = qdo + (n % 2) * 2 * QT * LD;
    const bf16* dob = qb + QT * LD;
    if (n + 1 < steps) {
      bf16* next = qdo + ((n + 1) % 2) * 2 * QT * LD;
      load_tile<QT, HS>(next, q_of(n + 1), ld, i0_of(n + 1), T);
      load_tile<QT, HS>(next + QT * LD, dO_of(n + 1), ldo, i0_of(n + 1), T);
    }
    cp_async_commit();
    // lse * log2(e) and D of this thread's query columns (0 past T), while the copies land.
    float lse2[QT / 8][2], Dc[QT / 8][2];
#pragma unroll
    for (int j = 0; j < QT / 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int i = i0 + 8 * j + 2 * (lane % 4) + e;
        lse2[j][e] = i < T ? lse[bh * T + i] * kLog2e : 0.0f;
        Dc[j][e] = i < T ? D[bh * T + i] : 0.0f;
      }
    cp_async_wait<1>();
    __syncthreads();

    float s[QT / 8][4], dp[QT / 8][4];  // S^T, dP^T: rows = the warp's keys, columns = queries
    warp_abt<HS, QT>(s, ks + warp * 16 * LD, qb);
    warp_abt<HS, QT>(dp, vs + warp * 16 * LD, dob);
    // Masks: query i < key j (steps crossing the block's diagonal), i >= T (the ragged end; its
    // rows are zero-filled, this keeps them out by index rather than by value) and i past the
    // window of key j (steps reaching past the window of the block's first key).
    const bool edge = i0 < j0 + kBlockRows - 1 || i0 + QT > T ||
                      (a.window > 0 && i0 + QT - 1 >= j0 + a.window);
#pragma unroll
    for (int j = 0; j < QT / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = i0 + 8 * j + 2 * (lane % 4) + e % 2;
        const bool masked = edge && (i >= T || !attention_sees(i, key0 + 8 * (e / 2), a.window));
        const float p = masked ? 0.0f : exp2_approx(fmaf(s[j][e], scale_log2, -lse2[j][e % 2]));
        s[j][e] = p;                                // P^T
        dp[j][e] = p * (dp[j][e] - Dc[j][e % 2]);  // dS^T
      }
    warp_pv<HS, COLS, QT>(dv, s, dob + col0);  // dV += P^T dO
    warp_pv<HS, COLS, QT>(dk, dp, qb + col0);  // dK += dS^T Q
    __syncthreads();
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int j = key0 + 8 * r;
    if (j >= T) continue;
    bf16* drow = dqkv + (int64_t(b) * T + j) * ld + col0 + 2 * (lane % 4);
#pragma unroll
    for (int d = 0; d < COLS / 8; ++d) {
      accumulate_pair(drow + a.k_col(g) + 8 * d, dk[d][2 * r] * scale, dk[d][2 * r + 1] * scale);
      accumulate_pair(drow + a.v_col(g) + 8 * d, dv[d][2 * r], dv[d][2 * r + 1]);
    }
  }
}

// ---- host side --------------------------------------------------------------------------------

bool aligned16(const void* p) { return p != nullptr && reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// q_scalar^-1/2 in fp32, as the CPU twin and the other paths compute it (1/sqrt(hs) plain).
float score_scale(const AttentionShape& a) { return 1.0f / std::sqrt(a.q_scalar); }

dim3 grid_for(int B, int T, int heads) {
  return dim3(unsigned(heads), unsigned(B), unsigned((T + kBlockRows - 1) / kBlockRows));
}

// Above 48 KiB of dynamic shared memory a kernel must opt in (sm_80: 163 KiB, sm_89: 99 KiB).
template <class Kernel>
cudaError_t allow_smem(Kernel kernel, size_t bytes) {
  if (bytes <= kDefaultSmem) return cudaSuccess;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
}

// The shape of a call, for messages: "B=.. T=.. C=.. NH=.." for plain attention, else the heads,
// head size, window and query scalar.
void describe(char* buf, size_t n, int B, int T, const AttentionShape& a) {
  if (a.plain())
    std::snprintf(buf, n, "B=%d T=%d C=%d NH=%d", B, T, a.NH * a.hd, a.NH);
  else
    std::snprintf(buf, n, "B=%d T=%d NH=%d KVH=%d hs=%d window=%d q_scalar=%g", B, T, a.NH,
                  a.KVH, a.hd, a.window, double(a.q_scalar));
}

// Raises eco::Error for a call the path does not take, naming its shape (describe's text).
[[noreturn]] void reject(const char* what, const char* shape) {
  char ctx[512];
  std::snprintf(ctx, sizeof ctx,
                "%s: the mma path needs B, T, NH, KVH >= 1, NH %% KVH == 0, B <= 65535, "
                "T <= 65535 * 64, head size one of 32, 64, 128, 256, window >= 0, q_scalar > 0, "
                "16-byte aligned non-null bf16 buffers and non-null lse / D (use the GEMM path "
                "or the flash kernel otherwise)",
                shape);
  fail(__FILE__, __LINE__, what, "cudaErrorInvalidValue", "unsupported call", ctx);
}
[[noreturn]] void reject(const char* what, int B, int T, const AttentionShape& a) {
  char shape[160];
  describe(shape, sizeof shape, B, T, a);
  reject(what, shape);
}
// A plain call whose C does not split into NH heads the path takes.
void check_plain(const char* what, int B, int T, int C, int NH) {
  if (attention_mma_shape_ok(B, T, C, NH)) return;
  char shape[96];
  std::snprintf(shape, sizeof shape, "B=%d T=%d C=%d NH=%d", B, T, C, NH);
  reject(what, shape);
}

// A launch's status as eco::Error naming the kernel and the shapes.
void check_launch(cudaError_t e, const char* what, int B, int T, const AttentionShape& a) {
  if (e == cudaSuccess) return;
  char ctx[160];
  describe(ctx, sizeof ctx, B, T, a);
  fail(__FILE__, __LINE__, what, cudaGetErrorName(e), cudaGetErrorString(e), ctx);
}

template <int HS>
cudaError_t launch_forward(bf16* out, float* lse, const bf16* qkv, int B, int T,
                           const AttentionShape& a, cudaStream_t s) {
  constexpr size_t smem = forward_smem<HS>();
  if (const cudaError_t e = allow_smem(mma_forward_kernel<HS>, smem); e != cudaSuccess) return e;
  mma_forward_kernel<HS><<<grid_for(B, T, a.NH), kThreads, smem, s>>>(out, lse, qkv, T, a,
                                                                      score_scale(a) * kLog2e);
  return cudaGetLastError();
}

template <int HS>
cudaError_t launch_backward(bf16* dqkv, const float* D, const bf16* dout, const bf16* qkv,
                            const float* lse, int B, int T, const AttentionShape& a,
                            cudaStream_t s) {
  constexpr size_t smem_dq = dq_smem<HS>(), smem_dkdv = dkdv_smem<HS>();
  if (const cudaError_t e = allow_smem(mma_backward_dq_kernel<HS>, smem_dq); e != cudaSuccess)
    return e;
  if (const cudaError_t e = allow_smem(mma_backward_dkdv_kernel<HS>, smem_dkdv); e != cudaSuccess)
    return e;
  const float scale = score_scale(a), scale_log2 = scale * kLog2e;
  mma_backward_dq_kernel<HS><<<grid_for(B, T, a.NH), kThreads, smem_dq, s>>>(
      dqkv, D, dout, qkv, lse, T, a, scale, scale_log2);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  mma_backward_dkdv_kernel<HS><<<grid_for(B, T, a.KVH * dkdv_slices(HS)), kThreads, smem_dkdv, s>>>(
      dqkv, D, dout, qkv, lse, T, a, scale, scale_log2);
  return cudaGetLastError();
}

}  // namespace

bool attention_mma_gqa_supported(int B, int T, const AttentionShape& a,
                                 std::initializer_list<const void*> matrices) {
  if (!attention_mma_shape_ok(B, T, a)) return false;
  for (const void* p : matrices)
    if (!aligned16(p)) return false;
  return true;
}

bool attention_mma_supported(int B, int T, int C, int NH,
                             std::initializer_list<const void*> matrices) {
  return attention_mma_shape_ok(B, T, C, NH) &&
         attention_mma_gqa_supported(B, T, AttentionShape::multi_head(NH, C / NH), matrices);
}

void attention_mma_forward_gqa(bf16* out, float* lse, const bf16* qkv, int B, int T,
                               const AttentionShape& a, cudaStream_t s) {
  if (!attention_mma_gqa_supported(B, T, a, {out, qkv}) || lse == nullptr)
    reject("attention_mma_forward", B, T, a);
  cudaError_t e = cudaErrorInvalidValue;
  switch (a.hd) {
    case 32: e = launch_forward<32>(out, lse, qkv, B, T, a, s); break;
    case 64: e = launch_forward<64>(out, lse, qkv, B, T, a, s); break;
    case 128: e = launch_forward<128>(out, lse, qkv, B, T, a, s); break;
    case 256: e = launch_forward<256>(out, lse, qkv, B, T, a, s); break;
  }
  check_launch(e, "attention_mma_forward", B, T, a);
}

void attention_mma_backward_gqa(bf16* dqkv, float* D, const bf16* dout, const bf16* qkv,
                                const bf16* out, const float* lse, int B, int T,
                                const AttentionShape& a, cudaStream_t s) {
  if (!attention_mma_gqa_supported(B, T, a, {dqkv, dout, qkv, out}) || lse == nullptr ||
      D == nullptr)
    reject("attention_mma_backward", B, T, a);
  check_launch(attention_rowdot(D, dout, out, B, T, a.NH * a.hd, a.NH, s),
               "attention_mma_backward: D = rowsum(dout * out)", B, T, a);
  cudaError_t e = cudaErrorInvalidValue;
  switch (a.hd) {
    case 32: e = launch_backward<32>(dqkv, D, dout, qkv, lse, B, T, a, s); break;
    case 64: e = launch_backward<64>(dqkv, D, dout, qkv, lse, B, T, a, s); break;
    case 128: e = launch_backward<128>(dqkv, D, dout, qkv, lse, B, T, a, s); break;
    case 256: e = launch_backward<256>(dqkv, D, dout, qkv, lse, B, T, a, s); break;
  }
  check_launch(e, "attention_mma_backward", B, T, a);
}

void attention_mma_forward(bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH,
                           cudaStream_t s) {
  check_plain("attention_mma_forward", B, T, C, NH);
  attention_mma_forward_gqa(out, lse, qkv, B, T, AttentionShape::multi_head(NH, C / NH), s);
}

void attention_mma_backward(bf16* dqkv, float* D, const bf16* dout, const bf16* qkv,
                            const bf16* out, const float* lse, int B, int T, int C, int NH,
                            cudaStream_t s) {
  check_plain("attention_mma_backward", B, T, C, NH);
  attention_mma_backward_gqa(dqkv, D, dout, qkv, out, lse, B, T,
                             AttentionShape::multi_head(NH, C / NH), s);
}

}  // namespace eco::cuda
