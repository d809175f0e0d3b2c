// The --plan report: a planning backend records every allocation the run would make.
#include "train/plan_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <string_view>

#include "base/backend.h"
#include "train/run_factory.h"

namespace eco {

RoleMemorySplit role_memory_split(const MemoryLedger& ledger, const ParamTable& table) {
  RoleMemorySplit split;
  auto bucket = [&](ParamRole r) -> RoleBytes& {
    return r == ParamRole::Expert ? split.expert : r == ParamRole::Router ? split.router : split.dense;
  };
  for (const auto& s : table.specs) bucket(s.role).params += s.numel();
  // A parameter's entries are named after it: NAME (values), NAME.master, NAME.codes,
  // NAME.scales (ParamStore) and NAME.m, NAME.v (Optimizer).
  static const char* const kSuffixes[] = {".master", ".codes", ".scales", ".m", ".v"};
  for (const auto& e : ledger.entries()) {
    const bool weight = e.category == MemCategory::Weights ||
                        e.category == MemCategory::QuantCodes ||
                        e.category == MemCategory::Scales || e.category == MemCategory::Master;
    if (!weight && e.category != MemCategory::OptState) continue;
    int idx = table.index_of(e.name);
    for (const char* suf : kSuffixes) {
      if (idx >= 0) break;
      const std::string_view n(e.name), sv(suf);
      if (n.size() > sv.size() && n.substr(n.size() - sv.size()) == sv)
        idx = table.index_of(std::string(n.substr(0, n.size() - sv.size())));
    }
    if (idx < 0) continue;
    RoleBytes& b = bucket(table.specs[size_t(idx)].role);
    (weight ? b.weights : b.opt_state) += e.bytes;
  }
  return split;
}

std::string plan_report(const Config& cfg) {
  const PlannedRun plan = plan_run(cfg);
  const Backend* be = plan.backend.get();
  const Transformer& model = *plan.parts.model;
  const Optimizer& opt = *plan.parts.opt;
  const int plan_rank = plan.parts.zero_rank;  // under ZeRO-1: the rank with the most rows
  const auto& ledger = be->ledger();
  const int64_t q = model.store().count_in_scope();
  std::string s = model.table().describe() + "\n" + ledger.table();
  s += fmt::format("treatment {}, optimizer {} with {} state\n", cfg.precision.treatment.name,
                   cfg.optim.name, cfg.optim.state_dtype);
  s += fmt::format("quantize {} ({})\n", cfg.precision.quantize,
                   cfg.precision.quantize == QuantizeScope::Blocks
                       ? "the treatment applies to every block linear"
                       : "the treatment applies to the experts' weights only");
  {
    // The run's length: tokens per parameter, over every parameter and over those outside the
    // embeddings (the count papers name models by).
    int64_t embedding = 0;
    for (const ParamSpec& sp : model.table().specs)
      if (sp.role == ParamRole::Embedding || sp.role == ParamRole::Head ||
          sp.role == ParamRole::Position)
        embedding += sp.numel();
    const double tokens = double(cfg.total_steps()) * double(cfg.tokens_per_step());
    const int64_t body = model.table().total - embedding;
    s += fmt::format("training: {} steps x {} tokens = {:.4g} tokens ({:.1f} per parameter, {:.1f} "
                     "per parameter outside the embeddings: {})\n",
                     cfg.total_steps(), cfg.tokens_per_step(), tokens,
                     tokens / double(model.table().total), tokens / double(std::max<int64_t>(body, 1)),
                     body);
  }
  s += fmt::format("static bytes per parameter: {:.2f}\n",
                   double(ledger.static_bytes()) / double(model.table().total));
  if (q > 0)
    s += fmt::format("static bytes per quantized parameter: {:.3f}  ({} quantized parameters)\n",
                     double(ledger.static_bytes_quantizable()) / double(q), q);
  bool moe = false;
  for (const auto& sp : model.table().specs)
    moe = moe || sp.role == ParamRole::Expert || sp.role == ParamRole::Router;
  if (moe) {
    // Weights = values or master + quant codes + scales; arena padding is left out.
    const RoleMemorySplit split = role_memory_split(ledger, model.table());
    s += fmt::format("{:<18} {:>14} {:>10} {:>14} {:>10} {:>9}\n", "static by role", "weight bytes",
                     "B/param", "optim bytes", "B/param", "MiB");
    auto line = [&](const char* name, const RoleBytes& b) {
      const double n = double(std::max<int64_t>(b.params, 1));
      s += fmt::format("{:<18} {:>14} {:>10.3f} {:>14} {:>10.3f} {:>9.2f}\n", name, b.weights,
                       b.weights / n, b.opt_state, b.opt_state / n,
                       (b.weights + b.opt_state) / 1048576.0);
    };
    line("  expert", split.expert);
    line("  router", split.router);
    line("  dense", split.dense);
  }
  const ParallelConfig& par = cfg.parallel;
  if (par.world() > 1) {
    // Each rank holds everything above (zero 0); the gradient all-reduce (a reduce-scatter of
    // rank-ordered chunks, then an all-gather) sends 2 (w - 1) / w of the fp32 gradients.
    const double w = par.world();
    const double grad_bytes = double(model.table().total) * double(dtype_size(be->dtype()));
    if (par.ep > 1) {
      // Expert parallelism: the dense gradients' all-reduce over the world; the local experts'
      // gradient as a running sum broadcast by each rank of the expert-data-parallel group in
      // turn (dp > 1: a rank sends its experts' gradient to the dp - 1 others once); the
      // tokens' rows out to the experts' owners and back, forward and backward (4 exchanges
      // per MoE layer and micro-batch, (ep - 1) / ep of the N k rows leaving the rank under
      // balanced routing).
      const MoeConfig& moe = cfg.model.moe;
      int64_t expert = 0, layers = 0;
      for (const ParamSpec& sp : model.table().specs)
        if (routed_expert_of(sp.name) >= 0) expert += sp.numel();
      for (int l = 0; l < cfg.model.n_layer; ++l) layers += moe.is_moe_layer(l);
      const double dense_bytes = double(model.table().total - expert) * double(dtype_size(be->dtype()));
      const double local_bytes = double(expert) / par.ep * double(dtype_size(be->dtype()));
      const double rows = double(cfg.train.batch_size) * cfg.model.seq_len * moe.top_k;
      const double a2a = 4.0 * double(layers) * cfg.train.grad_accum * rows * cfg.model.d_model *
                         double(dtype_size(be->act_dtype())) * (par.ep - 1) / par.ep;
      s += fmt::format("parallel: dp {} x ep {} = {} ranks, zero {}; expert parallelism: each rank "
                       "holds {} of the {} routed experts of each MoE layer (weights, gradients, "
                       "moments), their rows sized for {} x a source's (parallel.ep_row_factor{}); "
                       "the table above is {}\n",
                       par.dp, par.ep, par.world(), par.zero, moe.n_experts / par.ep, moe.n_experts,
                       par.ep_row_factor > 0 ? par.ep_row_factor : double(par.ep),
                       par.ep_row_factor > 0 ? "" : " 0: ep, the worst case",
                       par.zero == 1 ? fmt::format("rank {}'s, the largest share", plan_rank)
                                     : std::string("per rank"));
      if (par.zero == 1)
        s += fmt::format("ZeRO-1: moments of {:.1f}% of the parameters here: the dense ones divided "
                         "over the {} ranks, this rank's experts over the {} ranks that hold them\n",
                         100.0 * double(opt.elements_here()) / double(model.table().total),
                         par.world(), par.dp);
      double gathered = 0;  // the weight all-gathers' bytes (ZeRO-1), both groups
      for (const Optimizer::GatherBytes& g : opt.own_weight_bytes())
        gathered += double(g.quantized + g.values) * double(g.world - 1);
      s += fmt::format("collectives per step and rank: dense gradient {} sends {:.1f} MiB; "
                       "expert gradient running sum (broadcasts in the expert-data-parallel group) "
                       "sends {:.1f} MiB; "
                       "token exchange (all_to_all_v) sends about {:.1f} MiB{}\n",
                       par.zero == 1 ? "reduce-scatter" : "all-reduce",
                       dense_bytes * (par.zero == 1 ? 1 : 2) * (w - 1) / w / 1048576.0,
                       par.dp > 1 ? local_bytes * (par.dp - 1) / 1048576.0 : 0.0, a2a / 1048576.0,
                       par.zero == 1 ? fmt::format("; weight all-gather sends {:.1f} MiB",
                                                   gathered / 1048576.0)
                                     : std::string());
    } else if (par.zero == 0) {
      s += fmt::format("parallel: dp {} x ep {} = {} ranks, zero 0; the table above is per rank\n",
                       par.dp, par.ep, par.world());
      s += fmt::format("collectives per step and rank: gradient all-reduce sends {:.1f} MiB "
                       "({:.2f} bytes per parameter)\n",
                       grad_bytes * 2 * (w - 1) / w / 1048576.0,
                       grad_bytes * 2 * (w - 1) / w / double(model.table().total));
    } else {
      // ZeRO-1: the gradients' reduce-scatter sends (w - 1) / w of them; the all-gather of the
      // stored weights sends this rank's rows to the w - 1 others (about (w - 1) / w of them).
      const double mine = double(opt.elements_here()) / double(model.table().total);
      const auto arena_bytes = [&](ParamArena k) {
        return double(model.store().arena(k).elements()) *
               double(k == ParamArena::Values ? dtype_size(be->dtype()) : k == ParamArena::Codes ? 1 : 4);
      };
      const double codes = arena_bytes(ParamArena::Codes) + arena_bytes(ParamArena::Scales);
      const double values = arena_bytes(ParamArena::Values);
      s += fmt::format("parallel: dp {} x ep {} = {} ranks, zero 1 (ZeRO-1: moments of {:.1f}% of "
                       "the rows here); the table above is rank {}'s, the largest share\n",
                       par.dp, par.ep, par.world(), 100 * mine, plan_rank);
      s += fmt::format("collectives per step and rank: gradient reduce-scatter sends {:.1f} MiB; "
                       "weight all-gather sends {:.1f} MiB (codes + scales {:.1f} MiB, values "
                       "{:.1f} MiB, of {:.1f} + {:.1f} MiB gathered)\n",
                       grad_bytes * (w - 1) / w / 1048576.0,
                       (codes + values) * mine * (w - 1) / 1048576.0,
                       codes * mine * (w - 1) / 1048576.0, values * mine * (w - 1) / 1048576.0,
                       codes / 1048576.0, values / 1048576.0);
    }
  }
  for (const std::string& note : be->plan_notes()) s += note + "\n";
  return s;
}

}  // namespace eco
