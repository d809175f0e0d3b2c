// model.init_from: a Hugging Face checkpoint directory loaded into a run's parameters. config.json
// must describe the run's model, and the tensors must be exactly the model's (hf_layout.h), each
// of the right shape and a float dtype (F32, BF16, F16), or, for an export made with --codes,
// codes + scales (hf_codes.h). The values are then stored as a fresh initialisation would store
// them: ParamStore::set (RTN quantization under a quantized treatment), or, for codes in the
// run's own format and granularity, the codes themselves (ParamStore::set_codes).
#pragma once
#include <string>

#include "core/config.h"
#include "model/param_store.h"

namespace eco {

// Loads every parameter `store` holds (present(i): under expert parallelism a rank reads only
// its own experts). Every disagreement is a usage error naming the directory (or file), the
// tensor or key, what it holds and what the run expects; a malformed file is a data error.
void import_hf(const std::string& dir, const ModelConfig& m, ParamStore& store);

}  // namespace eco
