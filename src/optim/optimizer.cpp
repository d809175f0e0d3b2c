// The optimizer: per-parameter dispatch of plain and quantized updates, and the lr schedule.
#include "optim/optimizer.h"

#include <cmath>

#include "base/error.h"
#include "model/expert_parallel.h"
#include "quant/qtensor_rows.h"

namespace eco {

Optimizer::Optimizer(const OptimConfig& cfg, Transformer& model, uint64_t seed, int zero_world,
                     int rank, ParallelPlan* plan)
    : cfg_(cfg), model_(model), seed_(seed), adamw_(cfg.name == OptimizerKind::AdamW),
      pieces_(model.store(), 1, std::vector<char>(model.table().specs.size(), 1)), rank_(rank),
      plan_(plan) {
  Backend& be = model.backend();
  ParamStore& store = model.store();
  const auto& specs = model.table().specs;
  if (rank < 0 || rank >= zero_world)
    runtime_error("optimizer: rank {} of a ZeRO-1 world of {}", rank, zero_world);
  const ExpertParallel& P = model.expert_parallel();
  if (zero_world > 1) {
    // The groups: without expert parallelism one over every parameter; with it, the dense
    // parameters over the world and this rank's routed experts over the dp ranks holding them.
    ZeroMembers m = zero_members(store, P.enabled());
    groups_.push_back(
        Group{ZeroShards(store, zero_world, std::move(m.dense)), ZeroGroup::World, rank, {}, {}});
    if (P.enabled()) {
      if (zero_world % P.ep != 0)
        runtime_error("optimizer: a ZeRO-1 world of {} is not dp x ep {}", zero_world, P.ep);
      groups_.push_back(Group{ZeroShards(store, zero_world / P.ep, std::move(m.experts)),
                              ZeroGroup::Experts, rank / P.ep, {}, {}});
    }
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    std::pair<int64_t, int64_t> rows{0, param_rows_cols(specs[i]).first};
    for (const Group& g : groups_)
      if (g.shards.member(i)) rows = g.shards.rows(g.rank, i);
    // Expert parallelism: another rank's expert has no rows (no moments, no update) here.
    if (!store.present(i)) rows = {0, 0};
    rows_.push_back(rows);
  }
  for (const ZeroPiece& p : pieces_.pieces()) {
    mine_.push_back(rows_[p.param].first <= p.row_begin && p.row_end <= rows_[p.param].second &&
                    p.row_begin < p.row_end);
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
  // Each group's collectives: per arena, each segment of its members with the ranks' bounds
  // cut to it, once.
  for (Group& g : groups_)
    for (ParamArena kind : {ParamArena::Values, ParamArena::Codes, ParamArena::Scales}) {
      const std::vector<int64_t> bounds = g.shards.arena_bounds(kind);
      for (const auto& [begin, end] : g.shards.arena_segments(kind))
        g.parts[size_t(kind)].push_back({begin, clamp_bounds(bounds, begin, end)});
    }
}

int Optimizer::largest_rank(const Transformer& model, int zero_world) {
  if (zero_world <= 1) return 0;
  const ParamStore& store = model.store();
  const ExpertParallel& P = model.expert_parallel();
  if (!P.enabled()) return ZeroShards(store, zero_world).largest_rank();
  ZeroMembers m = zero_members(store, true);
  const ZeroShards d(store, zero_world, std::move(m.dense)),
      e(store, zero_world / P.ep, std::move(m.experts));
  int best = 0;
  int64_t most = -1;
  for (int r = 0; r < zero_world; ++r)
    if (const int64_t n = d.elements(r) + e.elements(r / P.ep); n > most) most = n, best = r;
  return best;
}

double Optimizer::grad_norm() {
  const Tensor& g = model_.grads();
  const auto& pieces = pieces_.pieces();
  partials_.assign(pieces.size(), 0.0);
  segments_.clear();
  segment_piece_.clear();
  for (size_t k = 0; k < pieces.size(); ++k)
    if (mine_[k]) {
      segments_.push_back({pieces[k].offset, pieces[k].length});
      segment_piece_.push_back(k);
    }
  segment_sums_.assign(segments_.size(), 0.0);
  model_.backend().sum_squares_segments(g, segments_, segment_sums_.data());
  for (size_t j = 0; j < segments_.size(); ++j) partials_[segment_piece_[j]] = segment_sums_[j];
  // Over the ranks, each piece counted once (ZeRO-1, expert parallelism); one process: as is.
  if (plan_) plan_->sum_norm_partials(partials_, dense_piece_, sharded());
  double sum = 0;
  for (const double p : partials_) sum += p;
  return std::sqrt(sum);
}

void Optimizer::step(double lr, double grad_norm) {
  ECO_ASSERT(!sharded() || plan_, "a ZeRO-1 optimizer step without a parallel plan");
  ++t_;
  float grad_scale = 1.0f;
  if (cfg_.grad_clip > 0 && grad_norm > cfg_.grad_clip) grad_scale = float(cfg_.grad_clip / grad_norm);
  Backend& be = model_.backend();
  ParamStore& store = model_.store();
  const Treatment& tr = store.treatment();
  const auto& specs = model_.table().specs;
  // The step's rule and coefficients, once (AdamW: the bias corrections in double, rounded once
  // to float); each parameter gets them with its own weight decay.
  const RuleStep rule = adamw_ ? adamw_step(float(lr), float(cfg_.beta1), float(cfg_.beta2),
                                            float(cfg_.eps), 0.0f, grad_scale, t_)
                               : sgdm_step(float(lr), float(cfg_.beta1), 0.0f, grad_scale);
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
      plain_.push_back(
          {rows_of(store.value(i)), rows_of(model_.grad(i)), m_[i], v_[i], n, wd, cols});
      continue;
    }
    const QuantizedStep qs{tr.policy, tr.rounding, seed_, uint64_t(t_), uint32_t(i)};
    QTensor& whole = store.qtensor(i);
    // ZeRO-1: the rows as a tensor of their own, its SR draws keyed from element r0 * cols.
    QTensor part = sharded() ? qtensor_rows(whole, r0, r1) : whole;
    QTensor& q = sharded() ? part : whole;
    const RowRange rows = sharded() ? RowRange{0, -1, r0 * cols} : RowRange{};
    const Tensor master = rows_of(store.value(i)), grad = rows_of(model_.grad(i));
    be.quantized_update(q, master, grad, m_[i], v_[i], with_weight_decay(rule, wd), qs, rows);
  }
  if (!plain_.empty()) be.plain_update(plain_, rule);
  if (sharded()) all_gather_weights();
}

void Optimizer::all_gather_weights() {
  Backend& be = model_.backend();
  const ScopedRange range(be, "ZeRO-1 all-gather");
  ++gathers_;
  for (Group& g : groups_)
    if (g.shards.world() > 1) all_gather_group(g);
}

void Optimizer::all_gather_group(Group& g) {
  for (ParamArena kind : {ParamArena::Codes, ParamArena::Scales, ParamArena::Values}) {
    const Tensor& buf = model_.store().arena(kind).buffer;
    const auto& parts = g.parts[size_t(kind)];
    if (buf.empty() || parts.empty()) continue;
    (kind == ParamArena::Values ? g.sent.values : g.sent.quantized) +=
        plan_->all_gather_segments(g.which, buf, parts);
  }
}

std::vector<Optimizer::GatherBytes> Optimizer::gather_bytes() const {
  std::vector<GatherBytes> out;
  for (const Group& g : groups_) {
    out.push_back(g.sent);
    out.back().world = g.shards.world();
  }
  return out;
}

std::vector<Optimizer::GatherBytes> Optimizer::own_weight_bytes() const {
  std::vector<GatherBytes> out;
  for (const Group& g : groups_) {
    GatherBytes b;
    b.world = g.shards.world();
    for (ParamArena kind : {ParamArena::Codes, ParamArena::Scales, ParamArena::Values})
      for (const GatherSegment& p : g.parts[size_t(kind)])
        (kind == ParamArena::Values ? b.values : b.quantized) +=
            p.bounds[size_t(g.rank) + 1] - p.bounds[size_t(g.rank)];
    out.push_back(b);
  }
  return out;
}

int64_t Optimizer::elements_here() const {
  int64_t n = 0;
  const auto& specs = model_.table().specs;
  for (size_t i = 0; i < specs.size(); ++i)
    n += (rows_[i].second - rows_[i].first) * param_rows_cols(specs[i]).second;
  return n;
}

int Optimizer::split_params(bool experts) const {
  int n = 0;
  for (size_t k = experts ? 1 : 0; k < groups_.size(); ++k) n += groups_[k].shards.split_params();
  return n;
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
  const ExpertParallel& P = model_.expert_parallel();
  for (size_t i = 0; i < specs.size(); ++i) {
    std::vector<int64_t> b;
    if (sharded() && groups_.front().shards.member(i)) {
      b = groups_.front().shards.tensor_bounds(i, m_[i].dtype);
    } else if (sharded() && P.enabled()) {
      // A routed expert: rows of it on the dp ranks of its owner's column (world ranks
      // d ep + o), in d order; every other rank's range empty.
      const int x = routed_expert_of(specs[i].name);
      const int o = P.owner(x, model_.config().moe.n_experts);
      // The owners' group bounds, the same on every rank of that column: this rank's group
      // cuts its own experts alike (every rank holds as many of the same shapes).
      std::vector<int64_t> tb(size_t(P.dp) + 1);
      const Group& eg = groups_.back();
      const int64_t cols = param_rows_cols(specs[i]).second;
      const int64_t es = int64_t(dtype_size(m_[i].dtype));
      // The same expert slot on this rank: this column's expert x' = x - o L + e L.
      const int L = model_.config().moe.n_experts / P.ep;
      const std::string mine = with_routed_expert(specs[i].name, x - o * L + P.rank * L);
      const int j = model_.table().index_of(mine);
      ECO_ASSERT(j >= 0 && eg.shards.member(size_t(j)), "ZeRO-1: no expert '{}' here", mine);
      for (int d = 0; d <= P.dp; ++d)
        tb[size_t(d)] = d == P.dp ? specs[i].numel() * es
                                  : eg.shards.rows(d, size_t(j)).first * cols * es;
      b.assign(size_t(P.dp * P.ep) + 1, 0);
      for (int r = 0; r <= P.dp * P.ep; ++r) {
        const int d = r / P.ep, e = r % P.ep;
        b[size_t(r)] = r == P.dp * P.ep ? tb.back() : tb[size_t(e <= o ? d : d + 1)];
      }
    }
    for (int k = 0; k < (adamw_ ? 2 : 1); ++k) out.push_back(b);
  }
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
