// summary.json: a finished run's outcome (final losses, steps, tokens, throughput, divergence)
// and its memory ledger; the trainer adds the entropy floor and the profile where it has them.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

#include "base/memory_ledger.h"
#include "model/param_table.h"
#include "model/transformer.h"

namespace eco {

struct RunOutcome {
  double final_train_loss = 0;
  double final_val_loss = 0;  // NaN when there was no validation: null in the file
  int64_t steps = 0;          // optimizer steps completed, counting those before a resume
  int64_t steps_run = 0;      // of which this process ran
  int64_t tokens_per_step = 0;
  double wall_s = 0;          // this process's training time
  bool diverged = false;
  std::string treatment;      // precision.treatment's name
};

// quantized_params: the parameters the treatment reaches (ParamStore::count_in_scope).
nlohmann::json summary_json(const RunOutcome& outcome, const ParamTable& table,
                            const MemoryLedger& ledger, int64_t quantized_params);

// The MoE router figures of the model's last forward (Transformer::moe_summary): per-expert
// load (slots) min / mean / max over experts and MoE layers, aux and z loss values, mean router
// entropy, dropped slots, and the per-expert loads of every MoE layer. Null for a dense model.
nlohmann::json moe_json(const Transformer& model);

// Bytes per memory category, and static bytes per parameter and per quantized parameter.
nlohmann::json memory_json(const MemoryLedger& ledger, int64_t params, int64_t quantizable);

}  // namespace eco
