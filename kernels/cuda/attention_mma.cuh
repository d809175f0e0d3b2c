// Causal multi-head self-attention on tensor cores through mma.sync (sm_80+), FlashAttention-2
// style: the (T, T) scores and probabilities live only in registers, tile by tile, and key tiles
// above the diagonal are never touched. Same contract as attention.cuh and attention_gemm.cuh, and
// the same lse, so a forward on one path and its backward on another agree.
//
// Layout (as kernels/cpu/kernels.h): qkv (B, T, 3C), q / k / v at column offsets 0 / C / 2C, head
// h at [h*hs, (h+1)*hs) of each; out, dout (B, T, C); lse and D (B, NH, T) fp32. No scratch
// besides D.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <initializer_list>

namespace eco::cuda {

// Whether the mma path takes this call: B, T, NH >= 1, B <= 65535, T <= 65535 * 64, C % NH == 0,
// head size hs = C / NH one of 32, 64, 128 (compiled instantiations), and the bf16 matrices (qkv,
// out; backward also dout, dqkv) non-null and 16-byte aligned (tiles are copied in 16-byte
// chunks: with hs % 8 == 0 every row and head offset is then 16-byte aligned too). Any T in that
// range (ragged tiles are zero-filled and masked). An empty list checks the shape alone.
// Otherwise use the GEMM path (attention_gemm.cuh) or the flash kernel (attention.cuh).
bool attention_mma_supported(int B, int T, int C, int NH,
                             std::initializer_list<const void*> matrices);

// out (B, T, C), lse (B, NH, T) from qkv (B, T, 3C): as eco::cuda::attention_forward; lse[b, h, t]
// = log sum_{u <= t} exp(q_t . k_u / sqrt(hs)) in fp32. Throws eco::Error naming the shapes when
// attention_mma_supported does not hold (or lse is null) and on launch errors.
void attention_mma_forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, int B, int T,
                           int C, int NH, cudaStream_t s = nullptr);

// dqkv (B, T, 3C) += the gradient of the forward's out given dout (B, T, C), from qkv, that
// forward's out and lse (any path's). D: B*NH*T floats, written with rowsum(dout * out).
// Deterministic: no atomics; every gradient element is summed by one thread in a fixed order and
// added to dqkv once (bf16(dqkv + g), one rounding). Errors as for the forward.
void attention_mma_backward(__nv_bfloat16* dqkv, float* D, const __nv_bfloat16* dout,
                            const __nv_bfloat16* qkv, const __nv_bfloat16* out, const float* lse,
                            int B, int T, int C, int NH, cudaStream_t s = nullptr);

}  // namespace eco::cuda
