// Causal multi-head self-attention on tensor cores: every product of attention as a cuBLASLt
// strided-batched GEMM (GemmEngine), heads batched, one sequence at a time; the softmax and its
// gradient in small row kernels. Same contract as attention.cuh (the flash kernel on CUDA cores).
//
// Layout (as kernels/cpu/kernels.h): qkv (B, T, 3C), q / k / v at column offsets 0 / C / 2C, head
// h at [h*hs, (h+1)*hs) of each; out, dout (B, T, C); lse and D (B, NH, T) fp32.
// Scratch (per sequence, reused for every b): S (NH, T, ldT) fp32 and P (NH, T, ldT) bf16 with
// ldT = T rounded up to a multiple of 8 (16-byte aligned rows for both types):
// attention_gemm_scratch_bytes(T, NH) ~ 6 * NH * T * ldT bytes (72 MiB at T 1024, NH 12).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>

namespace eco::cuda {

class GemmEngine;

// ---- the GEMM path (attention_gemm.cpp) ---------------------------------------------------------
// Whether the GEMM path takes this call: B, T, NH >= 1, C % NH == 0, hs = C / NH a multiple of
// 8 (then every operand's leading dimension, head offset and batch stride is a multiple of 16
// bytes, as cuBLASLt's tensor-core kernels want), the bf16 matrices (qkv, out; backward also
// dout, dqkv) non-null and 16-byte aligned, T <= 2^20 and B*T*NH < 2^31 (row counts in int,
// scratch sizes far inside int64). Otherwise use the flash kernel (attention.cuh).
bool attention_gemm_supported(int B, int T, int C, int NH,
                              std::initializer_list<const void*> matrices);

// Row stride of the (T, T) score / probability matrices in the scratch: T rounded up to 8.
int64_t attention_gemm_ld(int T);
// Bytes of scratch both entry points need (one sequence's S fp32, then P bf16, 256-aligned).
size_t attention_gemm_scratch_bytes(int T, int NH);

// out (B, T, C), lse (B, NH, T) from qkv (B, T, 3C): as eco::cuda::attention_forward.
// scratch: at least attention_gemm_scratch_bytes(T, NH) bytes, 256-byte aligned.
// Throws eco::Error naming the shapes when attention_gemm_supported does not hold or the scratch
// is too small; cuBLASLt and launch errors as the GemmEngine raises them.
void attention_gemm_forward(GemmEngine& gemm, __nv_bfloat16* out, float* lse,
                            const __nv_bfloat16* qkv, void* scratch, size_t scratch_bytes, int B,
                            int T, int C, int NH, cudaStream_t s = nullptr);

// dqkv (B, T, 3C) += the gradient of attention_gemm_forward's out given dout (B, T, C), from
// qkv, that call's out and lse (either path's: both save the same lse). D: B*NH*T floats
// (rowsum(dout * out) per query, the interface's attention scratch). scratch as for forward.
void attention_gemm_backward(GemmEngine& gemm, __nv_bfloat16* dqkv, float* D, void* scratch,
                             size_t scratch_bytes, const __nv_bfloat16* dout,
                             const __nv_bfloat16* qkv, const __nv_bfloat16* out, const float* lse,
                             int B, int T, int C, int NH, cudaStream_t s = nullptr);

// ---- the row kernels (attention_gemm.cu); usable directly ---------------------------------------
// Each works on the NH * T rows (h, t) of (NH, T, ld) matrices of one sequence: row r = h*T + t
// starts at r * ld, column j is key j, and causality keeps j <= t. ld % 8 == 0 and ld >= T;
// matrix pointers 16-byte aligned (cudaErrorInvalidValue otherwise). lse and D: (NH, T).

// P = softmax of each causal row of S: lse[r] = log sum_{j<=t} exp(S[r, j]) (fp32),
// P[r, j] = exp(S[r, j] - lse[r]) for j <= t, 0 for t < j < T.
cudaError_t attention_causal_softmax(__nv_bfloat16* P, float* lse, const float* S, int NH, int T,
                                     int64_t ld, cudaStream_t s = nullptr);
// The same P from a saved lse (backward's recompute): bit-identical to the forward's for the
// same S bits.
cudaError_t attention_causal_probs(__nv_bfloat16* P, const float* S, const float* lse, int NH,
                                   int T, int64_t ld, cudaStream_t s = nullptr);
// dS[r, j] = P[r, j] * (dP[r, j] - D[r]) for j <= t, in place over P (bf16). Entries j > t stay
// zero: the 4-column groups that straddle t write zeros past it (where P already holds zeros,
// which are dS's zeros too), and the columns from the next group on are not touched.
cudaError_t attention_softmax_backward(__nv_bfloat16* P_to_dS, const float* dP, const float* D,
                                       int NH, int T, int64_t ld, cudaStream_t s = nullptr);
// D (B, NH, T) = per head, the dot product of dout and out rows: D[b, h, t] =
// sum_{d < hs} dout[b, t, h*hs + d] * out[b, t, h*hs + d] in fp32. Any alignment.
cudaError_t attention_rowdot(float* D, const __nv_bfloat16* dout, const __nv_bfloat16* out, int B,
                             int T, int C, int NH, cudaStream_t s = nullptr);

}  // namespace eco::cuda
