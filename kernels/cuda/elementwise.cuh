// Element-wise CUDA kernels (see elementwise.cu): residual add, gradient accumulate and in-place
// scale (Gemma's embedding scale) on bf16 activations, the fp32 add (Gemma's 1 + w norm gains),
// in-place scale of fp32 buffers (clipping) and an fp32 GELU. Each host entry point
// returns the launch status; callers check it with ECO_CHECK_CUDA. Under nvcc, also the bf16
// element-wise map that these and the MLP activations (activations.cu) are built on.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace eco::cuda {

// out (n) = a + b (bf16, fp32 add, one rounding). out may alias a or b.
cudaError_t residual_forward(__nv_bfloat16* out, const __nv_bfloat16* a, const __nv_bfloat16* b,
                             int64_t n, cudaStream_t s = nullptr);
// out (n) = a + b in fp32 (parameter-dtype operands: the (1 + w) gains of Gemma's norms). out may
// alias a or b.
cudaError_t add_f32(float* out, const float* a, const float* b, int64_t n,
                    cudaStream_t s = nullptr);
// x (n) *= scale (bf16, the product in fp32, one rounding: Gemma's embedding scale sqrt(d) and its
// backward).
cudaError_t scale_inplace_bf16(__nv_bfloat16* x, float scale, int64_t n,
                               cudaStream_t s = nullptr);
// dst (n) += src (bf16).
cudaError_t accumulate(__nv_bfloat16* dst, const __nv_bfloat16* src, int64_t n,
                       cudaStream_t s = nullptr);
// acc (n) = acc + x (fp32: the rank-order gradient accumulation of the trainer).
cudaError_t add_inplace_f32(float* acc, const float* x, int64_t n, cudaStream_t s = nullptr);
// x (n) *= s (fp32: gradient clipping).
cudaError_t scale_inplace(float* x, float scale, int64_t n, cudaStream_t s = nullptr);
// fp32 GELU on the shared math: the bit-identity check of src/base/math on the GPU
// (tests/gpu/test_quantize_gpu.cu). The training path is the bf16 one in activations.cuh.
cudaError_t gelu_forward(float* out, const float* inp, int64_t n, cudaStream_t s = nullptr);

}  // namespace eco::cuda

#if defined(__CUDACC__)
namespace eco::cuda {

// Eight consecutive bf16 values per thread, moved as one 16-byte access when `vec` (every buffer
// 16-byte aligned) and the chunk is whole; the ragged tail and misaligned buffers go element by
// element. Arithmetic is fp32; each output is rounded once. Element k of a 16-byte vector is bits
// 16 * (k % 2) of word k / 2 (little-endian), unpacked with shifts rather than pointer punning.
constexpr int kBf16Chunk = 8;

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

__device__ inline void load_chunk(float (&x)[kBf16Chunk], const __nv_bfloat16* p, int count,
                                  bool vec) {
  if (vec && count == kBf16Chunk) {
    const uint4 u = *reinterpret_cast<const uint4*>(p);
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
    for (int k = 0; k < kBf16Chunk; k++)
      x[k] = __bfloat162float(__ushort_as_bfloat16(uint16_t(w[k / 2] >> (16 * (k % 2)))));
  } else {
    for (int k = 0; k < kBf16Chunk; k++) x[k] = k < count ? __bfloat162float(p[k]) : 0.0f;
  }
}

__device__ inline void store_chunk(__nv_bfloat16* p, const float (&x)[kBf16Chunk], int count,
                                   bool vec) {
  if (vec && count == kBf16Chunk) {
    uint32_t w[4] = {0u, 0u, 0u, 0u};
    for (int k = 0; k < kBf16Chunk; k++)
      w[k / 2] |= uint32_t(__bfloat16_as_ushort(__float2bfloat16_rn(x[k]))) << (16 * (k % 2));
    *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
  } else {
    for (int k = 0; k < kBf16Chunk; k++)
      if (k < count) p[k] = __float2bfloat16_rn(x[k]);
  }
}

// out[i] = f(in0[i], ..., in{kIn-1}[i]) over n elements; out may alias an input (each thread
// loads its whole chunk before it stores). F is a functor with a __device__ operator().
constexpr int kMapThreads = 256;  // map_bf16_kernel's block
template <int kIn, class F>
__global__ void __launch_bounds__(kMapThreads)
    map_bf16_kernel(__nv_bfloat16* out, const __nv_bfloat16* in0, const __nv_bfloat16* in1,
                    const __nv_bfloat16* in2, int64_t n, bool vec, F f) {
  const int64_t i0 = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * kBf16Chunk;
  if (i0 >= n) return;
  const int count = int(n - i0 < kBf16Chunk ? n - i0 : kBf16Chunk);
  float a[kBf16Chunk], b[kBf16Chunk], c[kBf16Chunk];
  load_chunk(a, in0 + i0, count, vec);
  if constexpr (kIn > 1) load_chunk(b, in1 + i0, count, vec);
  if constexpr (kIn > 2) load_chunk(c, in2 + i0, count, vec);
  for (int k = 0; k < kBf16Chunk; k++) {
    if constexpr (kIn == 1) a[k] = f(a[k]);
    if constexpr (kIn == 2) a[k] = f(a[k], b[k]);
    if constexpr (kIn == 3) a[k] = f(a[k], b[k], c[k]);
  }
  store_chunk(out + i0, a, count, vec);
}

// Launches map_bf16_kernel; n >= 0 and the kIn inputs non-null when n > 0 (else
// cudaErrorInvalidValue). Unused inputs are null.
template <int kIn, class F>
cudaError_t map_bf16(__nv_bfloat16* out, const __nv_bfloat16* in0, const __nv_bfloat16* in1,
                     const __nv_bfloat16* in2, int64_t n, F f, cudaStream_t s) {
  static_assert(kIn >= 1 && kIn <= 3);
  const __nv_bfloat16* in[3] = {in0, in1, in2};
  bool ok = n >= 0 && (n == 0 || out), vec = aligned16(out);
  for (int k = 0; k < kIn; k++) {
    ok = ok && (n == 0 || in[k]);
    vec = vec && aligned16(in[k]);
  }
  if (!ok) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  const int64_t threads = (n + kBf16Chunk - 1) / kBf16Chunk;
  map_bf16_kernel<kIn><<<unsigned((threads + kMapThreads - 1) / kMapThreads), kMapThreads, 0, s>>>(
      out, in0, in1, in2, n, vec, f);
  return cudaGetLastError();
}

}  // namespace eco::cuda
#endif  // __CUDACC__
