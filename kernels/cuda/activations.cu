// GELU-tanh, SwiGLU and GeGLU on bf16: values are widened to fp32, computed with the shared
// src/base/math math and rounded once to bf16 on store. Eight outputs per thread, moved with
// 16-byte accesses when the buffers are 16-byte aligned (and, for the gated units, H % 8 == 0, so
// that a chunk never crosses a row); anything else goes element by element.
// Launch assumptions (checked): n, N, H >= 0; buffers non-null when there is work.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "base/math/activations.h"
#include "kernels/cuda/activations.cuh"
#include "kernels/cuda/elementwise.cuh"

namespace eco::cuda {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kThreads = 256;

struct GeluForward {
  __device__ float operator()(float x) const { return gelu_tanh(x); }
};
struct GeluBackward {  // dinp + gelu'(x) * dout
  __device__ float operator()(float dinp, float x, float d) const {
    return dinp + gelu_tanh_grad(x) * d;
  }
};

// The gates of the gated units: the activation and its derivative (src/base/math/activations.h,
// the CPU twin's math; GeGLU's GELU is the tanh form there too).
struct Silu {
  __device__ float operator()(float x) const { return silu(x); }
  __device__ float grad(float x) const { return silu_grad(x); }
};
struct GeluTanh {
  __device__ float operator()(float x) const { return gelu_tanh(x); }
  __device__ float grad(float x) const { return gelu_tanh_grad(x); }
};

// Thread t owns outputs [8t, 8t + 8) of the (N, H) output; gate of output i = row * 2H + i % H,
// up = gate + H. kBackward: dst is dinp (N, 2H) += (act'(gate) * up * dout, act(gate) * dout);
// otherwise dst is out (N, H) = act(gate) * up.
template <bool kBackward, class Act>
__global__ void __launch_bounds__(kThreads)
    gated_kernel(bf16* dst, const bf16* dout, const bf16* inp, int64_t n, int H, bool vec,
                 Act act) {
  const int64_t i0 = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * kBf16Chunk;
  if (i0 >= n) return;
  const int count = int(n - i0 < kBf16Chunk ? n - i0 : kBf16Chunk);
  auto gate_index = [&](int64_t i) { return (i / H) * 2 * H + i % H; };
  float gate[kBf16Chunk], up[kBf16Chunk], d[kBf16Chunk], dgate[kBf16Chunk], dup[kBf16Chunk];
  if (vec) {  // the chunk lies in one row: gate and up are contiguous too
    const int64_t g = gate_index(i0);
    load_chunk(gate, inp + g, count, true);
    load_chunk(up, inp + g + H, count, true);
    if constexpr (kBackward) {
      load_chunk(d, dout + i0, count, true);
      load_chunk(dgate, dst + g, count, true);
      load_chunk(dup, dst + g + H, count, true);
    }
  } else {
    for (int k = 0; k < kBf16Chunk; k++) {
      if (k >= count) break;
      const int64_t g = gate_index(i0 + k);
      gate[k] = __bfloat162float(inp[g]);
      up[k] = __bfloat162float(inp[g + H]);
      if constexpr (kBackward) {
        d[k] = __bfloat162float(dout[i0 + k]);
        dgate[k] = __bfloat162float(dst[g]);
        dup[k] = __bfloat162float(dst[g + H]);
      }
    }
  }
  for (int k = 0; k < kBf16Chunk; k++) {
    if (k >= count) break;
    if constexpr (kBackward) {
      dgate[k] += act.grad(gate[k]) * up[k] * d[k];
      dup[k] += act(gate[k]) * d[k];
    } else {
      gate[k] = act(gate[k]) * up[k];  // the output, in place
    }
  }
  if (vec) {
    if constexpr (kBackward) {
      store_chunk(dst + gate_index(i0), dgate, count, true);
      store_chunk(dst + gate_index(i0) + H, dup, count, true);
    } else {
      store_chunk(dst + i0, gate, count, true);
    }
  } else {
    for (int k = 0; k < kBf16Chunk; k++) {
      if (k >= count) break;
      if constexpr (kBackward) {
        const int64_t g = gate_index(i0 + k);
        dst[g] = __float2bfloat16_rn(dgate[k]);
        dst[g + H] = __float2bfloat16_rn(dup[k]);
      } else {
        dst[i0 + k] = __float2bfloat16_rn(gate[k]);
      }
    }
  }
}

template <bool kBackward, class Act>
cudaError_t gated(bf16* dst, const bf16* dout, const bf16* inp, int N, int H, Act act,
                  cudaStream_t s) {
  const int64_t n = int64_t(N) * H;
  if (N < 0 || H < 0 || (n > 0 && (!dst || !inp || (kBackward && !dout))))
    return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  const bool vec =
      H % kBf16Chunk == 0 && aligned16(dst) && aligned16(inp) && (!kBackward || aligned16(dout));
  const int64_t threads = (n + kBf16Chunk - 1) / kBf16Chunk;
  gated_kernel<kBackward><<<unsigned((threads + kThreads - 1) / kThreads), kThreads, 0, s>>>(
      dst, dout, inp, n, H, vec, act);
  return cudaGetLastError();
}

}  // namespace

cudaError_t gelu_forward(bf16* out, const bf16* inp, int64_t n, cudaStream_t s) {
  return map_bf16<1>(out, inp, nullptr, nullptr, n, GeluForward{}, s);
}

cudaError_t gelu_backward(bf16* dinp, const bf16* inp, const bf16* dout, int64_t n,
                          cudaStream_t s) {
  return map_bf16<3>(dinp, dinp, inp, dout, n, GeluBackward{}, s);
}

cudaError_t swiglu_forward(bf16* out, const bf16* inp, int N, int H, cudaStream_t s) {
  return gated<false>(out, nullptr, inp, N, H, Silu{}, s);
}

cudaError_t swiglu_backward(bf16* dinp, const bf16* dout, const bf16* inp, int N, int H,
                            cudaStream_t s) {
  return gated<true>(dinp, dout, inp, N, H, Silu{}, s);
}

cudaError_t geglu_forward(bf16* out, const bf16* inp, int N, int H, cudaStream_t s) {
  return gated<false>(out, nullptr, inp, N, H, GeluTanh{}, s);
}

cudaError_t geglu_backward(bf16* dinp, const bf16* dout, const bf16* inp, int N, int H,
                           cudaStream_t s) {
  return gated<true>(dinp, dout, inp, N, H, GeluTanh{}, s);
}

}  // namespace eco::cuda
