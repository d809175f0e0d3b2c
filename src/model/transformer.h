// The transformer language model (GPT-2, Llama and Gemma 3 block families), written once against the
// Backend interface: the embedding, the loop over blocks (model/block.h: attention + MLP), the
// final norm, the head and the loss. It owns its parameters, gradients and activations
// (allocated up front for the largest batch it will see), and exposes forward/backward as
// whole-batch calls.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/config.h"
#include "base/backend.h"
#include "model/block.h"
#include "model/model_context.h"
#include "model/param_store.h"
#include "model/param_table.h"

namespace eco {

class Transformer {
 public:
  // Allocates everything for batches of up to max_batch sequences of up to cfg.seq_len tokens.
  // The treatment and its scope decide how parameters are stored (see ParamStore); fp32 by
  // default.
  // `ep`: expert parallelism (model/expert_parallel.h): this rank stores only its own routed
  // experts (the others are absent from the store) and exchanges tokens with its group through
  // `exchange` (model/expert_exchange.h; null only for a plan's model, which runs nothing).
  Transformer(const ModelConfig& cfg, Backend& backend, int max_batch,
              const Treatment& treatment = Treatment{},
              QuantizeScope scope = QuantizeScope::Blocks, const ExpertParallel& ep = {},
              ExpertExchange* exchange = nullptr);
  Transformer(const Transformer&) = delete;
  Transformer& operator=(const Transformer&) = delete;

  const ModelConfig& config() const { return cfg_; }
  const ParamTable& table() const { return table_; }
  Backend& backend() { return be_; }
  ParamStore& store() { return store_; }
  const ParamStore& store() const { return store_; }
  // All gradients as one flat tensor (backend dtype): the present parameters in table order, at
  // store().grad_offset(i) (spec.offset unless expert parallelism leaves experts out).
  const Tensor& grads() const { return grads_; }
  Tensor grad(size_t i) const;

  // GPT-2 initialisation: normal(0, spec.init_std), deterministic for a seed.
  void init_weights(uint64_t seed) { store_.init(seed); }
  void zero_grad();

  // Forward + backward on one micro-batch: returns the mean loss over B*T targets and
  // accumulates gradients of (loss * loss_scale) into grads(). Tokens are host arrays (B, T).
  double forward_backward(const int32_t* inputs, const int32_t* targets, int B, int T,
                          float loss_scale);
  // Called by backward() each time a contiguous range [begin, end) of grads() holds its final
  // value for the micro-batch: the final norm and head, then each block from the last, then the
  // embeddings (and the tied head), together the whole of grads() in that order. The data-
  // parallel gradient sum of a range overlaps the backward of the blocks below it
  // (train/trainer.cpp). Empty (the default): no calls.
  using GradReadyFn = std::function<void(int64_t begin, int64_t end)>;
  void set_grad_ready(GradReadyFn f) { grad_ready_ = std::move(f); }
  // The ranges' bounds in table order: 0, block 0's first offset, ..., block L-1's, the final
  // norm's, grads().numel().
  const std::vector<int64_t>& grad_ready_bounds() const { return grad_ready_bounds_; }
  // Forward only: the mean loss (evaluation).
  double forward_loss(const int32_t* inputs, const int32_t* targets, int B, int T);
  // Forward only: logits on the backend, valid until the next call. The buffer holds
  // (max_batch * seq_len, logits_stride()) rows; the first B*T rows are this batch, token n's
  // vocabulary at [n * logits_stride(), n * logits_stride() + V).
  const Tensor& forward_logits(const int32_t* inputs, int B, int T);
  // Row stride of the logits (Backend::logits_stride: V, or V padded for the CUDA GEMMs).
  int64_t logits_stride() const { return logits_ld_; }
  // After every optimizer step (the MoE sigmoid_bias router's selection-bias update).
  void after_optimizer_step();
  const ExpertParallel& expert_parallel() const { return ep_; }
  // What the layers have to say since the last call (Mlp::take_note), in layer order.
  std::vector<std::string> take_notes();
  // Every MoE layer's step loads (Mlp::step_loads), in layer order.
  std::vector<std::vector<int64_t>*> step_loads();
  // The MoE layers' router figures of the last forward, summed (aux, z, dropped) or averaged
  // (entropy) over the MoE layers; routed is every layer's per-expert load, layer by layer.
  // Empty (layers 0) for a dense model.
  struct MoeSummary {
    int layers = 0;
    int64_t load_min = 0, load_max = 0;  // slots of the least and most loaded expert
    double load_mean = 0;                // tokens * k / E
    int64_t tokens = 0;                  // tokens each MoE layer routed
    int64_t dropped = 0;
    double aux = 0, z = 0, entropy = 0;
    std::vector<std::vector<int64_t>> loads;  // (MoE layers, E) slots per expert
  };
  MoeSummary moe_summary() const;
  // The loss terms the MoE layers add to the objective in the last forward (aux + z, with their
  // coefficients; 0 for a dense model): forward_backward's gradient is that of its returned
  // cross-entropy plus this.
  double moe_loss() const;
  // The largest shapes the model runs, as given to Backend::reserve_workspaces.
  const WorkspaceShapes& workspace_shapes() const { return shapes_; }

 private:
  void upload_tokens(const Tensor& dst, const int32_t* src, int B, int T);
  void forward(int B, int T);   // from tokens_ to logits_
  double loss(int B, int T, float dloss_per_row, bool with_grad);
  void backward(int B, int T);  // from dlogits (in logits_) to grads_
  float embedding_scale() const;  // scale_embeddings: sqrt(d_model) as a float
  bool ones_filled_ = false;      // norm_unit_offset: ctx_.ones holds ones

  ModelConfig cfg_;
  Backend& be_;
  ExpertParallel ep_;
  ParamTable table_;
  ParamStore store_;
  int max_batch_;
  Tensor grads_;
  GradReadyFn grad_ready_;
  std::vector<int64_t> grad_ready_bounds_;
  ModelContext ctx_;  // cfg_, be_, store_, grads_ for the blocks
  int wte_, wpe_, head_;
  NormRef norm_f_;
  Tensor tokens_, targets_, losses_;
  Tensor encoded_;             // (N, C) embedding output
  std::vector<std::unique_ptr<Block>> blocks_;
  // Names of the per-layer profiler / NVTX ranges, built once.
  std::vector<std::string> forward_range_, backward_range_;
  NormActs norm_f_acts_;
  Tensor logits_;              // (N, logits_ld_); holds dlogits after the loss with gradient
  WorkspaceShapes shapes_;
  int logits_ld_ = 0;          // row stride of logits_: V, or V padded (Backend::logits_stride)
  BlockScratch scratch_;       // shared by all layers
};

}  // namespace eco
