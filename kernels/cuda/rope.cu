// RoPE over grouped-query qkv rows ((NH + 2 KVH) hs wide: NH q heads, then KVH k heads, then KVH
// v heads; plain multi-head rows are the case KVH = NH). One thread per (token row, pair index
// i < hs/2): it computes the angle once, in double exactly as the CPU twin does (t *
// theta^(-2i/hs), cos/sin rounded to float), and applies it to pair (i, i + hs/2) of every q and k
// head, then moves v's elements i and i + hs/2 of every head.
// Launch assumptions (checked): B, Tn >= 0, NH, KVH > 0, hs even, buffers non-null and distinct.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/rope.cuh"

namespace eco::cuda {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kThreads = 256;

// kBackward: dst += R^T src (rotation by -angle); otherwise dst = R src. v: dst (+)= src.
template <bool kBackward>
__global__ void __launch_bounds__(kThreads)
    rope_kernel(bf16* dst, const bf16* src, int N, int Tn, int NH, int KVH, int hs, float theta) {
  const int half = hs / 2;
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= int64_t(N) * half) return;
  const int n = int(idx / half), i = int(idx % half), t = n % Tn;
  const double angle = t * pow(double(theta), -2.0 * i / hs);
  const float cs = float(cos(angle)), sn = float((kBackward ? -1.0 : 1.0) * sin(angle));
  const int64_t row = int64_t(n) * (NH + 2 * KVH) * hs;
  auto put = [&](int64_t j, float v) {
    dst[j] = __float2bfloat16_rn(kBackward ? __bfloat162float(dst[j]) + v : v);
  };
  for (int h = 0; h < NH + KVH; h++) {  // q heads, then k heads: contiguous
    const int64_t a = row + int64_t(h) * hs + i, b = a + half;
    const float xa = __bfloat162float(src[a]), xb = __bfloat162float(src[b]);
    put(a, xa * cs - xb * sn);
    put(b, xb * cs + xa * sn);
  }
  for (int h = NH + KVH; h < NH + 2 * KVH; h++) {  // v passes through
    const int64_t a = row + int64_t(h) * hs + i, b = a + half;
    put(a, __bfloat162float(src[a]));
    put(b, __bfloat162float(src[b]));
  }
}

template <bool kBackward>
cudaError_t rope(bf16* dst, const bf16* src, int B, int Tn, int NH, int KVH, int hs, float theta,
                 cudaStream_t s) {
  if (B < 0 || Tn < 0 || NH <= 0 || KVH <= 0 || hs <= 0 || hs % 2 != 0)
    return cudaErrorInvalidValue;
  const int64_t n = int64_t(B) * Tn * (hs / 2);
  if (n == 0) return cudaSuccess;
  if (!dst || !src || dst == src) return cudaErrorInvalidValue;
  rope_kernel<kBackward><<<unsigned((n + kThreads - 1) / kThreads), kThreads, 0, s>>>(
      dst, src, B * Tn, Tn, NH, KVH, hs, theta);
  return cudaGetLastError();
}

// C split into NH heads (the plain entry points): hs = C / NH, or 0 (refused) when it does not.
int head_size(int C, int NH) { return NH > 0 && C > 0 && C % NH == 0 ? C / NH : 0; }

}  // namespace

cudaError_t rope_forward(bf16* out, const bf16* inp, int B, int Tn, int C, int NH, float theta,
                         cudaStream_t s) {
  return rope<false>(out, inp, B, Tn, NH, NH, head_size(C, NH), theta, s);
}

cudaError_t rope_backward(bf16* dinp, const bf16* dout, int B, int Tn, int C, int NH, float theta,
                          cudaStream_t s) {
  return rope<true>(dinp, dout, B, Tn, NH, NH, head_size(C, NH), theta, s);
}

cudaError_t rope_forward_gqa(bf16* out, const bf16* inp, int B, int Tn, int NH, int KVH, int hs,
                             float theta, cudaStream_t s) {
  return rope<false>(out, inp, B, Tn, NH, KVH, hs, theta, s);
}

cudaError_t rope_backward_gqa(bf16* dinp, const bf16* dout, int B, int Tn, int NH, int KVH, int hs,
                              float theta, cudaStream_t s) {
  return rope<true>(dinp, dout, B, Tn, NH, KVH, hs, theta, s);
}

}  // namespace eco::cuda
