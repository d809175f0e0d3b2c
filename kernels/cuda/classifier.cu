// Fused classifier: one block per row. Pass 1 reads the row once with an online softmax (each
// thread keeps a running max and a sum rescaled when the max grows), the (max, sum) pairs are
// combined in a fixed tree; pass 2 recomputes exp(x - max) and writes the gradient over the
// logits, so no probabilities are stored anywhere. dlogits == logits is safe: each thread
// rewrites only the elements it read itself, and the target logit is read before the barrier
// that precedes any write. Rows are ld >= V elements apart; the gradient's columns [V, ld) are
// written zero (the head's backward GEMM reads them).
// Launch assumptions (checked): N >= 0, V > 0, ld >= V, non-null losses/logits/targets when N > 0.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/classifier.cuh"

namespace eco::cuda {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kThreads = 512;
constexpr int kUnroll = 4;

// A partial softmax normaliser: sum of exp(x - m) over the elements seen, m their max.
struct MaxSum {
  float m, s;
};

// Symmetric in (a, b), so the fixed reduction tree gives the same bits on every run. An empty
// side (s == 0, m == -inf) contributes nothing and never evaluates exp(-inf - -inf).
__device__ MaxSum combine(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  const float sa = a.s == 0.0f ? 0.0f : a.s * expf(a.m - m);
  const float sb = b.s == 0.0f ? 0.0f : b.s * expf(b.m - m);
  return {m, sa + sb};
}

__global__ void __launch_bounds__(kThreads)
    crossentropy_kernel(float* losses, bf16* dlogits, const bf16* logits,
                        const int32_t* targets, int V, int ld, float dloss) {
  __shared__ MaxSum warp_parts[kThreads / 32];
  __shared__ MaxSum row;
  const int64_t base = int64_t(blockIdx.x) * ld;
  const int target = targets[blockIdx.x];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (target < 0) {  // ignored row: loss 0, gradient 0
    if (threadIdx.x == 0) losses[blockIdx.x] = 0.0f;
    if (dlogits)
      for (int v = threadIdx.x; v < ld; v += kThreads) dlogits[base + v] = __float2bfloat16_rn(0.0f);
    return;
  }
  const float x_target = target < V ? __bfloat162float(logits[base + target]) : NAN;

  // Each thread visits v = tid, tid + kThreads, ... in order; kUnroll loads are issued before
  // they are used, so that several are in flight.
  MaxSum p{-INFINITY, 0.0f};
  auto visit = [&](float x) {
    if (x > p.m) {
      p.s = p.s * expf(p.m - x) + 1.0f;
      p.m = x;
    } else if (x != -INFINITY) {  // adds exp(-inf) = 0; skipped, as exp(-inf - -inf) is NaN
      p.s += expf(x - p.m);          // a NaN logit lands here and makes the loss NaN
    }
  };
  int v = threadIdx.x;
  for (; v + (kUnroll - 1) * kThreads < V; v += kUnroll * kThreads) {
    float x[kUnroll];
    for (int k = 0; k < kUnroll; k++) x[k] = __bfloat162float(logits[base + v + k * kThreads]);
    for (int k = 0; k < kUnroll; k++) visit(x[k]);
  }
  for (; v < V; v += kThreads) visit(__bfloat162float(logits[base + v]));
  for (int o = 16; o > 0; o >>= 1)
    p = combine(p, {__shfl_xor_sync(0xffffffffu, p.m, o), __shfl_xor_sync(0xffffffffu, p.s, o)});
  if (lane == 0) warp_parts[warp] = p;
  __syncthreads();  // every read of the row's logits for the loss happened before this barrier
  if (threadIdx.x == 0) {
    MaxSum r = warp_parts[0];
    for (int w = 1; w < kThreads / 32; w++) r = combine(r, warp_parts[w]);
    row = r;
    losses[blockIdx.x] = logf(r.s) + (r.m - x_target);
  }
  __syncthreads();
  if (!dlogits) return;
  const float mx = row.m, scale = dloss / row.s;
  auto grad = [&](int i, float x) {
    const float g = expf(x - mx) * scale;
    return __float2bfloat16_rn(i == target ? g - dloss : g);
  };
  v = threadIdx.x;
  for (; v + (kUnroll - 1) * kThreads < V; v += kUnroll * kThreads) {
    float x[kUnroll];
    for (int k = 0; k < kUnroll; k++) x[k] = __bfloat162float(logits[base + v + k * kThreads]);
    for (int k = 0; k < kUnroll; k++)
      dlogits[base + v + k * kThreads] = grad(v + k * kThreads, x[k]);
  }
  for (; v < V; v += kThreads) dlogits[base + v] = grad(v, __bfloat162float(logits[base + v]));
  for (v = V + int(threadIdx.x); v < ld; v += kThreads) dlogits[base + v] = __float2bfloat16_rn(0.0f);
}

}  // namespace

cudaError_t crossentropy_forward_backward(float* losses, bf16* dlogits, const bf16* logits,
                                          const int32_t* targets, int N, int V, int ld,
                                          float dloss, cudaStream_t s) {
  if (N < 0 || V <= 0 || ld < V) return cudaErrorInvalidValue;
  if (N == 0) return cudaSuccess;
  if (!losses || !logits || !targets) return cudaErrorInvalidValue;
  crossentropy_kernel<<<unsigned(N), kThreads, 0, s>>>(losses, dlogits, logits, targets, V, ld,
                                                              dloss);
  return cudaGetLastError();
}

}  // namespace eco::cuda
