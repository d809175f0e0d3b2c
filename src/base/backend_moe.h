// The backend's mixture-of-experts family (one of the interfaces Backend joins,
// src/base/backend.h): the router, the dispatch of token slots to expert rows, and the combine of
// the experts' outputs. kernels/cpu/moe.h has the exact contracts and the layout.
#pragma once
#include <cstdint>
#include <vector>

#include "base/math/moe_router.h"
#include "base/math/moe_stats.h"
#include "base/tensor.h"

namespace eco {

// N tokens, E experts, k per token; a token's slots s = t * k + j; the dispatch sorts them by
// expert into R rows (row_of_slot (N * k), token_of_row (R), int32; -1: dropped slot).
struct BackendMoe {
  virtual ~BackendMoe() = default;
  // The router's logits (N, E) in the parameter dtype (fp32, not the activations' dtype) =
  // x (N, C) @ w (E, C)^T, and their backward: dx (N, C) += dlogits @ w, dw += dlogits^T @ x.
  // Backend's defaults are matmul_forward / matmul_backward (one dtype for both).
  virtual void router_matmul_forward(const Tensor& logits, const Tensor& x, const Tensor& w,
                                     int N, int C, int E) = 0;
  virtual void router_matmul_backward(const Tensor& dx, const Tensor& dw, const Tensor& dlogits,
                                      const Tensor& x, const Tensor& w, int N, int C, int E) = 0;
  // idx (N, k) i32, gates (N, k), probs (N, E) = softmax, lse (N) from logits (N, E);
  // select_bias (E) for MoeRouter::SigmoidBias, else empty.
  virtual void moe_route(const Tensor& idx, const Tensor& gates, const Tensor& probs,
                         const Tensor& lse, const Tensor& logits, const Tensor& select_bias,
                         int N, int E, int k, MoeRouter mode, bool norm_topk) = 0;
  // The router's sums over the N tokens, on the host (aux loss, z-loss, entropy).
  virtual MoeRouterSums moe_router_sums(const Tensor& probs, const Tensor& lse, int N,
                                        int E) = 0;
  // The row alignment of the dispatch's expert segments (MoeDispatch): 1 unless the backend's
  // expert GEMMs want whole tiles. Row buffers hold moe_max_rows(N k, E, moe_row_align()) rows.
  virtual int moe_row_align() const { return 1; }
  // The counting sort of the slots by expert, stable in slot order, each expert keeping at most
  // `capacity` slots (its highest gates), segments aligned to moe_row_align() rows (padding rows
  // get token -1); returns the histogram and offsets on the host (they size the expert GEMMs:
  // one copy to the host per layer and forward).
  virtual MoeDispatch moe_dispatch(const Tensor& row_of_slot, const Tensor& token_of_row,
                                   const Tensor& idx, const Tensor& gates, int N, int E, int k,
                                   int64_t capacity) = 0;
  // rows (R, C) = x[token_of_row], zero rows where it is -1 (padding).
  virtual void moe_gather(const Tensor& rows, const Tensor& x, const Tensor& token_of_row,
                          int64_t R, int C) = 0;
  // out (N, C) (= or +=) the gate-weighted sum of each token's k rows of y, in fixed k order.
  virtual void moe_combine(const Tensor& out, const Tensor& y, const Tensor& gates,
                           const Tensor& row_of_slot, int N, int C, int k, bool accumulate) = 0;
  // dy (R, C) and dgates (N, k) from dout (N, C) (both written; dy's padding rows are not
  // touched).
  virtual void moe_combine_backward(const Tensor& dy, const Tensor& dgates, const Tensor& dout,
                                    const Tensor& y, const Tensor& gates,
                                    const Tensor& row_of_slot, int N, int C, int k) = 0;
  // dx (N, C) += the sum of each token's k rows of drows (R, C), in fixed k order.
  virtual void moe_scatter_add(const Tensor& dx, const Tensor& drows, const Tensor& row_of_slot,
                               int N, int C, int k) = 0;
  // dlogits (N, E) += the router backward from dgates (N, k), the aux loss's per-expert
  // weights aux_w (E; empty: no aux loss) and the z-loss coefficient (src/base/math/
  // moe_router.h, moe_router_backward_token).
  virtual void moe_router_backward(const Tensor& dlogits, const Tensor& dgates,
                                   const Tensor& idx, const Tensor& gates, const Tensor& probs,
                                   const Tensor& logits, const Tensor& lse,
                                   const std::vector<double>& aux_w, double z_coef, int N, int E,
                                   int k, MoeRouter mode, bool norm_topk) = 0;
};

}  // namespace eco
