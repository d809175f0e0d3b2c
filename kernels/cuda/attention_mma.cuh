// Causal self-attention on tensor cores through mma.sync (sm_80+), FlashAttention-2 style: the
// (T, T) scores and probabilities live only in registers, tile by tile, and key tiles outside the
// causal window are never touched. Grouped-query, sliding-window, query-scaled attention
// (src/base/math/attention_shape.h) and plain multi-head attention as its special case. Same
// contracts as attention.cuh (the flash kernel) and, for plain attention, attention_gemm.cuh, and
// the same lse, so a forward on one path and its backward on another agree.
//
// Layout (as kernels/cpu/kernels.h): qkv (B, T, (NH + 2 KVH) hs), query head h at column h hs,
// key head g at (NH + g) hs, value head g at (NH + KVH + g) hs (plain: q / k / v at 0 / C / 2C);
// out, dout (B, T, NH hs); lse and D (B, NH, T) fp32. No scratch besides D.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <initializer_list>

#include "base/math/attention_shape.h"

namespace eco::cuda {

// Whether the mma path takes this call: B, T, NH, KVH >= 1, NH % KVH == 0, B <= 65535,
// T <= 65535 * 64, head size one of 32, 64, 128, 256 (compiled instantiations), window >= 0,
// q_scalar > 0, and the bf16 matrices (qkv, out; backward also dout, dqkv) non-null and 16-byte
// aligned (tiles are copied in 16-byte chunks: with hs % 8 == 0 every row and head offset is then
// 16-byte aligned too). Any T in that range (ragged tiles are zero-filled and masked). An empty
// list checks the shape alone. Otherwise use the flash kernel (attention.cuh) or, for plain
// attention, the GEMM path (attention_gemm.cuh).
bool attention_mma_gqa_supported(int B, int T, const AttentionShape& a,
                                 std::initializer_list<const void*> matrices);
// The same for plain multi-head attention over C = NH hs (C % NH == 0).
bool attention_mma_supported(int B, int T, int C, int NH,
                             std::initializer_list<const void*> matrices);

// out (B, T, NH hs), lse (B, NH, T) from qkv: as eco::cuda::attention_forward_gqa; lse[b, h, t] =
// log sum over the keys u query t sees of exp(q_t . k_u q_scalar^-1/2), in fp32. Throws eco::Error
// naming the shapes when attention_mma_gqa_supported does not hold (or lse is null) and on launch
// errors.
void attention_mma_forward_gqa(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, int B,
                               int T, const AttentionShape& a, cudaStream_t s = nullptr);

// dqkv += the gradient of the forward's out given dout (B, T, NH hs), from qkv, that forward's out
// and lse (any path's). D: B*NH*T floats, written with rowsum(dout * out). Deterministic: no
// atomics; every gradient element is summed by one thread in a fixed order (a kv head's dk, dv
// over its query heads in head order) and added to dqkv once (bf16(dqkv + g), one rounding).
// Errors as for the forward.
void attention_mma_backward_gqa(__nv_bfloat16* dqkv, float* D, const __nv_bfloat16* dout,
                                const __nv_bfloat16* qkv, const __nv_bfloat16* out,
                                const float* lse, int B, int T, const AttentionShape& a,
                                cudaStream_t s = nullptr);

// Plain multi-head attention over C = NH hs (scale 1/sqrt(hs)): the calls above with
// AttentionShape::multi_head(NH, C / NH); a C that does not split into heads the path takes is
// refused naming B, T, C and NH.
void attention_mma_forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, int B, int T,
                           int C, int NH, cudaStream_t s = nullptr);
void attention_mma_backward(__nv_bfloat16* dqkv, float* D, const __nv_bfloat16* dout,
                            const __nv_bfloat16* qkv, const __nv_bfloat16* out, const float* lse,
                            int B, int T, int C, int NH, cudaStream_t s = nullptr);

}  // namespace eco::cuda
