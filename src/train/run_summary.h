// summary.json: a finished run's outcome (final losses, steps, tokens, throughput, divergence)
// and its memory ledger; the trainer adds the entropy floor and the profile where it has them.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

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
  std::string divergence;     // when diverged: what diverged (the error line's words)
  std::string treatment;      // precision.treatment's name
};

// quantized_params: the parameters the treatment reaches (ParamStore::count_in_scope).
nlohmann::json summary_json(const RunOutcome& outcome, const ParamTable& table,
                            const MemoryLedger& ledger, int64_t quantized_params);

// The MoE router figures of one optimizer step: every forward of the step (each micro-batch on
// each rank), the counts summed and the losses and entropy summed to be averaged.
struct MoeStepFigures {
  int64_t forwards = 0;                     // forwards added
  int64_t tokens = 0;                       // tokens each MoE layer routed
  int64_t dropped = 0;                      // slots over capacity, every MoE layer
  double aux = 0, z = 0, entropy = 0;       // sums over the forwards (Transformer::MoeSummary)
  std::vector<std::vector<int64_t>> loads;  // (MoE layers, E) slots routed to each expert
  // One forward's figures (Transformer::moe_summary); a dense model's add nothing.
  void add(const Transformer::MoeSummary& m);
};

// A step's MoE figures as metrics.jsonl and summary.json report them: the per-expert load (slots)
// min / mean / max over experts and MoE layers, the dropped slots and every layer's per-expert
// loads, all over the step's tokens; the aux and z loss values and the router entropy (mean over
// the MoE layers), each the mean over the step's forwards. Null for a dense model.
nlohmann::json moe_json(const MoeStepFigures& step, const MoeConfig& moe);

// Bytes per memory category, and static bytes per parameter and per quantized parameter.
nlohmann::json memory_json(const MemoryLedger& ledger, int64_t params, int64_t quantizable);

}  // namespace eco
