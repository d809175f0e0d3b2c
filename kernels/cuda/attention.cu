// Causal multi-head self-attention, flash-style, fp32 math on CUDA cores (first version).
//
// Why this and not cuBLASLt batched GEMMs + a softmax kernel: no (B, NH, T, T) probability
// buffer (backward recomputes the probabilities from the per-row logsumexp, 4 bytes per query),
// only the causal half of the work, deterministic by construction (no atomics, fixed sum
// orders), and no handles or workspaces. The price is no tensor cores: the dot products run as
// fp32 FMAs from shared memory. A wgmma/mma.sync version is the next step if attention shows up
// in the step time. (It did: the CUDA backend now runs attention_gemm.cuh, cuBLASLt GEMMs on
// tensor cores, wherever the head size is a multiple of 8; this kernel is its fallback.)
//
// Layout (as kernels/cpu/kernels.h): qkv (B, T, 3C) row-major, q / k / v at column offsets
// 0 / C / 2C, head h at [h*hs, (h+1)*hs) of each; out and dout (B, T, C); lse and the scratch
// D (B, NH, T) fp32. All in bf16 except lse and D; every score, softmax and sum is fp32.
// Limits (checked on the host): hs <= 128, B and NH <= 65535; any T >= 1; any alignment.
//
// Kernels, each a block of 4 warps per (tile, head, batch):
//   forward:  16 queries per block (4 per warp). Per 32-key tile: lane j scores key j against
//             the warp's queries, online softmax (running max m, sum l), o += p V with lane d
//             owning dims d, d+32, d+64, d+96. Writes out = o / l and lse = m + log l.
//   dq:       same tiling; D_t = dout_t . out_t, ds = p (dp - D), dq += ds K; D -> scratch.
//   dk, dv:   16 keys per block (4 per warp); per 32-query tile (queries >= the tile's first
//             key) lane i recomputes p and ds for query i, dv += p dO, dk += ds Q.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/attention.cuh"

namespace eco::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kRowsPerWarp = 4;
constexpr int kRowTile = kWarps * kRowsPerWarp;  // 16 queries (forward, dq) or keys (dk, dv)
constexpr int kStreamTile = 32;                  // keys (forward, dq) or queries (dk, dv) per step
constexpr int kDimsPerLane = kAttentionMaxHeadSize / 32;
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
__device__ void load_tile(float* dst, int ld_dst, const __nv_bfloat16* src, int64_t ld_src, int r0,
                          int rows, int T, int hs) {
  for (int idx = threadIdx.x; idx < rows * hs; idx += kThreads) {
    const int r = idx / hs, d = idx - r * hs;
    dst[r * ld_dst + d] = r0 + r < T ? __bfloat162float(src[int64_t(r0 + r) * ld_src + d]) : 0.0f;
  }
}

// dst[t, d] += g, rounded to bf16 once.
__device__ void accumulate_bf16(__nv_bfloat16* dst, float g) {
  *dst = __float2bfloat16_rn(__bfloat162float(*dst) + g);
}

// grid (ceil(T / 16), NH, B), block kThreads, dynamic smem forward_smem(hs).
__global__ void __launch_bounds__(kThreads)
    attention_forward_kernel(__nv_bfloat16* __restrict__ out, float* __restrict__ lse,
                             const __nv_bfloat16* __restrict__ qkv, int T, int C, int NH,
                             float scale) {
  extern __shared__ float smem[];
  const int hs = C / NH, ldk = hs + 1;  // odd stride: lane j reading ks[j][d] is conflict-free
  float* qs = smem;                     // (16, hs)
  float* ks = qs + kRowTile * hs;       // (32, hs + 1)
  float* vs = ks + kStreamTile * ldk;   // (32, hs)
  const int q0 = blockIdx.x * kRowTile, h = blockIdx.y, b = blockIdx.z;
  const int lane = threadIdx.x & 31, row0 = (threadIdx.x >> 5) * kRowsPerWarp;
  const int64_t ld = 3 * int64_t(C);
  const __nv_bfloat16* q = qkv + int64_t(b) * T * ld + int64_t(h) * hs;  // (T, hs), stride 3C

  load_tile(qs, hs, q, ld, q0, kRowTile, T, hs);
  float m[kRowsPerWarp], l[kRowsPerWarp], o[kRowsPerWarp][kDimsPerLane];
  for (int r = 0; r < kRowsPerWarp; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
    for (int k = 0; k < kDimsPerLane; ++k) o[r][k] = 0.0f;
  }

  const int kv_end = min(q0 + kRowTile, T);  // causal: no key past the tile's last query
  for (int kv0 = 0; kv0 < kv_end; kv0 += kStreamTile) {
    __syncthreads();  // the previous tile is consumed
    load_tile(ks, ldk, q + C, ld, kv0, kStreamTile, T, hs);
    load_tile(vs, hs, q + 2 * C, ld, kv0, kStreamTile, T, hs);
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
      if (t < T && kv0 <= t) {  // warp-uniform; key kv0 <= t is unmasked, so m_new is finite
        const float sc = j <= t ? s[r] * scale : -INFINITY;
        const float m_new = fmaxf(m[r], warp_max(sc));
        p[r] = j <= t ? expf(sc - m_new) : 0.0f;
        alpha[r] = expf(m[r] - m_new);  // 0 on the first tile (m = -inf)
        l[r] = l[r] * alpha[r] + warp_sum(p[r]);
        m[r] = m_new;
      }
      for (int k = 0; k < kDimsPerLane; ++k) o[r][k] *= alpha[r];
    }
#pragma unroll
    for (int jj = 0; jj < kStreamTile; ++jj) {
      float pj[kRowsPerWarp];
      for (int r = 0; r < kRowsPerWarp; ++r) pj[r] = __shfl_sync(0xFFFFFFFFu, p[r], jj);
      for (int k = 0; k < kDimsPerLane; ++k) {
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
    __nv_bfloat16* orow = out + (int64_t(b) * T + t) * C + int64_t(h) * hs;
    for (int k = 0; k < kDimsPerLane; ++k) {
      const int d = lane + 32 * k;
      if (d < hs) orow[d] = __float2bfloat16_rn(o[r][k] * inv);
    }
    if (lane == 0) lse[(int64_t(b) * NH + h) * T + t] = m[r] + logf(l[r]);
  }
}

// grid (ceil(T / 16), NH, B), block kThreads, dynamic smem dq_smem(hs). dqkv's q part += dq;
// D (B, NH, T) <- rowsum(dout * out).
__global__ void __launch_bounds__(kThreads)
    attention_backward_dq_kernel(__nv_bfloat16* __restrict__ dqkv, float* __restrict__ D,
                                 const __nv_bfloat16* __restrict__ dout,
                                 const __nv_bfloat16* __restrict__ qkv,
                                 const __nv_bfloat16* __restrict__ out,
                                 const float* __restrict__ lse, int T, int C, int NH, float scale) {
  extern __shared__ float smem[];
  const int hs = C / NH, ldk = hs + 1;
  float* qs = smem;                    // (16, hs)
  float* dos = qs + kRowTile * hs;     // (16, hs)
  float* ks = dos + kRowTile * hs;     // (32, hs + 1)
  float* vs = ks + kStreamTile * ldk;  // (32, hs + 1)
  const int q0 = blockIdx.x * kRowTile, h = blockIdx.y, b = blockIdx.z;
  const int lane = threadIdx.x & 31, row0 = (threadIdx.x >> 5) * kRowsPerWarp;
  const int64_t ld = 3 * int64_t(C), bh = int64_t(b) * NH + h;
  const __nv_bfloat16* q = qkv + int64_t(b) * T * ld + int64_t(h) * hs;
  const __nv_bfloat16* dO = dout + int64_t(b) * T * C + int64_t(h) * hs;  // (T, hs), stride C
  const __nv_bfloat16* O = out + int64_t(b) * T * C + int64_t(h) * hs;

  load_tile(qs, hs, q, ld, q0, kRowTile, T, hs);
  load_tile(dos, hs, dO, C, q0, kRowTile, T, hs);
  __syncthreads();
  float Drow[kRowsPerWarp], lrow[kRowsPerWarp], dq[kRowsPerWarp][kDimsPerLane];
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int t = q0 + row0 + r;
    float acc = 0.0f;
    for (int k = 0; k < kDimsPerLane; ++k) {
      const int d = lane + 32 * k;
      if (d < hs && t < T)
        acc = fmaf(dos[(row0 + r) * hs + d], __bfloat162float(O[int64_t(t) * C + d]), acc);
    }
    Drow[r] = warp_sum(acc);
    lrow[r] = t < T ? lse[bh * T + t] : 0.0f;
    if (lane == 0 && t < T) D[bh * T + t] = Drow[r];
    for (int k = 0; k < kDimsPerLane; ++k) dq[r][k] = 0.0f;
  }

  const int kv_end = min(q0 + kRowTile, T);
  for (int kv0 = 0; kv0 < kv_end; kv0 += kStreamTile) {
    __syncthreads();
    load_tile(ks, ldk, q + C, ld, kv0, kStreamTile, T, hs);
    load_tile(vs, ldk, q + 2 * C, ld, kv0, kStreamTile, T, hs);
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
      ds[r] = t < T && j <= t ? expf(s[r] * scale - lrow[r]) * (dp[r] - Drow[r]) : 0.0f;
    }
#pragma unroll
    for (int jj = 0; jj < kStreamTile; ++jj) {
      float dsj[kRowsPerWarp];
      for (int r = 0; r < kRowsPerWarp; ++r) dsj[r] = __shfl_sync(0xFFFFFFFFu, ds[r], jj);
      for (int k = 0; k < kDimsPerLane; ++k) {
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
    __nv_bfloat16* dqrow = dqkv + (int64_t(b) * T + t) * ld + int64_t(h) * hs;
    for (int k = 0; k < kDimsPerLane; ++k) {
      const int d = lane + 32 * k;
      if (d < hs) accumulate_bf16(dqrow + d, dq[r][k] * scale);
    }
  }
}

// grid (ceil(T / 16), NH, B), block kThreads, dynamic smem dkdv_smem(hs). dqkv's k and v parts
// += dk, dv for keys [16 * blockIdx.x, +16).
__global__ void __launch_bounds__(kThreads)
    attention_backward_dkdv_kernel(__nv_bfloat16* __restrict__ dqkv, const float* __restrict__ D,
                                   const __nv_bfloat16* __restrict__ dout,
                                   const __nv_bfloat16* __restrict__ qkv,
                                   const float* __restrict__ lse, int T, int C, int NH,
                                   float scale) {
  extern __shared__ float smem[];
  const int hs = C / NH, ldq = hs + 1;
  float* ks = smem;                       // (16, hs)
  float* vs = ks + kRowTile * hs;         // (16, hs)
  float* qs = vs + kRowTile * hs;         // (32, hs + 1)
  float* dos = qs + kStreamTile * ldq;    // (32, hs + 1)
  float* lses = dos + kStreamTile * ldq;  // (32)
  float* Ds = lses + kStreamTile;         // (32)
  const int j0 = blockIdx.x * kRowTile, h = blockIdx.y, b = blockIdx.z;
  const int lane = threadIdx.x & 31, row0 = (threadIdx.x >> 5) * kRowsPerWarp;
  const int64_t ld = 3 * int64_t(C), bh = int64_t(b) * NH + h;
  const __nv_bfloat16* q = qkv + int64_t(b) * T * ld + int64_t(h) * hs;
  const __nv_bfloat16* dO = dout + int64_t(b) * T * C + int64_t(h) * hs;

  load_tile(ks, hs, q + C, ld, j0, kRowTile, T, hs);
  load_tile(vs, hs, q + 2 * C, ld, j0, kRowTile, T, hs);
  float dk[kRowsPerWarp][kDimsPerLane] = {}, dv[kRowsPerWarp][kDimsPerLane] = {};

  for (int i0 = j0; i0 < T; i0 += kStreamTile) {  // causal: queries before j0 see no key here
    __syncthreads();
    load_tile(qs, ldq, q, ld, i0, kStreamTile, T, hs);
    load_tile(dos, ldq, dO, C, i0, kStreamTile, T, hs);
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
      p[r] = i < T && j <= i ? expf(s[r] * scale - lses[lane]) : 0.0f;
      ds[r] = p[r] * (dp[r] - Ds[lane]);
    }
#pragma unroll
    for (int ii = 0; ii < kStreamTile; ++ii) {
      float pi[kRowsPerWarp], dsi[kRowsPerWarp];
      for (int r = 0; r < kRowsPerWarp; ++r) {
        pi[r] = __shfl_sync(0xFFFFFFFFu, p[r], ii);
        dsi[r] = __shfl_sync(0xFFFFFFFFu, ds[r], ii);
      }
      for (int k = 0; k < kDimsPerLane; ++k) {
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

  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int j = j0 + row0 + r;
    if (j >= T) continue;
    __nv_bfloat16* dkrow = dqkv + (int64_t(b) * T + j) * ld + C + int64_t(h) * hs;
    for (int k = 0; k < kDimsPerLane; ++k) {
      const int d = lane + 32 * k;
      if (d < hs) {
        accumulate_bf16(dkrow + d, dk[r][k] * scale);
        accumulate_bf16(dkrow + C + d, dv[r][k]);
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

bool shape_ok(int B, int T, int C, int NH) {
  return B >= 1 && T >= 1 && NH >= 1 && C >= NH && C % NH == 0 && C / NH <= kAttentionMaxHeadSize &&
         B <= 65535 && NH <= 65535;
}

// Above 48 KiB of dynamic shared memory a kernel must opt in (up to 163 KiB on sm_80, 99 on
// sm_89, 227 on sm_90).
template <class Kernel>
cudaError_t allow_smem(Kernel kernel, size_t bytes) {
  if (bytes <= kDefaultSmem) return cudaSuccess;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
}

// 1/sqrt(hs) in fp32, as the CPU twin computes it.
float score_scale(int hs) { return 1.0f / std::sqrt(float(hs)); }

dim3 grid_for(int B, int T, int NH) {
  return dim3(unsigned((T + kRowTile - 1) / kRowTile), unsigned(NH), unsigned(B));
}

}  // namespace

cudaError_t attention_forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, int B,
                              int T, int C, int NH, cudaStream_t s) {
  if (!shape_ok(B, T, C, NH) || !out || !lse || !qkv) return cudaErrorInvalidValue;
  const size_t smem = forward_smem(C / NH);
  if (const cudaError_t e = allow_smem(attention_forward_kernel, smem); e != cudaSuccess) return e;
  attention_forward_kernel<<<grid_for(B, T, NH), kThreads, smem, s>>>(out, lse, qkv, T, C, NH,
                                                                      score_scale(C / NH));
  return cudaGetLastError();
}

cudaError_t attention_backward(__nv_bfloat16* dqkv, float* scratch, const __nv_bfloat16* dout,
                               const __nv_bfloat16* qkv, const __nv_bfloat16* out, const float* lse,
                               int B, int T, int C, int NH, cudaStream_t s) {
  if (!shape_ok(B, T, C, NH) || !dqkv || !scratch || !dout || !qkv || !out || !lse)
    return cudaErrorInvalidValue;
  const int hs = C / NH;
  if (const cudaError_t e = allow_smem(attention_backward_dq_kernel, dq_smem(hs)); e != cudaSuccess)
    return e;
  if (const cudaError_t e = allow_smem(attention_backward_dkdv_kernel, dkdv_smem(hs));
      e != cudaSuccess)
    return e;
  attention_backward_dq_kernel<<<grid_for(B, T, NH), kThreads, dq_smem(hs), s>>>(
      dqkv, scratch, dout, qkv, out, lse, T, C, NH, score_scale(hs));
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  attention_backward_dkdv_kernel<<<grid_for(B, T, NH), kThreads, dkdv_smem(hs), s>>>(
      dqkv, scratch, dout, qkv, lse, T, C, NH, score_scale(hs));
  return cudaGetLastError();
}

}  // namespace eco::cuda
