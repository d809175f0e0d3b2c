// The MoE kernels on the GPU (docs/moe.md): routing, the router's sums, the
// counting-sort dispatch, gather / combine and their backwards. Contracts and layout as
// eco::cpu::moe_* (kernels/cpu/moe.h), the CPU twins: router tensors fp32 (logits, probs, lse,
// gates, dlogits, dgates), slot maps int32, token rows bf16 (activations), sums in fp32 over bf16
// inputs, rounded to bf16 once. Every kernel is deterministic (fixed orders, no float atomics).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "base/math/moe_router.h"

namespace eco::cuda {

// idx (N, k), gates (N, k), probs (N, E), lse (N) from logits (N, E): moe_route_token per token
// (select_bias (E) for SigmoidBias, else may be null).
cudaError_t moe_route(int32_t* idx, float* gates, float* probs, float* lse, const float* logits,
                      const float* select_bias, int N, int E, int k, MoeRouter mode,
                      bool norm_topk, cudaStream_t s = nullptr);

// sums (E + 2) doubles: the sum over tokens of probs[:, e] (e < E), of lse^2 (E) and of each
// token's router entropy (E + 1); a fixed reduction tree (equal to the CPU twin's token-order
// sums to rounding). No tokens writes zeros.
cudaError_t moe_router_sums(double* sums, const float* probs, const float* lse, int N, int E,
                            cudaStream_t s = nullptr);

// The dropless counting sort of the N k slots by expert, stable in slot order, segments
// aligned to `align` rows (padding rows: token -1). Writes row_of_slot (N k), token_of_row
// (moe_max_rows(N k, E, align); -1 on the padding and on every row past the last segment) and
// counts (E) int32 (the histogram; the host derives the offsets from it). scratch:
// moe_dispatch_scratch_ints(N, E, k) int32. An expert id outside [0, E) is not routed (row -1,
// not counted). No tokens still writes the zero counts.
int64_t moe_dispatch_scratch_ints(int N, int E, int k);
cudaError_t moe_dispatch(int32_t* row_of_slot, int32_t* token_of_row, int32_t* counts,
                         int32_t* scratch, const int32_t* idx, int N, int E, int k, int align,
                         cudaStream_t s = nullptr);

// rows (R, C) = x[token_of_row[r]], zero rows where it is -1.
cudaError_t moe_gather(__nv_bfloat16* rows, const __nv_bfloat16* x, const int32_t* token_of_row,
                       int64_t R, int C, cudaStream_t s = nullptr);
// out (N, C) = (accumulate ? out : 0) + the sum over j in order of gates[t, j] * y[row_of_slot]
// (dropped slots skipped), summed in fp32 from 0 and added to out once, then rounded.
cudaError_t moe_combine(__nv_bfloat16* out, const __nv_bfloat16* y, const float* gates,
                        const int32_t* row_of_slot, int N, int C, int k, bool accumulate,
                        cudaStream_t s = nullptr);
// dy (rows of kept slots) = bf16(gates[t, j] * dout[t]); dgates (N, k) = <dout[t], y[row]> in
// fp32 (0 for a dropped slot). Padding rows of dy are not touched.
cudaError_t moe_combine_backward(__nv_bfloat16* dy, float* dgates, const __nv_bfloat16* dout,
                                 const __nv_bfloat16* y, const float* gates,
                                 const int32_t* row_of_slot, int N, int C, int k,
                                 cudaStream_t s = nullptr);
// dx (N, C) += the sum over j in order of drows[row_of_slot[t, j]] (fp32 from 0, added once).
cudaError_t moe_scatter_add(__nv_bfloat16* dx, const __nv_bfloat16* drows,
                            const int32_t* row_of_slot, int N, int C, int k,
                            cudaStream_t s = nullptr);
// dlogits (N, E) += moe_router_backward_token per token; aux_w (E) device fp32 or null.
cudaError_t moe_router_backward(float* dlogits, const float* dgates, const int32_t* idx,
                                const float* gates, const float* probs, const float* logits,
                                const float* lse, const float* aux_w, float z_coef, int N, int E,
                                int k, MoeRouter mode, bool norm_topk, cudaStream_t s = nullptr);

}  // namespace eco::cuda
