// AdamW over the model's parameter table: decoupled weight decay on the parameters the table
// marks for decay, global-norm gradient clipping fused into the update.
#pragma once
#include <cstdint>

#include "core/config.h"
#include "model/transformer.h"

namespace eco {

class AdamW {
 public:
  // Allocates the moments m and v in the backend dtype, zero-initialised (ledger: optimizer state).
  AdamW(const OptimConfig& cfg, Transformer& model);

  // The L2 norm of all gradients (computed in double).
  double grad_norm();
  // One update with learning rate `lr`, clipping to cfg.grad_clip given the gradient norm.
  void step(double lr, double grad_norm);
  int64_t steps_taken() const { return t_; }
  void set_steps_taken(int64_t t) { t_ = t; }  // resume
  const Tensor& m() const { return m_; }
  const Tensor& v() const { return v_; }

 private:
  OptimConfig cfg_;
  Transformer& model_;
  Tensor m_, v_;
  int64_t t_ = 0;
};

// Learning rate at `step` (0-based): linear warmup to lr over `warmup` steps, then cosine or
// linear decay to final_lr_frac * lr at `total` steps (constant: no decay).
double lr_at(const OptimConfig& cfg, int64_t step, int64_t warmup, int64_t total);

}  // namespace eco
