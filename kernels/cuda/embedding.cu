// Embedding forward (one thread per output element) and backward without float atomics.
// Launch assumptions (checked by the launchers): B, Tn >= 0, C > 0, tables and tokens non-null
// when there is work. dwte backward: block (channel chunk of kThreads, token shard); the shard
// (tok % shards) owns its dwte rows, and each thread walks the tokens in order for one channel, so
// the summation order is the CPU twin's (token order) for every element.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/embedding.cuh"

namespace eco::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxShards = 1024;

__global__ void __launch_bounds__(kThreads)
    embedding_forward_kernel(__nv_bfloat16* out, const int32_t* tokens,
                             const float* wte, const float* wpe, int Tn, int C,
                             int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int64_t row = i / C, c = i % C;
  float v = wte[int64_t(tokens[row]) * C + c];
  if (wpe) v += wpe[(row % Tn) * C + c];
  out[i] = __float2bfloat16_rn(v);
}

// grid (ceil(C / kThreads), shards). Each tile of kThreads tokens is tested once (one token per
// thread, ballots into shared masks); then every thread walks the tile's hits in token order.
__global__ void __launch_bounds__(kThreads)
    embedding_backward_wte_kernel(float* __restrict__ dwte,
                                  const __nv_bfloat16* __restrict__ dout,
                                  const int32_t* __restrict__ tokens, int N, int C,
                                  int shards) {
  __shared__ int32_t tile[kThreads];
  __shared__ unsigned hits[kThreads / 32];
  const int c = blockIdx.x * kThreads + threadIdx.x;
  const int shard = blockIdx.y;
  for (int n0 = 0; n0 < N; n0 += kThreads) {
    const int n = n0 + threadIdx.x;
    const int tok = n < N ? tokens[n] : -1;
    const unsigned mine = __ballot_sync(0xffffffffu, tok >= 0 && tok % shards == shard);
    __syncthreads();  // the previous tile is done with
    tile[threadIdx.x] = tok;
    if (threadIdx.x % 32 == 0) hits[threadIdx.x / 32] = mine;
    __syncthreads();
    if (c >= C) continue;
    for (int w = 0; w < kThreads / 32; w++) {
      for (unsigned m = hits[w]; m != 0; m &= m - 1) {
        const int j = w * 32 + __ffs(int(m)) - 1;
        dwte[int64_t(tile[j]) * C + c] += __bfloat162float(dout[int64_t(n0 + j) * C + c]);
      }
    }
  }
}

// One thread per (t, c) of dwpe, summing over b in order.
__global__ void __launch_bounds__(kThreads)
    embedding_backward_wpe_kernel(float* dwpe, const __nv_bfloat16* dout, int B, int Tn,
                                  int C) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(Tn) * C) return;
  float acc = dwpe[i];
  for (int b = 0; b < B; b++) acc += __bfloat162float(dout[int64_t(b) * Tn * C + i]);
  dwpe[i] = acc;
}

unsigned blocks_for(int64_t n) { return unsigned((n + kThreads - 1) / kThreads); }

}  // namespace

cudaError_t embedding_forward(__nv_bfloat16* out, const int32_t* tokens, const float* wte,
                              const float* wpe, int B, int Tn, int C, cudaStream_t s) {
  if (B < 0 || Tn < 0 || C <= 0) return cudaErrorInvalidValue;
  const int64_t n = int64_t(B) * Tn * C;
  if (n == 0) return cudaSuccess;
  if (!out || !tokens || !wte) return cudaErrorInvalidValue;
  embedding_forward_kernel<<<blocks_for(n), kThreads, 0, s>>>(out, tokens, wte, wpe, Tn, C, n);
  return cudaGetLastError();
}

cudaError_t embedding_backward(float* dwte, float* dwpe, const __nv_bfloat16* dout,
                               const int32_t* tokens, int B, int Tn, int C, cudaStream_t s) {
  if (B < 0 || Tn < 0 || C <= 0) return cudaErrorInvalidValue;
  const int N = B * Tn;
  if (N == 0) return cudaSuccess;
  if (!dwte || !dout || !tokens) return cudaErrorInvalidValue;
  // ~8 tokens per shard on average (each hit is a dependent read-modify-write); a shard count
  // that depends only on N keeps runs identical.
  const int shards = std::clamp(N / 8, 1, kMaxShards);
  const dim3 grid(unsigned((C + kThreads - 1) / kThreads), unsigned(shards));
  embedding_backward_wte_kernel<<<grid, kThreads, 0, s>>>(dwte, dout, tokens, N, C, shards);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess || !dwpe) return e;
  embedding_backward_wpe_kernel<<<blocks_for(int64_t(Tn) * C), kThreads, 0, s>>>(dwpe, dout, B, Tn,
                                                                                 C);
  return cudaGetLastError();
}

}  // namespace eco::cuda
