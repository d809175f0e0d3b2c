// The sparse Mixture-of-Experts MLP (model/mlp.h; docs/moe.md): router logits from
// an fp32 router weight, top-k gates (MoeConfig::router), a counting-sort dispatch of the
// tokens into one contiguous row segment per expert, each expert's fc -> GELU | SwiGLU -> proj
// on its segment through the ordinary (plain or quantized) linear path, a gate-weighted combine
// in fixed k order, plus the shared experts (a dense MLP on every token). Forward and backward
// written out; the load-balance (aux) and z losses enter the backward with the loss scale.
// Under expert parallelism (model/expert_parallel.h) each expert's rows go to the rank that owns
// it and come back, through ModelContext::exchange (model/expert_exchange.h); see moe_mlp.cpp.
#pragma once
#include <memory>
#include <string>
#include <utility>
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
  std::string take_note() override { return std::exchange(note_, {}); }

 private:
  // One expert GEMM pair: `n` rows of ex_x_ from `r0` through expert `expert`, rows that rank
  // `source` of the expert-parallel group dispatched (0 without expert parallelism). A segment
  // runs to the next one's start: its padding rows (zero inputs) go through the GEMMs too.
  struct Segment {
    int expert;
    int64_t r0;
    int n;
    int source;
  };
  // segments_ and ex_rows_ from the last dispatch; under expert parallelism also the row counts
  // to and from each rank of the group (every rank's segment sizes: ExpertExchange::gather_counts).
  void plan_segments(const ModelContext& ctx);
  // Expert parallelism: the rows of this rank's experts outgrew their buffers (sized for
  // parallel.ep_row_factor x a source's rows): new ones of at least `rows` (a quarter more than
  // before, at most ep x a source's rows, which always fits), and the backward's own; note_ says
  // so. The old buffers stay allocated (the backend frees nothing before it ends).
  void grow_expert_rows(const ModelContext& ctx, int64_t rows);
  // The experts' forward on their row segments: ex_x_ -> ex_y_.
  void experts_forward(const ModelContext& ctx);
  // Their backward: from the output-row gradient d_rows to the input-row gradient (in the same
  // buffer), the experts' parameter gradients accumulated (under expert parallelism into the
  // source's slot of source_grads_).
  void experts_backward(const ModelContext& ctx, const Tensor& d_rows, const Tensor& d_act,
                        const Tensor& d_fc);
  // Parameter l's gradient of one segment (run(): its linear_backward): straight into the
  // gradient, or under expert parallelism into the zeroed gradient slot, then added to the
  // segment's source accumulator.
  template <class Run>
  void segment_grads(const ModelContext& ctx, LinearRef l, const Segment& g, Run run);

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
  std::vector<Segment> segments_;       // the last forward's expert GEMMs, in order
  int64_t ex_rows_ = 0;                 // rows the local experts ran on
  // The rows the experts run on: rows_x_.. without expert parallelism; with it, every source
  // rank's rows of this rank's experts (ep R rows at most), packed by source then expert.
  Tensor ex_x_, ex_fc_, ex_act_, ex_y_;
  // After a growth (grow_expert_rows): the backward's buffers over ex rows, in place of the
  // shared ones in BlockScratch (sized for the configured factor); empty before.
  Tensor grown_d_fc_, grown_d_act_, grown_d_rows_;
  std::string note_;
  // Expert parallelism (ep_): the local experts [first_, first_ + local_); the row counts of the
  // exchange, to / from each rank of the group; every rank's segment sizes (ep, E).
  bool ep_ = false;
  int first_ = 0, local_ = 0;
  std::vector<int64_t> send_rows_, recv_rows_, seg_rows_;
  // source_grads_ (source_slots_, local_, expert_grad_elems_): each source rank's gradient of
  // each local expert, summed over the step's micro-batches (a rank of ep 1 would hold exactly
  // that), folded over the world after the backward by the exchange (ExpertGradients); one slot
  // (source_slots_ 1) without keep_sources: the running sum over the sources, in order. A local
  // expert's parameters are one span of the flat gradient, of expert_grad_elems_ elements from
  // offset expert_base_[k].
  Tensor source_grads_;
  int64_t source_slots_ = 1;  // ep, or 1 (ExpertParallel::keep_sources false)
  int64_t expert_grad_elems_ = 0;
  std::vector<int64_t> expert_base_;
  int layer_ = 0;
  MoeStats stats_;
  std::vector<int64_t> step_routed_;    // loads summed over the step's backward passes
};

}  // namespace eco
