// The figures of summary.json.
#include "train/run_summary.h"

#include <algorithm>
#include <cmath>

namespace eco {

nlohmann::json memory_json(const MemoryLedger& ledger, int64_t params, int64_t quantizable) {
  nlohmann::json mem;
  for (size_t i = 0; i < size_t(MemCategory::Count); ++i)
    mem[mem_category_name(MemCategory(i))] = ledger.total(MemCategory(i));
  mem["total"] = ledger.total();
  mem["static"] = ledger.static_bytes();
  mem["static_bytes_per_param"] = double(ledger.static_bytes()) / double(params);
  mem["quantizable_params"] = quantizable;
  mem["static_quantizable"] = ledger.static_bytes_quantizable();
  mem["static_bytes_per_quantized_param"] =
      quantizable ? double(ledger.static_bytes_quantizable()) / double(quantizable) : 0.0;
  return mem;
}

void MoeStepFigures::add(const Transformer::MoeSummary& m) {
  if (m.layers == 0) return;
  if (loads.empty()) loads.assign(m.loads.size(), std::vector<int64_t>(m.loads[0].size(), 0));
  for (size_t l = 0; l < loads.size(); ++l)
    for (size_t e = 0; e < loads[l].size(); ++e) loads[l][e] += m.loads[l][e];
  ++forwards;
  tokens += m.tokens;
  dropped += m.dropped;
  aux += m.aux;
  z += m.z;
  entropy += m.entropy;
}

nlohmann::json moe_json(const MoeStepFigures& step, const MoeConfig& moe) {
  if (step.forwards == 0) return nullptr;
  int64_t lo = step.loads[0][0], hi = lo;
  for (const std::vector<int64_t>& layer : step.loads) {
    const auto [l, h] = std::minmax_element(layer.begin(), layer.end());
    lo = std::min(lo, *l);
    hi = std::max(hi, *h);
  }
  const double n = double(step.forwards);
  return {{"aux_loss", step.aux / n},
          {"z_loss", step.z / n},
          {"load_min", lo},
          {"load_mean", double(step.tokens) * moe.top_k / moe.n_experts},
          {"load_max", hi},
          {"router_entropy", step.entropy / n},
          {"dropped", step.dropped},
          {"layer_loads", step.loads}};
}

nlohmann::json summary_json(const RunOutcome& o, const ParamTable& table,
                            const MemoryLedger& ledger, int64_t quantized_params) {
  const bool has_val = std::isfinite(o.final_val_loss);
  nlohmann::json j = {{"final_train_loss", o.final_train_loss},
          {"final_val_loss", has_val ? nlohmann::json(o.final_val_loss) : nlohmann::json()},
          {"steps", o.steps},
          {"tokens", o.steps * o.tokens_per_step},
          {"wall_s", o.wall_s},
          {"tokens_per_s",
           o.steps_run > 0 ? double(o.steps_run * o.tokens_per_step) / o.wall_s : 0.0},
          {"params", table.total},
          {"diverged", o.diverged},
          {"treatment", o.treatment},
          {"memory", memory_json(ledger, table.total, quantized_params)}};
  if (o.diverged && !o.divergence.empty()) j["divergence"] = o.divergence;
  if (table.active != table.total) j["active_params"] = table.active;  // MoE: a token's share
  return j;
}

}  // namespace eco
