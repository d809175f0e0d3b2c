// First CUDA kernels: element-wise GELU / SwiGLU and the AdamW update, built from the same
// kernels/common functions the CPU backend uses (so both backends compute identical math).
// Launch assumptions: 1-D grids of 256 threads, any n (tail handled), fp32 buffers.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/activations.h"
#include "kernels/common/adamw.h"
#include "kernels/cuda/elementwise.cuh"

namespace eco::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void gelu_forward_kernel(float* out, const float* inp, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = gelu_tanh(inp[i]);
}

__global__ void gelu_backward_kernel(float* dinp, const float* inp, const float* dout, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dinp[i] += gelu_tanh_grad(inp[i]) * dout[i];
}

// inp (N, 2H) = [gate | up] per row -> out (N, H)
__global__ void swiglu_forward_kernel(float* out, const float* inp, int N, int H) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(N) * H) return;
  const int64_t row = i / H, col = i % H;
  const float gate = inp[row * 2 * H + col], up = inp[row * 2 * H + H + col];
  out[i] = silu(gate) * up;
}

__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, int64_t n,
                             AdamWCoeffs c) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) {
    float mi = m[i], vi = v[i];
    param[i] = adamw_element(param[i], grad[i], mi, vi, c);
    m[i] = mi;
    v[i] = vi;
  }
}

unsigned blocks_for(int64_t n) { return unsigned((n + kThreads - 1) / kThreads); }

}  // namespace

cudaError_t gelu_forward(float* out, const float* inp, int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  gelu_forward_kernel<<<blocks_for(n), kThreads, 0, s>>>(out, inp, n);
  return cudaGetLastError();
}

cudaError_t gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n,
                          cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  gelu_backward_kernel<<<blocks_for(n), kThreads, 0, s>>>(dinp, inp, dout, n);
  return cudaGetLastError();
}

cudaError_t swiglu_forward(float* out, const float* inp, int N, int H, cudaStream_t s) {
  const int64_t n = int64_t(N) * H;
  if (n == 0) return cudaSuccess;
  swiglu_forward_kernel<<<blocks_for(n), kThreads, 0, s>>>(out, inp, N, H);
  return cudaGetLastError();
}

cudaError_t adamw_update(float* param, const float* grad, float* m, float* v, int64_t n,
                         const AdamWCoeffs& c, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  adamw_kernel<<<blocks_for(n), kThreads, 0, s>>>(param, grad, m, v, n, c);
  return cudaGetLastError();
}

}  // namespace eco::cuda
