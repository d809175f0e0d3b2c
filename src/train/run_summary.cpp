// The figures of summary.json.
#include "train/run_summary.h"

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

nlohmann::json moe_json(const Transformer& model) {
  const Transformer::MoeSummary m = model.moe_summary();
  if (m.layers == 0) return nullptr;
  return {{"aux_loss", m.aux},       {"z_loss", m.z},         {"load_min", m.load_min},
          {"load_mean", m.load_mean}, {"load_max", m.load_max}, {"router_entropy", m.entropy},
          {"dropped", m.dropped},     {"layer_loads", m.loads}};
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
  if (table.active != table.total) j["active_params"] = table.active;  // MoE: a token's share
  return j;
}

}  // namespace eco
