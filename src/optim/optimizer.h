// The optimizer: AdamW or SGD with momentum (EMA form) over the model's parameters, with the
// treatment's update policy for quantized block linears (master weights, naive requantization,
// or ECO's error injection into the momentum). Global-norm clipping is fused into the update.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"
#include "model/transformer.h"

namespace eco {

class Optimizer {
 public:
  // Allocates the moments (m, and v for AdamW): backend dtype for plain parameters, and
  // cfg.state_dtype (fp32 or bf16) for quantized ones, one arena per moment and dtype
  // (model/arena.h). `seed` keys the SR random streams.
  Optimizer(const OptimConfig& cfg, Transformer& model, uint64_t seed = 0);

  // The L2 norm of all gradients (computed in double).
  double grad_norm();
  // One update with learning rate `lr`, clipping to cfg.grad_clip given the gradient norm.
  void step(double lr, double grad_norm);
  int64_t steps_taken() const { return t_; }
  void set_steps_taken(int64_t t) { t_ = t; }  // resume
  // Every persistent tensor (moments), named, for checkpoints.
  std::vector<std::pair<std::string, Tensor>> state() const;
  // The moments' arenas ("m f32", "v f32", and "m bf16", "v bf16" under state_dtype bf16): each
  // one buffer with its table of tensors.
  const std::vector<Arena>& moment_arenas() const { return arenas_; }

 private:
  OptimConfig cfg_;
  Transformer& model_;
  uint64_t seed_;
  bool adamw_;
  std::vector<Arena> arenas_;
  std::vector<Tensor> m_, v_;  // per parameter: views into arenas_
  std::vector<PlainUpdate> plain_;  // this step's unquantized updates (kept: no per-step allocation)
  int64_t t_ = 0;
};

// Learning rate at `step` (0-based): linear warmup to lr over `warmup` steps, then cosine or
// linear decay to final_lr_frac * lr at `total` steps (constant: no decay).
double lr_at(const OptimConfig& cfg, int64_t step, int64_t warmup, int64_t total);

}  // namespace eco
