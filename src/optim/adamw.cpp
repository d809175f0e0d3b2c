// AdamW: per-parameter dispatch to the backend's fused update, and the lr schedule.
#include "optim/adamw.h"

#include <cmath>

namespace eco {

AdamW::AdamW(const OptimConfig& cfg, Transformer& model) : cfg_(cfg), model_(model) {
  Backend& be = model.backend();
  const int64_t n = model.table().total;
  m_ = be.alloc("adamw.m", {n}, be.dtype(), MemCategory::OptState);
  v_ = be.alloc("adamw.v", {n}, be.dtype(), MemCategory::OptState);
}

double AdamW::grad_norm() {
  const Tensor& g = model_.grads();
  return std::sqrt(model_.backend().sum_squares(g, g.numel()));
}

void AdamW::step(double lr, double grad_norm) {
  ++t_;
  float grad_scale = 1.0f;
  if (cfg_.grad_clip > 0 && grad_norm > cfg_.grad_clip) grad_scale = float(cfg_.grad_clip / grad_norm);
  Backend& be = model_.backend();
  const auto& specs = model_.table().specs;
  for (size_t i = 0; i < specs.size(); ++i) {
    const auto& s = specs[i];
    const AdamWStep st{float(lr),
                       float(cfg_.beta1),
                       float(cfg_.beta2),
                       float(cfg_.eps),
                       s.weight_decay ? float(cfg_.weight_decay) : 0.0f,
                       grad_scale,
                       t_};
    be.adamw_update(model_.param(i), model_.grad(i), m_.slice(s.offset, s.shape),
                    v_.slice(s.offset, s.shape), s.numel(), st);
  }
}

double lr_at(const OptimConfig& cfg, int64_t step, int64_t warmup, int64_t total) {
  if (warmup > 0 && step < warmup) return cfg.lr * double(step + 1) / double(warmup);
  if (cfg.schedule == "constant" || total <= warmup) return cfg.lr;
  const double progress = std::min(1.0, double(step - warmup) / double(std::max<int64_t>(1, total - warmup - 1)));
  const double lo = cfg.final_lr_frac;
  const double shape = cfg.schedule == "cosine" ? 0.5 * (1.0 + std::cos(M_PI * progress))
                                                : 1.0 - progress;
  return cfg.lr * (lo + (1.0 - lo) * shape);
}

}  // namespace eco
