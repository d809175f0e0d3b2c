// The MoE reference kernels (docs/moe.md): routing, the counting-sort dispatch,
// gather / combine and their backwards. Plain functions over raw buffers, templated on the
// scalar like kernels.h; the per-token router math is src/base/math/moe_router.h's.
//
// Layout: N tokens, E experts, k experts per token. A token's k choices are its slots
// s = t * k + j (j = 0 the highest-scored). The dispatch sorts slots by expert, stable in slot
// order, into rows: expert e's tokens are the contiguous rows [offset_e, offset_e + count_e),
// R = sum of counts rows in all. row_of_slot (N * k) maps a slot to its row, -1 when the
// capacity dropped it; token_of_row (R) maps a row back to its token.
#pragma once
#include <cstdint>
#include <vector>

#include "base/math/moe_router.h"
#include "base/math/moe_stats.h"

namespace eco::cpu {

// idx (N, k), gates (N, k), probs (N, E) = softmax of each row, lse (N) from logits (N, E)
// (moe_route_token per row). select_bias (E): SigmoidBias only, else may be null.
template <class T>
void moe_route(int32_t* idx, T* gates, T* probs, T* lse, const T* logits, const T* select_bias,
               int N, int E, int k, MoeRouter mode, bool norm_topk);

// The router sums of a forward (src/base/math/moe_stats.h).
template <class T>
MoeRouterSums moe_router_sums(const T* probs, const T* lse, int N, int E);

// Counting sort of the slots by expert (histogram, exclusive scan, scatter), stable in slot
// order. With capacity < N an expert over it keeps its `capacity` slots of the highest gates
// (equal gates: the lower slot), still in slot order; the rest get row -1. Each expert's segment
// starts on a multiple of `align` rows (>= 1); token_of_row is -1 on the padding rows between
// segments. token_of_row holds moe_max_rows(N k, E, align) entries.
template <class T>
MoeDispatch moe_dispatch(int32_t* row_of_slot, int32_t* token_of_row, const int32_t* idx,
                         const T* gates, int N, int E, int k, int64_t capacity, int align = 1);

// rows (R, C) = x[token_of_row[r]], zero where token_of_row[r] is -1 (padding).
template <class T>
void moe_gather(T* rows, const T* x, const int32_t* token_of_row, int64_t R, int C);
// out (N, C) (= or +=) sum over j = 0..k-1 of gates[t, j] * y[row_of_slot[t, j]], in that fixed
// order, dropped slots skipped: deterministic, no atomics.
template <class T>
void moe_combine(T* out, const T* y, const T* gates, const int32_t* row_of_slot, int N, int C,
                 int k, bool accumulate);
// Its backward: dy (R, C) = gates[t, j] * dout[t] at row_of_slot[t, j] (written);
// dgates (N, k) = <dout[t], y[row]> (written; 0 for a dropped slot).
template <class T>
void moe_combine_backward(T* dy, T* dgates, const T* dout, const T* y, const T* gates,
                          const int32_t* row_of_slot, int N, int C, int k);
// The gather's backward: dx (N, C) += sum over j of drows[row_of_slot[t, j]], in j order.
template <class T>
void moe_scatter_add(T* dx, const T* drows, const int32_t* row_of_slot, int N, int C, int k);

// dlogits (N, E) += the router backward of every token (moe_router_backward_token): from
// dgates (N, k), the aux loss's per-expert weights aux_w (E; empty: none) and the z-loss's
// coefficient z_coef.
template <class T>
void moe_router_backward(T* dlogits, const T* dgates, const int32_t* idx, const T* gates,
                         const T* probs, const T* logits, const T* lse,
                         const std::vector<double>& aux_w, double z_coef, int N, int E, int k,
                         MoeRouter mode, bool norm_topk);

}  // namespace eco::cpu
