// Causal self-attention, flash-style, fp32 math on CUDA cores (first version): grouped-query
// (KVH key/value heads, each read by NH / KVH query heads), optionally within a sliding window,
// scores scaled by q_scalar^-1/2 (src/base/math/attention_shape.h); multi-head attention is the
// case KVH = NH, window 0, q_scalar = hs.
//
// Why this and not cuBLASLt batched GEMMs + a softmax kernel: no (B, NH, T, T) probability
// buffer (backward recomputes the probabilities from the per-row logsumexp, 4 bytes per query),
// only the causal half of the work (and only the window's part of it), deterministic by
// construction (no atomics, fixed sum orders), and no handles or workspaces. The price is no
// tensor cores: the dot products run as fp32 FMAs from shared memory. (The CUDA backend runs
// attention_gemm.cuh, cuBLASLt GEMMs on tensor cores, for plain multi-head attention whose head
// size is a multiple of 8, and attention_mma.cuh where asked; this kernel takes every shape.)
//
// Layout: qkv (B, T, QKV) row-major with QKV = (NH + 2 KVH) hs: query head h at column h hs, key
// head g at (NH + g) hs, value head g at (NH + KVH + g) hs (plain attention: q / k / v at 0 / C /
// 2C); out and dout (B, T, NH hs); lse and the scratch D (B, NH, T) fp32. All in bf16 except lse
// and D; every score, softmax and sum is fp32.
// Limits (checked on the host): hs <= 256, NH a multiple of KVH, B and NH <= 65535; any T >= 1;
// any alignment.
//
// Kernels, each a block of 4 warps; lane d owns dims d, d + 32, ... (kDims of them: 4 up to hs
// 128, 8 up to 256, a template parameter so that small heads keep few registers):
//   forward:  16 queries of one query head per block (4 per warp). Per 32-key tile: lane j scores
//             key j against the warp's queries, online softmax (running max m, sum l), o += p V.
//             Writes out = o / l and lse = m + log l.
//   dq:       same tiling; D_t = dout_t . out_t, ds = p (dp - D), dq += ds K; D -> scratch.
//   dk, dv:   16 keys of one key/value head per block (4 per warp); for each query head of its
//             group in order, per 32-query tile (from the block's first key to the last query
//             that sees its last key) lane i recomputes p and ds for query i, dv += p dO,
//             dk += ds Q: a kv head's gradient sums its query heads in a fixed order.
// Causality and the window: a query block reads key tiles from the first key its first query sees
// (t - window + 1) to its last query, a key block query tiles from its first key to the last query
// that sees its last key (j + window - 1); tiles wholly outside every row's window are never
// loaded, so a windowed layer costs O(T window), not O(T^2). Inside, keys are masked per element
// (attention_sees).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "base/math/attention_shape.h"
#include "kernels/cuda/attention.cuh"

namespace eco::cuda {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kRowsPerWarp = 4;
constexpr int kRowTile = kWarps * kRowsPerWarp;  // 16 queries (forward, dq) or keys (dk, dv)
constexpr int kStreamTile = 32;                  // keys (forward, dq) or queries (dk, dv) per step
constexpr size_t kDefaultSmem = 48 * 1024;

__device__ float warp_sum(float v) {
  // xor butterfly: every lane ends with the same bits (addition is commutative).
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  return v;
}
__device__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  return v;
}

// dst (rows, ld_dst) fp32 <- rows [r0, r0 + rows) x cols [0, hs) of src (bf16, row stride
// ld_src); rows at or past T are zero.
__device__ void load_tile(float* dst, int ld_dst, const bf16* src, int64_t ld_src, int r0,
                          int rows, int T, int hs) {
  for (int idx = threadIdx.x; idx < rows * hs; idx += kThreads) {
    const int r = idx / hs, d = idx - r * hs;
    dst[r * ld_dst + d] = r0 + r < T ? __bfloat162float(src[int64_t(r0 + r) * ld_src + d]) : 0.0f;
  }
}

// dst[t, d] += g, rounded to bf16 once.
__device__ void accumulate_bf16(bf16* dst, float g) {
  *dst = __float2bfloat16_rn(__bfloat162float(*dst) + g);
}

// grid (ceil(T / 16), NH, B), block kThreads, dynamic smem forward_smem(hs). At least 4 blocks
// per SM (<= 128 registers): left free, ptxas chose 72 registers and spilled on sm_80 / sm_89.
template <int kDims>
__global__ void __launch_bounds__(kThreads, 4)
    attention_forward_kernel(bf16* __restrict__ out, float* __restrict__ lse,
                             const bf16* __restrict__ qkv, int T, AttentionShape a, float scale) {
  extern __shared__ float smem[];
  const int hs = a.hd, ldk = hs + 1;  // odd stride: lane j reading ks[j][d] is conflict-free
  float* qs = smem;                   // (16, hs)
  float* ks = qs + kRowTile * hs;     // (32, hs + 1)
  float* vs = ks + kStreamTile * ldk; // (32, hs)
  const int q0 = blockIdx.x * kRowTile, h = blockIdx.y, b = blockIdx.z, g = h / a.group();
  const int lane = threadIdx.x & 31, row0 = (threadIdx.x >> 5) * kRowsPerWarp;
  const int64_t ld = a.qkv_width(), ldo = a.out_width();
  const bf16* seq = qkv + int64_t(b) * T * ld;  // (T, QKV)

  load_tile(qs, hs, seq + a.q_col(h), ld, q0, kRowTile, T, hs);
  float m[kRowsPerWarp], l[kRowsPerWarp], o[kRowsPerWarp][kDims];
  for (int r = 0; r < kRowsPerWarp; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
    for (int k = 0; k < kDims; ++k) o[r][k] = 0.0f;
  }

  // Keys from the first one query q0 sees to the tile's last query (causal).
  const int kv_end = min(q0 + kRowTile, T);
  for (int kv0 = attention_first_key(q0, a.window); kv0 < kv_end; kv0 += kStreamTile) {
    __syncthreads();  // the previous tile is consumed
    load_tile(ks, ldk, seq + a.k_col(g), ld, kv0, kStreamTile, T, hs);
    load_tile(vs, hs, seq + a.v_col(g), ld, kv0, kStreamTile, T, hs);
    __syncthreads();

    float s[kRowsPerWarp] = {};
#pragma unroll 4
    for (int d = 0; d < hs; ++d) {
      const float kd = ks[lane * ldk + d];
      for (int r = 0; r < kRowsPerWarp; ++r) s[r] = fmaf(qs[(row0 + r) * hs + d], kd, s[r]);
    }
    const int j = kv0 + lane;
    float p[kRowsPerWarp], alpha[kRowsPerWarp];
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int t = q0 + row0 + r;
      p[r] = 0.0f;
      alpha[r] = 1.0f;
      // Warp-uniform. A tile from the first key of query q0 on that starts at or before t holds
      // a key t sees (t's first key is at most 15 past q0's), so m_new is finite.
      if (t < T && kv0 <= t) {
        const bool seen = attention_sees(t, j, a.window);
        const float sc = seen ? s[r] * scale : -INFINITY;
        const float m_new = fmaxf(m[r], warp_max(sc));
        p[r] = seen ? expf(sc - m_new) : 0.0f;
        alpha[r] = expf(m[r] - m_new);  // 0 on the first tile (m = -inf)
        l[r] = l[r] * alpha[r] + warp_sum(p[r]);
        m[r] = m_new;
      }
      for (int k = 0; k < kDims; ++k) o[r][k] *= alpha[r];
    }
#pragma unroll
    for (int jj = 0; jj < kStreamTile; ++jj) {
      float pj[kRowsPerWarp];
      for (int r = 0; r < kRowsPerWarp; ++r) pj[r] = __shfl_sync(0xFFFFFFFFu, p[r], jj);
      for (int k = 0; k < kDims; ++k) {
        const int d = lane + 32 * k;
        if (d < hs) {
          const float vd = vs[jj * hs + d];
          for (int r = 0; r < kRowsPerWarp; ++r) o[r][k] = fmaf(pj[r], vd, o[r][k]);
        }
      }
    }
  }

  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int t = q0 + row0 + r;
    if (t >= T) continue;
    const float inv = __frcp_rn(l[r]);
    bf16* orow = out + (int64_t(b) * T + t) * ldo + a.q_col(h);
    for (int k = 0; k < kDims; ++k) {
      const int d = lane + 32 * k;
      if (d < hs) orow[d] = __float2bfloat16_rn(o[r][k] * inv);
    }
    if (lane == 0) lse[(int64_t(b) * a.NH + h) * T + t] = m[r] + logf(l[r]);
  }
}

// grid (ceil(T / 16), NH, B), block kThreads, dynamic smem dq_smem(hs). dqkv's q part += dq;
// D (B, NH, T) <- rowsum(dout * out). At least 4 blocks per SM, as the forward (it spilled at 96
// registers on sm_80 / sm_89 otherwise).
template <int kDims>
__global__ void __launch_bounds__(kThreads, 4)
    attention_backward_dq_kernel(bf16* __restrict__ dqkv, float* __restrict__ D,
                                 const bf16* __restrict__ dout, const bf16* __restrict__ qkv,
                                 const bf16* __restrict__ out, const float* __restrict__ lse,
                                 int T, AttentionShape a, float scale) {
  extern __shared__ float smem[];
  const int hs = a.hd, ldk = hs + 1;
  float* qs = smem;                    // (16, hs)
  float* dos = qs + kRowTile * hs;     // (16, hs)
  float* ks = dos + kRowTile * hs;     // (32, hs + 1)
  float* vs = ks + kStreamTile * ldk;  // (32, hs + 1)
  const int q0 = blockIdx.x * kRowTile, h = blockIdx.y, b = blockIdx.z, g = h / a.group();
  const int lane = threadIdx.x & 31, row0 = (threadIdx.x >> 5) * kRowsPerWarp;
  const int64_t ld = a.qkv_width(), ldo = a.out_width(), bh = int64_t(b) * a.NH + h;
  const bf16* seq = qkv + int64_t(b) * T * ld;
  const bf16* dO = dout + int64_t(b) * T * ldo + a.q_col(h);  // (T, hs), row stride NH hs
  const bf16* O = out + int64_t(b) * T * ldo + a.q_col(h);

  load_tile(qs, hs, seq + a.q_col(h), ld, q0, kRowTile, T, hs);
  load_tile(dos, hs, dO, ldo, q0, kRowTile, T, hs);
  __syncthreads();
  float Drow[kRowsPerWarp], lrow[kRowsPerWarp], dq[kRowsPerWarp][kDims];
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int t = q0 + row0 + r;
    float acc = 0.0f;
    for (int k = 0; k < kDims; ++k) {
      const int d = lane + 32 * k;
      if (d < hs && t < T)
        acc = fmaf(dos[(row0 + r) * hs + d], __bfloat162float(O[int64_t(t) * ldo + d]), acc);
    }
    Drow[r] = warp_sum(acc);
    lrow[r] = t < T ? lse[bh * T + t] : 0.0f;
    if (lane == 0 && t < T) D[bh * T + t] = Drow[r];
    for (int k = 0; k < kDims; ++k) dq[r][k] = 0.0f;
  }

  const int kv_end = min(q0 + kRowTile, T);
  for (int kv0 = attention_first_key(q0, a.window); kv0 < kv_end; kv0 += kStreamTile) {
    __syncthreads();
    load_tile(ks, ldk, seq + a.k_col(g), ld, kv0, kStreamTile, T, hs);
    load_tile(vs, ldk, seq + a.v_col(g), ld, kv0, kStreamTile, T, hs);
    __syncthreads();

    float s[kRowsPerWarp] = {}, dp[kRowsPerWarp] = {};
#pragma unroll 4
    for (int d = 0; d < hs; ++d) {
      const float kd = ks[lane * ldk + d], vd = vs[lane * ldk + d];
      for (int r = 0; r < kRowsPerWarp; ++r) {
        s[r] = fmaf(qs[(row0 + r) * hs + d], kd, s[r]);
        dp[r] = fmaf(dos[(row0 + r) * hs + d], vd, dp[r]);
      }
    }
    const int j = kv0 + lane;
    float ds[kRowsPerWarp];
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int t = q0 + row0 + r;
      ds[r] = t < T && attention_sees(t, j, a.window)
                  ? expf(s[r] * scale - lrow[r]) * (dp[r] - Drow[r])
                  : 0.0f;
    }
#pragma unroll
    for (int jj = 0; jj < kStreamTile; ++jj) {
      float dsj[kRowsPerWarp];
      for (int r = 0; r < kRowsPerWarp; ++r) dsj[r] = __shfl_sync(0xFFFFFFFFu, ds[r], jj);
      for (int k = 0; k < kDims; ++k) {
        const int d = lane + 32 * k;
        if (d < hs) {
          const float kd = ks[jj * ldk + d];
          for (int r = 0; r < kRowsPerWarp; ++r) dq[r][k] = fmaf(dsj[r], kd, dq[r][k]);
        }
      }
    }
  }

  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int t = q0 + row0 + r;
    if (t >= T) continue;
    bf16* dqrow = dqkv + (int64_t(b) * T + t) * ld + a.q_col(h);
    for (int k = 0; k < kDims; ++k) {
      const int d = lane + 32 * k;
      if (d < hs) accumulate_bf16(dqrow + d, dq[r][k] * scale);
    }
  }
}

// grid (ceil(T / 16), KVH, B), block kThreads, dynamic smem dkdv_smem(hs). dqkv's k and v parts
// of kv head blockIdx.y += dk, dv for keys [16 * blockIdx.x, +16), summed over the group's query
// heads in order.
template <int kDims>
__global__ void __launch_bounds__(kThreads)
    attention_backward_dkdv_kernel(bf16* __restrict__ dqkv, const float* __restrict__ D,
                                   const bf16* __restrict__ dout, const bf16* __restrict__ qkv,
                                   const float* __restrict__ lse, int T, AttentionShape a,
                                   float scale) {
  extern __shared__ float smem[];
  const int hs = a.hd, ldq = hs + 1;
  float* ks = smem;                       // (16, hs)
  float* vs = ks + kRowTile * hs;         // (16, hs)
  float* qs = vs + kRowTile * hs;         // (32, hs + 1)
  float* dos = qs + kStreamTile * ldq;    // (32, hs + 1)
  float* lses = dos + kStreamTile * ldq;  // (32)
  float* Ds = lses + kStreamTile;         // (32)
  const int j0 = blockIdx.x * kRowTile, g = blockIdx.y, b = blockIdx.z;
  const int lane = threadIdx.x & 31, row0 = (threadIdx.x >> 5) * kRowsPerWarp;
  const int64_t ld = a.qkv_width(), ldo = a.out_width();
  const bf16* seq = qkv + int64_t(b) * T * ld;

  load_tile(ks, hs, seq + a.k_col(g), ld, j0, kRowTile, T, hs);
  load_tile(vs, hs, seq + a.v_col(g), ld, j0, kRowTile, T, hs);
  float dk[kRowsPerWarp][kDims] = {}, dv[kRowsPerWarp][kDims] = {};

  // Queries from the block's first key (causal) to the last one that sees its last key.
  const int i_end = attention_query_end(min(j0 + kRowTile, T) - 1, a.window, T);
  for (int h = g * a.group(); h < (g + 1) * a.group(); ++h) {
    const int64_t bh = int64_t(b) * a.NH + h;
    const bf16* q = seq + a.q_col(h);
    const bf16* dO = dout + int64_t(b) * T * ldo + a.q_col(h);
    for (int i0 = j0; i0 < i_end; i0 += kStreamTile) {
      __syncthreads();
      load_tile(qs, ldq, q, ld, i0, kStreamTile, T, hs);
      load_tile(dos, ldq, dO, ldo, i0, kStreamTile, T, hs);
      if (threadIdx.x < kStreamTile) {
        const int i = i0 + threadIdx.x;
        lses[threadIdx.x] = i < T ? lse[bh * T + i] : 0.0f;
        Ds[threadIdx.x] = i < T ? D[bh * T + i] : 0.0f;
      }
      __syncthreads();

      float s[kRowsPerWarp] = {}, dp[kRowsPerWarp] = {};
#pragma unroll 4
      for (int d = 0; d < hs; ++d) {
        const float qd = qs[lane * ldq + d], dod = dos[lane * ldq + d];
        for (int r = 0; r < kRowsPerWarp; ++r) {
          s[r] = fmaf(qd, ks[(row0 + r) * hs + d], s[r]);
          dp[r] = fmaf(dod, vs[(row0 + r) * hs + d], dp[r]);
        }
      }
      const int i = i0 + lane;
      float p[kRowsPerWarp], ds[kRowsPerWarp];
      for (int r = 0; r < kRowsPerWarp; ++r) {
        const int j = j0 + row0 + r;
        p[r] = i < T && attention_sees(i, j, a.window) ? expf(s[r] * scale - lses[lane]) : 0.0f;
        ds[r] = p[r] * (dp[r] - Ds[lane]);
      }
#pragma unroll
      for (int ii = 0; ii < kStreamTile; ++ii) {
        float pi[kRowsPerWarp], dsi[kRowsPerWarp];
        for (int r = 0; r < kRowsPerWarp; ++r) {
          pi[r] = __shfl_sync(0xFFFFFFFFu, p[r], ii);
          dsi[r] = __shfl_sync(0xFFFFFFFFu, ds[r], ii);
        }
        for (int k = 0; k < kDims; ++k) {
          const int d = lane + 32 * k;
          if (d < hs) {
            const float dod = dos[ii * ldq + d], qd = qs[ii * ldq + d];
            for (int r = 0; r < kRowsPerWarp; ++r) {
              dv[r][k] = fmaf(pi[r], dod, dv[r][k]);
              dk[r][k] = fmaf(dsi[r], qd, dk[r][k]);
            }
          }
        }
      }
    }
  }

  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int j = j0 + row0 + r;
    if (j >= T) continue;
    bf16* drow = dqkv + (int64_t(b) * T + j) * ld;
    for (int k = 0; k < kDims; ++k) {
      const int d = lane + 32 * k;
      if (d < hs) {
        accumulate_bf16(drow + a.k_col(g) + d, dk[r][k] * scale);
        accumulate_bf16(drow + a.v_col(g) + d, dv[r][k]);
      }
    }
  }
}

constexpr size_t forward_smem(int hs) {
  return sizeof(float) *
         (size_t(kRowTile) * hs + size_t(kStreamTile) * (hs + 1) + size_t(kStreamTile) * hs);
}
constexpr size_t dq_smem(int hs) {
  return sizeof(float) * (2 * size_t(kRowTile) * hs + 2 * size_t(kStreamTile) * (hs + 1));
}
constexpr size_t dkdv_smem(int hs) { return dq_smem(hs) + sizeof(float) * 2 * kStreamTile; }
// At the largest head size, within the smallest opt-in limit of the architectures built (sm_89 /
// sm_86: 99 KiB per block), so the kernels never fail to launch for shared memory.
static_assert(forward_smem(kAttentionMaxHeadSize) <= 99 * 1024 &&
                  dq_smem(kAttentionMaxHeadSize) <= 99 * 1024 &&
                  dkdv_smem(kAttentionMaxHeadSize) <= 99 * 1024,
              "the flash attention's shared memory exceeds sm_89's 99 KiB");

bool shape_ok(int B, int T, const AttentionShape& a) {
  return B >= 1 && T >= 1 && a.NH >= 1 && a.KVH >= 1 && a.NH % a.KVH == 0 && a.hd >= 1 &&
         a.hd <= kAttentionMaxHeadSize && a.window >= 0 && a.q_scalar > 0 && B <= 65535 &&
         a.NH <= 65535;
}

// Above 48 KiB of dynamic shared memory a kernel must opt in (up to 163 KiB on sm_80, 99 on
// sm_89, 227 on sm_90).
template <class Kernel>
cudaError_t allow_smem(Kernel kernel, size_t bytes) {
  if (bytes <= kDefaultSmem) return cudaSuccess;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
}

// q_scalar^-1/2 in fp32, as the CPU twin computes it (1/sqrt(hs) for plain attention).
float score_scale(const AttentionShape& a) { return 1.0f / std::sqrt(a.q_scalar); }

dim3 grid_for(int B, int T, int heads) {
  return dim3(unsigned((T + kRowTile - 1) / kRowTile), unsigned(heads), unsigned(B));
}

template <int kDims>
cudaError_t launch_forward(bf16* out, float* lse, const bf16* qkv, int B, int T,
                           const AttentionShape& a, cudaStream_t s) {
  const size_t smem = forward_smem(a.hd);
  if (const cudaError_t e = allow_smem(attention_forward_kernel<kDims>, smem); e != cudaSuccess)
    return e;
  attention_forward_kernel<kDims><<<grid_for(B, T, a.NH), kThreads, smem, s>>>(out, lse, qkv, T, a,
                                                                              score_scale(a));
  return cudaGetLastError();
}

template <int kDims>
cudaError_t launch_backward(bf16* dqkv, float* scratch, const bf16* dout, const bf16* qkv,
                            const bf16* out, const float* lse, int B, int T,
                            const AttentionShape& a, cudaStream_t s) {
  const size_t smem_dq = dq_smem(a.hd), smem_dkdv = dkdv_smem(a.hd);
  if (const cudaError_t e = allow_smem(attention_backward_dq_kernel<kDims>, smem_dq);
      e != cudaSuccess)
    return e;
  if (const cudaError_t e = allow_smem(attention_backward_dkdv_kernel<kDims>, smem_dkdv);
      e != cudaSuccess)
    return e;
  attention_backward_dq_kernel<kDims><<<grid_for(B, T, a.NH), kThreads, smem_dq, s>>>(
      dqkv, scratch, dout, qkv, out, lse, T, a, score_scale(a));
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  attention_backward_dkdv_kernel<kDims><<<grid_for(B, T, a.KVH), kThreads, smem_dkdv, s>>>(
      dqkv, scratch, dout, qkv, lse, T, a, score_scale(a));
  return cudaGetLastError();
}

// Dims per lane: 4 up to hs 128, 8 up to the limit.
constexpr int kSmallHead = 128;
static_assert(kAttentionMaxHeadSize == 2 * kSmallHead, "two instantiations: 4 and 8 dims per lane");

}  // namespace

cudaError_t attention_forward_gqa(bf16* out, float* lse, const bf16* qkv, int B, int T,
                                  const AttentionShape& a, cudaStream_t s) {
  if (!shape_ok(B, T, a) || !out || !lse || !qkv) return cudaErrorInvalidValue;
  return a.hd <= kSmallHead ? launch_forward<kSmallHead / 32>(out, lse, qkv, B, T, a, s)
                            : launch_forward<kAttentionMaxHeadSize / 32>(out, lse, qkv, B, T, a, s);
}

cudaError_t attention_backward_gqa(bf16* dqkv, float* scratch, const bf16* dout, const bf16* qkv,
                                   const bf16* out, const float* lse, int B, int T,
                                   const AttentionShape& a, cudaStream_t s) {
  if (!shape_ok(B, T, a) || !dqkv || !scratch || !dout || !qkv || !out || !lse)
    return cudaErrorInvalidValue;
  return a.hd <= kSmallHead
             ? launch_backward<kSmallHead / 32>(dqkv, scratch, dout, qkv, out, lse, B, T, a, s)
             : launch_backward<kAttentionMaxHeadSize / 32>(dqkv, scratch, dout, qkv, out, lse, B,
                                                           T, a, s);
}

cudaError_t attention_forward(bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH,
                              cudaStream_t s) {
  if (NH < 1 || C < NH || C % NH != 0) return cudaErrorInvalidValue;
  return attention_forward_gqa(out, lse, qkv, B, T, AttentionShape::multi_head(NH, C / NH), s);
}

cudaError_t attention_backward(bf16* dqkv, float* scratch, const bf16* dout, const bf16* qkv,
                               const bf16* out, const float* lse, int B, int T, int C, int NH,
                               cudaStream_t s) {
  if (NH < 1 || C < NH || C % NH != 0) return cudaErrorInvalidValue;
  return attention_backward_gqa(dqkv, scratch, dout, qkv, out, lse, B, T,
                                AttentionShape::multi_head(NH, C / NH), s);
}

}  // namespace eco::cuda
