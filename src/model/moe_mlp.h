// The sparse Mixture-of-Experts MLP (model/mlp.h; ../shared/design/MOE.md): router logits from
// an fp32 router weight, top-k gates (MoeConfig::router), a counting-sort dispatch of the
// tokens into one contiguous row segment per expert, each expert's fc -> GELU | SwiGLU -> proj
// on its segment through the ordinary (plain or quantized) linear path, a gate-weighted combine
// in fixed k order, plus the shared experts (a dense MLP on every token). Forward and backward
// written out; the load-balance (aux) and z losses enter the backward with the loss scale.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "model/dense_mlp.h"
#include "model/linear.h"
#include "model/mlp.h"

namespace eco {

class MoeMlp : public Mlp {
 public:
  MoeMlp(const ModelContext& ctx, const std::string& prefix, int layer, int64_t N);
  void forward(const ModelContext& ctx, const Tensor& out, const Tensor& normed, int N) override;
  void backward(const ModelContext& ctx, const BlockScratch& s, const Tensor& d_normed,
                const Tensor& d_out, const Tensor& normed, int N) override;
  // sigmoid_bias: b_i += rate * sign(mean load - load_i) from the step's loads, then b centred
  // on zero (torchtitan); the other routers have nothing to do.
  void after_optimizer_step(const ModelContext& ctx) override;
  std::vector<int64_t>* step_loads() override { return &step_routed_; }
  const MoeStats* moe_stats() const override { return &stats_; }

 private:
  // The experts' forward on their row segments: rows_x_ -> rows_y_.
  void experts_forward(const ModelContext& ctx);
  // Their backward: from the output-row gradient s.moe_d_rows to the input-row gradient (in
  // the same buffer), the experts' parameter gradients accumulated.
  void experts_backward(const ModelContext& ctx, const BlockScratch& s);
  // fn(expert, first row, rows) for every expert with rows in the last dispatch, in expert
  // order: its contiguous segment of the permuted rows, padding rows included.
  template <class Fn>
  void for_each_segment(Fn fn) const;

  int router_ = -1, select_bias_ = -1;  // table indices
  std::vector<LinearRef> fc_, proj_;    // per routed expert
  std::unique_ptr<DenseMlp> shared_;    // the shared experts, or null
  // Saved by the forward for the backward (N tokens, E experts, k slots, R <= N k rows):
  Tensor logits_, probs_;               // (N, E)
  Tensor lse_;                          // (N)
  Tensor idx_, gates_;                  // (N, k) i32, (N, k)
  Tensor row_of_slot_, token_of_row_;   // (N k), (N k) i32
  Tensor rows_x_, rows_fc_, rows_act_, rows_y_;  // (R, C), (R, FC), (R, H), (R, C)
  MoeDispatch dispatch_;                // the last forward's histogram (host)
  MoeStats stats_;
  std::vector<int64_t> step_routed_;    // loads summed over the step's backward passes
};

}  // namespace eco
