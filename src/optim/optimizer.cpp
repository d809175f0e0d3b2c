// The optimizer: per-parameter dispatch of plain and quantized updates, and the lr schedule.
#include "optim/optimizer.h"

#include <cmath>

#include "core/error.h"
#include "model/expert_parallel.h"
#include "quant/qtensor_rows.h"

namespace eco {

Optimizer::Optimizer(const OptimConfig& cfg, Transformer& model, uint64_t seed, int zero_world,
                     int rank, Communicator* comm)
    : cfg_(cfg), model_(model), seed_(seed), adamw_(cfg.name == OptimizerKind::AdamW),
      shards_(model.store(), zero_world), rank_(rank), comm_(comm) {
  Backend& be = model.backend();
  ParamStore& store = model.store();
  const auto& specs = model.table().specs;
  if (rank < 0 || rank >= zero_world)
    runtime_error("optimizer: rank {} of a ZeRO-1 world of {}", rank, zero_world);
  for (size_t i = 0; i < specs.size(); ++i) {
    rows_.push_back(sharded() ? shards_.rows(rank, i)
                              : std::pair<int64_t, int64_t>{0, param_rows_cols(specs[i]).first});
    // Expert parallelism: another rank's expert has no rows (no moments, no update) here.
    if (!store.present(i)) rows_.back() = {0, 0};
  }
  if (model.expert_parallel().enabled()) {
    if (sharded()) runtime_error("optimizer: ZeRO-1 with expert parallelism is not built yet");
    for (const ZeroPiece& p : shards_.pieces())
      dense_piece_.push_back(routed_expert_of(specs[p.param].name) < 0);
  }
  // One arena per moment and dtype; m_slot[i], v_slot[i]: parameter i's (arena, slot).
  std::vector<ArenaBuilder> builders;
  auto builder = [&](char moment, DType dt) -> size_t {
    const std::string name = fmt::format("{} {}", moment, dtype_name(dt));
    for (size_t b = 0; b < builders.size(); ++b)
      if (builders[b].name() == name) return b;
    builders.emplace_back(name, dt);
    return builders.size() - 1;
  };
  constexpr size_t kNone = size_t(-1);
  std::vector<std::pair<size_t, size_t>> m_slot(specs.size(), {kNone, kNone}), v_slot(m_slot);
  std::vector<DType> dts(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    const auto& s = specs[i];
    const bool q = store.quantized(i);
    const DType dt = q && cfg.state_dtype == StateDType::Bf16 ? DType::BF16 : (q ? DType::F32 : be.dtype());
    dts[i] = dt;
    const auto [r0, r1] = rows_[i];
    if (r0 == r1) continue;  // ZeRO-1: another rank's rows
    const int64_t cols = param_rows_cols(s).second;
    const std::vector<int64_t> shape =
        sharded() ? (s.shape.size() == 2 ? std::vector<int64_t>{r1 - r0, cols}
                                         : std::vector<int64_t>{(r1 - r0) * cols})
                  : s.shape;
    const size_t bm = builder('m', dt);
    m_slot[i] = {bm, builders[bm].add(s.name + ".m", shape, MemCategory::OptState,
                                             store.in_scope(i))};
    if (!adamw_) continue;
    const size_t bv = builder('v', dt);
    v_slot[i] = {bv, builders[bv].add(s.name + ".v", shape, MemCategory::OptState,
                                             store.in_scope(i))};
  }
  for (const auto& b : builders) arenas_.push_back(b.allocate(be));
  // A parameter without rows here has zero-size moments (a checkpoint section of 0 bytes).
  const auto view = [&](std::pair<size_t, size_t> slot, DType dt) {
    if (slot.first == kNone) return Tensor{nullptr, {0}, dt};
    return arenas_[slot.first].view(slot.second);
  };
  for (size_t i = 0; i < specs.size(); ++i) {
    m_.push_back(view(m_slot[i], dts[i]));
    v_.push_back(adamw_ ? view(v_slot[i], dts[i]) : Tensor{});
  }
  if (sharded())
    for (ParamArena kind : {ParamArena::Values, ParamArena::Codes, ParamArena::Scales})
      arena_bounds_[size_t(kind)] = shards_.arena_bounds(kind);
}

double Optimizer::grad_norm() {
  const Tensor& g = model_.grads();
  const auto& pieces = shards_.pieces();
  partials_.assign(pieces.size(), 0.0);
  const size_t k0 = sharded() ? shards_.first_piece(rank_) : 0;
  const size_t k1 = sharded() ? shards_.first_piece(rank_ + 1) : pieces.size();
  segments_.clear();
  for (size_t k = k0; k < k1; ++k) segments_.push_back({pieces[k].offset, pieces[k].length});
  model_.backend().sum_squares_segments(g, segments_, partials_.data() + k0);
  // The other ranks' partials: each element is one rank's value plus zeros (exact).
  if (sharded()) comm_->all_reduce_sum(partials_.data(), int64_t(partials_.size()));
  // Expert parallelism: an expert's piece is its owner's (the others' are zeros); a dense
  // piece, the same on every rank, is rank 0's of the group.
  if (const ExpertParallel& P = model_.expert_parallel(); P.enabled()) {
    if (P.rank != 0)
      for (size_t k = 0; k < pieces.size(); ++k)
        if (dense_piece_[k]) partials_[k] = 0;
    P.ep_comm->all_reduce_sum(partials_.data(), int64_t(partials_.size()));
  }
  double sum = 0;
  for (const double p : partials_) sum += p;
  return std::sqrt(sum);
}

void Optimizer::step(double lr, double grad_norm) {
  ECO_ASSERT(!sharded() || comm_, "a ZeRO-1 optimizer step without a communicator");
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
    const auto [r0, r1] = rows_[i];
    if (r0 == r1) continue;  // another rank's rows (ZeRO-1)
    const int64_t cols = param_rows_cols(s).second, n = (r1 - r0) * cols;
    const float wd = s.weight_decay ? float(cfg_.weight_decay) : 0.0f;
    // This rank's rows of a tensor of the parameter's shape (all of it unsharded).
    const auto rows_of = [&](const Tensor& t) {
      return !sharded() || t.empty() ? t : t.slice(r0 * cols, {n});
    };
    if (!store.quantized(i)) {
      plain_.push_back({rows_of(store.value(i)), rows_of(model_.grad(i)), m_[i], v_[i], n, wd});
      continue;
    }
    const QuantizedStep qs{tr.policy, tr.rounding, seed_, uint64_t(t_), uint32_t(i)};
    QTensor& whole = store.qtensor(i);
    // ZeRO-1: the rows as a tensor of their own, its SR draws keyed from element r0 * cols.
    QTensor part = sharded() ? qtensor_rows(whole, r0, r1) : whole;
    QTensor& q = sharded() ? part : whole;
    const RowRange rows = sharded() ? RowRange{0, -1, r0 * cols} : RowRange{};
    const Tensor master = rows_of(store.value(i)), grad = rows_of(model_.grad(i));
    if (adamw_)
      be.quantized_adamw_update(q, master, grad, m_[i], v_[i], with_weight_decay(adamw, wd), qs,
                                rows);
    else
      be.quantized_sgdm_update(q, master, grad, m_[i], with_weight_decay(sgdm, wd), qs, rows);
  }
  if (!plain_.empty()) {
    if (adamw_)
      be.adamw_update_many(plain_, adamw);
    else
      be.sgdm_update_many(plain_, sgdm);
  }
  if (sharded()) all_gather_weights();
}

void Optimizer::all_gather_weights() {
  Backend& be = model_.backend();
  const ScopedRange range(be, "ZeRO-1 all-gather");
  ++gathers_;
  for (ParamArena kind : {ParamArena::Codes, ParamArena::Scales, ParamArena::Values}) {
    const Tensor& buf = model_.store().arena(kind).buffer;
    if (buf.empty()) continue;
    const std::vector<int64_t>& bounds = arena_bounds_[size_t(kind)];
    // The bytes this rank sends, by the communicator's own counter.
    const auto counted = [&] {
      return (device_comm_ ? device_comm_->bytes_sent() : comm_->bytes_sent()).all_gather;
    };
    const int64_t before = counted();
    if (be.host_memory()) {
      comm_->all_gather(buf.data, bounds);
    } else if (device_comm_) {  // GPU to GPU, waited for under the run's collective timeout
      device_comm_->all_gather(buf.data, bounds);
      const Communicator::WaitGuard guard(*comm_, "the NCCL all-gather of the weights");
      be.synchronize();
    } else {  // device memory through the host
      staging_.resize(buf.bytes());
      be.copy_to_host(staging_.data(), buf);
      comm_->all_gather(staging_.data(), bounds);
      be.copy_from_host(buf, staging_.data());
    }
    (kind == ParamArena::Values ? sent_values_ : sent_quantized_) += counted() - before;
  }
}

std::vector<std::pair<std::string, Tensor>> Optimizer::state() const {
  std::vector<std::pair<std::string, Tensor>> out;
  const auto& specs = model_.table().specs;
  for (size_t i = 0; i < specs.size(); ++i) {
    out.emplace_back(specs[i].name + ".m", m_[i]);
    if (adamw_) out.emplace_back(specs[i].name + ".v", v_[i]);
  }
  return out;
}

std::vector<std::vector<int64_t>> Optimizer::state_bounds() const {
  std::vector<std::vector<int64_t>> out;
  const auto& specs = model_.table().specs;
  for (size_t i = 0; i < specs.size(); ++i)
    for (int k = 0; k < (adamw_ ? 2 : 1); ++k)
      out.push_back(sharded() ? shards_.tensor_bounds(i, m_[i].dtype) : std::vector<int64_t>{});
  return out;
}

double lr_at(const OptimConfig& cfg, int64_t step, int64_t warmup, int64_t total) {
  if (warmup > 0 && step < warmup)  // from warmup_start_lr (0: the plain lr * (step + 1) / warmup)
    return cfg.warmup_start_lr + (cfg.lr - cfg.warmup_start_lr) * double(step + 1) / double(warmup);
  if (cfg.schedule == LrSchedule::Constant || total <= warmup) return cfg.lr;
  const double progress =
      std::min(1.0, double(step - warmup) / double(std::max<int64_t>(1, total - warmup - 1)));
  const double lo = cfg.final_lr_frac;
  const double shape = cfg.schedule == LrSchedule::Cosine ? 0.5 * (1.0 + std::cos(M_PI * progress))
                                                : 1.0 - progress;
  return cfg.lr * (lo + (1.0 - lo) * shape);
}

}  // namespace eco
