// Fused optimizer updates of quantized weights (ECO.md): the per-element math is
// kernels/common/eco_update.h's quantized_update_pass1/pass2, the same code the CPU driver runs,
// so both backends write the same bits. Only the schedule is CUDA's:
//   PerRow / Block128: one block per scale group. Every thread reads the group's old scale into a
//     register, loops its elements through pass 1 (m, v stored; theta in a register, only its
//     |.| kept), the block reduces absmax (fmaxf: exact and order-free), every thread derives
//     the new scale, loops pass 2 (theta recomputed from the stored moments, bit-identical), and
//     thread 0 writes the new scale last. The scale array is read only before the barrier.
//   PerTensor (INT4 fine-tuning, or any format): one block cannot stream a whole tensor, so
//     pass 1 runs over fixed chunks writing per-chunk absmax to scratch, one block reduces them
//     (old scale -> scratch[0], new scale -> scales[0]), then pass 2 over the same chunks.
// INT4 packs two codes per byte and store_code is a read-modify-write of the byte: each thread
// owns whole bytes (element pairs 2u, 2u+1), so no two threads touch one byte.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/eco_update.h"
#include "kernels/common/format_quantizer.h"
#include "kernels/cuda/optimizer_update.cuh"

namespace eco::cuda {
namespace {

constexpr int kGroupThreads = 512;   // group kernel: blockDim.x a multiple of 32, <= 512
constexpr int kTensorThreads = 256;  // per-tensor kernels
constexpr int64_t kTensorUnitsPerBlock = kTensorThreads * 16;
constexpr int kElementwiseThreads = 256;

// Max over the block (blockDim.x a multiple of 32); every thread gets the result. fmaxf ignores
// NaNs and is exact, so any order gives the CPU's sequential fmaxf. One call per kernel.
__device__ float block_max(float v) {
  __shared__ float warp_max[32];
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_max[warp] = v;
  __syncthreads();
  v = lane < int(blockDim.x >> 5) ? warp_max[lane] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  return v;
}

// Elements per code byte.
__device__ int codes_per_byte(const FormatQuantizer& q) {
  return q.format == QFormat::INT4 ? 2 : 1;
}

// Calls f(i) for this thread's elements of the group `span`, in a fixed order. A unit is the
// `per` elements that share a code byte (cols even for INT4, so units never straddle groups).
template <bool kRowGroups, class F>
__device__ void for_each_group_element(const GroupSpan& span, int per, F&& f) {
  const int units_per_row = int((span.cols + per - 1) / per);
  const int units = int(span.rows) * units_per_row;
  for (int u = threadIdx.x; u < units; u += blockDim.x) {
    const int r = kRowGroups ? 0 : u / units_per_row;
    const int c0 = (u - r * units_per_row) * per;
    for (int e = 0; e < per && c0 + e < span.cols; ++e) f(span.index(r, c0 + e));
  }
}

// grid (number of groups), block (multiple of 32, <= kGroupThreads; two blocks per SM, so one
// block's pass 1 overlaps the other's barrier and pass 2). kRowGroups: PerRow groups, else
// Block128 tiles.
template <class Rule, class S, bool kRowGroups>
__global__ void __launch_bounds__(kGroupThreads, 2)
    quantized_update_groups_kernel(Rule rule, FormatQuantizer q, UpdatePolicy policy,
                                   QuantizedUpdateBuffers<S, float> b, float* scales, int64_t rows,
                                   int64_t cols) {
  const int64_t k = blockIdx.x;
  const GroupSpan span =
      scale_group_span(kRowGroups ? Granularity::PerRow : Granularity::Block128, rows, cols, k);
  const int per = codes_per_byte(q);
  const float old_scale = scales[k];  // every thread, before block_max's barrier

  float absmax = 0.0f;
  for_each_group_element<kRowGroups>(span, per, [&](int64_t i) {
    absmax = fmaxf(absmax, fabsf(quantized_update_pass1(rule, q, policy, b, i, old_scale)));
  });
  const float new_scale = q.scale_for(block_max(absmax));
  for_each_group_element<kRowGroups>(span, per, [&](int64_t i) {
    quantized_update_pass2(rule, q, policy, b, i, old_scale, new_scale);
  });
  if (threadIdx.x == 0) scales[k] = new_scale;  // no thread reads scales[k] after the barrier
}

// Per-tensor group, chunk blockIdx.x: units [blockIdx.x * kTensorUnitsPerBlock,
// +kTensorUnitsPerBlock).
template <class F>
__device__ void for_each_chunk_element(int64_t n, int per, F&& f) {
  const int64_t units = (n + per - 1) / per;
  const int64_t u0 = int64_t(blockIdx.x) * kTensorUnitsPerBlock;
  const int64_t u1 = u0 + kTensorUnitsPerBlock < units ? u0 + kTensorUnitsPerBlock : units;
  for (int64_t u = u0 + threadIdx.x; u < u1; u += kTensorThreads)
    for (int e = 0; e < per && u * per + e < n; ++e) f(u * per + e);
}

// Per-tensor pass 1: grid (chunks), block (kTensorThreads). chunk_max (chunks) <- absmax |theta|.
template <class Rule, class S>
__global__ void __launch_bounds__(kTensorThreads)
    tensor_update_pass1_kernel(Rule rule, FormatQuantizer q, UpdatePolicy policy,
                               QuantizedUpdateBuffers<S, float> b, const float* scales,
                               float* chunk_max, int64_t n) {
  const float old_scale = scales[0];
  float absmax = 0.0f;
  for_each_chunk_element(n, codes_per_byte(q), [&](int64_t i) {
    absmax = fmaxf(absmax, fabsf(quantized_update_pass1(rule, q, policy, b, i, old_scale)));
  });
  absmax = block_max(absmax);
  if (threadIdx.x == 0) chunk_max[blockIdx.x] = absmax;
}

// One block (kTensorThreads): scratch[0] <- old scale, scales[0] <- scale_for(max of chunk_max).
__global__ void __launch_bounds__(kTensorThreads)
    tensor_update_scale_kernel(FormatQuantizer q, float* scales, float* scratch, int64_t chunks) {
  const float* chunk_max = scratch + 1;
  float m = 0.0f;
  for (int64_t c = threadIdx.x; c < chunks; c += kTensorThreads) m = fmaxf(m, chunk_max[c]);
  m = block_max(m);
  if (threadIdx.x == 0) {
    scratch[0] = scales[0];
    scales[0] = q.scale_for(m);
  }
}

// Per-tensor pass 2: grid (chunks), block (kTensorThreads); old scale in scratch[0], new in
// scales[0].
template <class Rule, class S>
__global__ void __launch_bounds__(kTensorThreads)
    tensor_update_pass2_kernel(Rule rule, FormatQuantizer q, UpdatePolicy policy,
                               QuantizedUpdateBuffers<S, float> b, const float* scales,
                               const float* scratch, int64_t n) {
  const float old_scale = scratch[0], new_scale = scales[0];
  for_each_chunk_element(n, codes_per_byte(q), [&](int64_t i) {
    quantized_update_pass2(rule, q, policy, b, i, old_scale, new_scale);
  });
}

int64_t tensor_chunks(int64_t n, QFormat f) {
  const int64_t units = f == QFormat::INT4 ? (n + 1) / 2 : n;
  return (units + kTensorUnitsPerBlock - 1) / kTensorUnitsPerBlock;
}

// About 16 units per thread, 2..16 warps: an 8192-wide row gets 512 threads and two rows are in
// flight per SM (~47 MB over 132 SMs at 178 KB a row), so pass 2's re-reads of m, v and the codes
// should still find them in L2.
int group_threads(int64_t units) {
  const int64_t warps = (units + 16 * 32 - 1) / (16 * 32);
  return int(warps < 2 ? 2 : warps > kGroupThreads / 32 ? kGroupThreads / 32 : warps) * 32;
}

template <class Rule, class S>
cudaError_t launch_quantized_update(const Rule& rule, const FormatQuantizer& q, UpdatePolicy policy,
                                    const QuantizedUpdateBuffers<S, float>& b, float* scales,
                                    int64_t rows, int64_t cols, Granularity granularity,
                                    float* scratch, cudaStream_t s) {
  if (rows < 0 || cols < 1 || rows > int64_t(INT32_MAX) || cols > int64_t(INT32_MAX))
    return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  if (!b.codes || !b.grad || !b.m || !scales) return cudaErrorInvalidValue;
  if (Rule::kHasV && !b.v) return cudaErrorInvalidValue;
  if (policy == UpdatePolicy::Master && !b.master) return cudaErrorInvalidValue;
  const int per = q.format == QFormat::INT4 ? 2 : 1;
  switch (granularity) {
    case Granularity::PerRow:
      if (cols % per != 0) return cudaErrorInvalidValue;
      quantized_update_groups_kernel<Rule, S, true>
          <<<unsigned(rows), group_threads(cols / per), 0, s>>>(rule, q, policy, b, scales, rows,
                                                                cols);
      return cudaGetLastError();
    case Granularity::Block128: {
      if (cols % per != 0) return cudaErrorInvalidValue;
      const int64_t groups = scale_group_count(granularity, rows, cols);
      if (groups > int64_t(INT32_MAX)) return cudaErrorInvalidValue;
      const int64_t tile_units = (rows < kScaleBlock ? rows : kScaleBlock) *
                                 ((cols < kScaleBlock ? cols : kScaleBlock) / per);
      quantized_update_groups_kernel<Rule, S, false>
          <<<unsigned(groups), group_threads(tile_units), 0, s>>>(rule, q, policy, b, scales, rows,
                                                                  cols);
      return cudaGetLastError();
    }
    case Granularity::PerTensor: {
      if (!scratch) return cudaErrorInvalidValue;
      const int64_t n = rows * cols, chunks = tensor_chunks(n, q.format);
      if (chunks > int64_t(INT32_MAX)) return cudaErrorInvalidValue;
      tensor_update_pass1_kernel<Rule, S>
          <<<unsigned(chunks), kTensorThreads, 0, s>>>(rule, q, policy, b, scales, scratch + 1, n);
      if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
      tensor_update_scale_kernel<<<1, kTensorThreads, 0, s>>>(q, scales, scratch, chunks);
      if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
      tensor_update_pass2_kernel<Rule, S>
          <<<unsigned(chunks), kTensorThreads, 0, s>>>(rule, q, policy, b, scales, scratch, n);
      return cudaGetLastError();
    }
  }
  return cudaErrorInvalidValue;
}

// ---- plain fp32 steps ----------------------------------------------------------------------

// Thread t updates elements [4t, 4t + 4) (kVec: one float4 of each buffer), then the tail
// n - n % 4 .. n - 1 is done by the first n % 4 threads. Element math as the CPU loop.
template <bool kVec>
__global__ void fp32_adamw_kernel(float* __restrict__ param, const float* __restrict__ grad,
                                  float* __restrict__ m, float* __restrict__ v, int64_t n,
                                  AdamWCoeffs c) {
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t < n / 4) {
    if constexpr (kVec) {
      float4 p = reinterpret_cast<float4*>(param)[t], mm = reinterpret_cast<float4*>(m)[t],
             vv = reinterpret_cast<float4*>(v)[t];
      const float4 g = reinterpret_cast<const float4*>(grad)[t];
      p.x = adamw_element(p.x, g.x, mm.x, vv.x, c);
      p.y = adamw_element(p.y, g.y, mm.y, vv.y, c);
      p.z = adamw_element(p.z, g.z, mm.z, vv.z, c);
      p.w = adamw_element(p.w, g.w, mm.w, vv.w, c);
      reinterpret_cast<float4*>(param)[t] = p;
      reinterpret_cast<float4*>(m)[t] = mm;
      reinterpret_cast<float4*>(v)[t] = vv;
    } else {
      for (int64_t i = 4 * t; i < 4 * t + 4; ++i)
        param[i] = adamw_element(param[i], grad[i], m[i], v[i], c);
    }
  }
  if (t < n % 4) {
    const int64_t i = n - n % 4 + t;
    param[i] = adamw_element(param[i], grad[i], m[i], v[i], c);
  }
}

template <bool kVec>
__global__ void fp32_sgdm_kernel(float* __restrict__ param, const float* __restrict__ grad,
                                 float* __restrict__ m, int64_t n, SgdmCoeffs c) {
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  auto step = [&](float& w, float g, float& mom) {
    sgdm_moment(g, mom, c);
    w = sgdm_theta(w, mom, c);
  };
  if (t < n / 4) {
    if constexpr (kVec) {
      float4 p = reinterpret_cast<float4*>(param)[t], mm = reinterpret_cast<float4*>(m)[t];
      const float4 g = reinterpret_cast<const float4*>(grad)[t];
      step(p.x, g.x, mm.x);
      step(p.y, g.y, mm.y);
      step(p.z, g.z, mm.z);
      step(p.w, g.w, mm.w);
      reinterpret_cast<float4*>(param)[t] = p;
      reinterpret_cast<float4*>(m)[t] = mm;
    } else {
      for (int64_t i = 4 * t; i < 4 * t + 4; ++i) step(param[i], grad[i], m[i]);
    }
  }
  if (t < n % 4) {
    const int64_t i = n - n % 4 + t;
    step(param[i], grad[i], m[i]);
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

unsigned elementwise_blocks(int64_t n) {
  const int64_t threads = n / 4 > 3 ? n / 4 : 3;  // >= n % 4 threads for the tail
  return unsigned((threads + kElementwiseThreads - 1) / kElementwiseThreads);
}

}  // namespace

int64_t quantized_update_scratch_floats(int64_t rows, int64_t cols, QFormat format,
                                        Granularity granularity) {
  if (granularity != Granularity::PerTensor || rows <= 0 || cols <= 0) return 0;
  return 1 + tensor_chunks(rows * cols, format);
}

cudaError_t quantized_adamw_update(const AdamWCoeffs& c, const FormatQuantizer& q,
                                   UpdatePolicy policy, const QuantizedUpdateBuffers<float>& b,
                                   float* scales, int64_t rows, int64_t cols,
                                   Granularity granularity, float* scratch, cudaStream_t s) {
  return launch_quantized_update(AdamWRule{c}, q, policy, b, scales, rows, cols, granularity,
                                 scratch, s);
}
cudaError_t quantized_adamw_update(const AdamWCoeffs& c, const FormatQuantizer& q,
                                   UpdatePolicy policy, const QuantizedUpdateBuffers<uint16_t>& b,
                                   float* scales, int64_t rows, int64_t cols,
                                   Granularity granularity, float* scratch, cudaStream_t s) {
  return launch_quantized_update(AdamWRule{c}, q, policy, b, scales, rows, cols, granularity,
                                 scratch, s);
}
cudaError_t quantized_sgdm_update(const SgdmCoeffs& c, const FormatQuantizer& q,
                                  UpdatePolicy policy, const QuantizedUpdateBuffers<float>& b,
                                  float* scales, int64_t rows, int64_t cols,
                                  Granularity granularity, float* scratch, cudaStream_t s) {
  return launch_quantized_update(SgdmRule{c}, q, policy, b, scales, rows, cols, granularity,
                                 scratch, s);
}
cudaError_t quantized_sgdm_update(const SgdmCoeffs& c, const FormatQuantizer& q,
                                  UpdatePolicy policy, const QuantizedUpdateBuffers<uint16_t>& b,
                                  float* scales, int64_t rows, int64_t cols,
                                  Granularity granularity, float* scratch, cudaStream_t s) {
  return launch_quantized_update(SgdmRule{c}, q, policy, b, scales, rows, cols, granularity,
                                 scratch, s);
}

cudaError_t fp32_adamw_update(float* param, const float* grad, float* m, float* v, int64_t n,
                              const AdamWCoeffs& c, cudaStream_t s) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (!param || !grad || !m || !v) return cudaErrorInvalidValue;
  if (aligned16(param) && aligned16(grad) && aligned16(m) && aligned16(v))
    fp32_adamw_kernel<true>
        <<<elementwise_blocks(n), kElementwiseThreads, 0, s>>>(param, grad, m, v, n, c);
  else
    fp32_adamw_kernel<false>
        <<<elementwise_blocks(n), kElementwiseThreads, 0, s>>>(param, grad, m, v, n, c);
  return cudaGetLastError();
}

cudaError_t fp32_sgdm_update(float* param, const float* grad, float* m, int64_t n,
                             const SgdmCoeffs& c, cudaStream_t s) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (!param || !grad || !m) return cudaErrorInvalidValue;
  if (aligned16(param) && aligned16(grad) && aligned16(m))
    fp32_sgdm_kernel<true>
        <<<elementwise_blocks(n), kElementwiseThreads, 0, s>>>(param, grad, m, n, c);
  else
    fp32_sgdm_kernel<false>
        <<<elementwise_blocks(n), kElementwiseThreads, 0, s>>>(param, grad, m, n, c);
  return cudaGetLastError();
}

}  // namespace eco::cuda
