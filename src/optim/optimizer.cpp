// The optimizer: per-parameter dispatch of plain and quantized updates, and the lr schedule.
#include "optim/optimizer.h"

#include <cmath>

namespace eco {

Optimizer::Optimizer(const OptimConfig& cfg, Transformer& model, uint64_t seed)
    : cfg_(cfg), model_(model), seed_(seed), adamw_(cfg.name == OptimizerKind::AdamW) {
  Backend& be = model.backend();
  ParamStore& store = model.store();
  const auto& specs = model.table().specs;
  // One arena per moment and dtype; m_slot[i], v_slot[i]: parameter i's (arena, slot).
  std::vector<ArenaBuilder> builders;
  auto builder = [&](char moment, DType dt) -> size_t {
    const std::string name = fmt::format("{} {}", moment, dtype_name(dt));
    for (size_t b = 0; b < builders.size(); ++b)
      if (builders[b].name() == name) return b;
    builders.emplace_back(name, dt);
    return builders.size() - 1;
  };
  std::vector<std::pair<size_t, size_t>> m_slot(specs.size()), v_slot(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    const auto& s = specs[i];
    const bool q = store.quantized(i);
    const DType dt = q && cfg.state_dtype == StateDType::Bf16 ? DType::BF16 : (q ? DType::F32 : be.dtype());
    const size_t bm = builder('m', dt);
    m_slot[i] = {bm, builders[bm].add(s.name + ".m", s.shape, MemCategory::OptState,
                                             store.in_scope(i))};
    if (!adamw_) continue;
    const size_t bv = builder('v', dt);
    v_slot[i] = {bv, builders[bv].add(s.name + ".v", s.shape, MemCategory::OptState,
                                             store.in_scope(i))};
  }
  for (const auto& b : builders) arenas_.push_back(b.allocate(be));
  for (size_t i = 0; i < specs.size(); ++i) {
    m_.push_back(arenas_[m_slot[i].first].view(m_slot[i].second));
    v_.push_back(adamw_ ? arenas_[v_slot[i].first].view(v_slot[i].second) : Tensor{});
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
