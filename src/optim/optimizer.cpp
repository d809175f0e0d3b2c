// The optimizer: per-parameter dispatch of plain and quantized updates, and the lr schedule.
#include "optim/optimizer.h"

#include <cmath>

namespace eco {

Optimizer::Optimizer(const OptimConfig& cfg, Transformer& model, uint64_t seed)
    : cfg_(cfg), model_(model), seed_(seed), adamw_(cfg.name == OptimizerKind::AdamW) {
  Backend& be = model.backend();
  ParamStore& store = model.store();
  const auto& specs = model.table().specs;
  for (size_t i = 0; i < specs.size(); ++i) {
    const auto& s = specs[i];
    const bool q = store.quantized(i);
    const DType dt = q && cfg.state_dtype == StateDType::Bf16 ? DType::BF16 : (q ? DType::F32 : be.dtype());
    m_.push_back(be.alloc(s.name + ".m", s.shape, dt, MemCategory::OptState, s.quantizable));
    v_.push_back(adamw_ ? be.alloc(s.name + ".v", s.shape, dt, MemCategory::OptState,
                                   s.quantizable)
                        : Tensor{});
  }
}

double Optimizer::grad_norm() {
  const Tensor& g = model_.grads();
  return std::sqrt(model_.backend().sum_squares(g, g.numel()));
}

void Optimizer::step(double lr, double grad_norm) {
  ++t_;
  float grad_scale = 1.0f;
  if (cfg_.grad_clip > 0 && grad_norm > cfg_.grad_clip) grad_scale = float(cfg_.grad_clip / grad_norm);
  Backend& be = model_.backend();
  ParamStore& store = model_.store();
  const Treatment& tr = store.treatment();
  const auto& specs = model_.table().specs;
  // The step's coefficients, once (AdamW: the bias corrections in double, rounded once to
  // float); each parameter gets them with its own weight decay.
  const AdamWCoeffs adamw = adamw_coeffs(float(lr), float(cfg_.beta1), float(cfg_.beta2),
                                         float(cfg_.eps), 0.0f, grad_scale, t_);
  const SgdmCoeffs sgdm{float(lr), float(cfg_.beta1), 0.0f, grad_scale};
  // Unquantized parameters are updated together after the loop (one launch on CUDA).
  plain_.clear();
  for (size_t i = 0; i < specs.size(); ++i) {
    const auto& s = specs[i];
    const float wd = s.weight_decay ? float(cfg_.weight_decay) : 0.0f;
    if (!store.quantized(i)) {
      plain_.push_back({store.value(i), model_.grad(i), m_[i], v_[i], s.numel(), wd});
      continue;
    }
    const QuantizedStep qs{tr.policy, tr.rounding, seed_, uint64_t(t_), uint32_t(i)};
    if (adamw_)
      be.quantized_adamw_update(store.qtensor(i), store.value(i), model_.grad(i), m_[i], v_[i],
                                with_weight_decay(adamw, wd), qs);
    else
      be.quantized_sgdm_update(store.qtensor(i), store.value(i), model_.grad(i), m_[i],
                               with_weight_decay(sgdm, wd), qs);
  }
  if (plain_.empty()) return;
  if (adamw_)
    be.adamw_update_many(plain_, adamw);
  else
    be.sgdm_update_many(plain_, sgdm);
}

std::vector<std::pair<std::string, Tensor>> Optimizer::state() const {
  std::vector<std::pair<std::string, Tensor>> out;
  const auto& specs = model_.table().specs;
  for (size_t i = 0; i < specs.size(); ++i) {
    out.emplace_back(specs[i].name + ".m", m_[i]);
    if (!v_[i].empty()) out.emplace_back(specs[i].name + ".v", v_[i]);
  }
  return out;
}

double lr_at(const OptimConfig& cfg, int64_t step, int64_t warmup, int64_t total) {
  if (warmup > 0 && step < warmup) return cfg.lr * double(step + 1) / double(warmup);
  if (cfg.schedule == LrSchedule::Constant || total <= warmup) return cfg.lr;
  const double progress =
      std::min(1.0, double(step - warmup) / double(std::max<int64_t>(1, total - warmup - 1)));
  const double lo = cfg.final_lr_frac;
  const double shape = cfg.schedule == LrSchedule::Cosine ? 0.5 * (1.0 + std::cos(M_PI * progress))
                                                : 1.0 - progress;
  return cfg.lr * (lo + (1.0 - lo) * shape);
}

}  // namespace eco
