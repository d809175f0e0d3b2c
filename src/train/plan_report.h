// `eco-train --plan`: the parameter table and memory ledger of a config, without allocating
// tensors or training.
#pragma once
#include <cstdint>
#include <string>

#include "core/config.h"
#include "base/memory_ledger.h"
#include "model/param_table.h"

namespace eco {

std::string plan_report(const Config& cfg);

// The static bytes of an MoE model's parameters by role: the experts (ParamRole::Expert), the
// routers (ParamRole::Router) and the rest (dense: embeddings, attention, norms, ...). weights
// counts weights + quant codes + scales + master copies; opt_state the optimizer moments. Ledger
// entries that name no parameter (and arena padding) are left out, so the three weights add up to
// the ledger's weights + codes + scales + master totals, and the three opt_state to its
// optimizer-state total.
struct RoleBytes {
  uint64_t weights = 0;
  uint64_t opt_state = 0;
  int64_t params = 0;  // elements
};
struct RoleMemorySplit {
  RoleBytes expert, router, dense;
};
RoleMemorySplit role_memory_split(const MemoryLedger& ledger, const ParamTable& table);

}  // namespace eco
