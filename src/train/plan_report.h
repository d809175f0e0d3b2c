// `eco-train --plan`: the parameter table and memory ledger of a config, without allocating
// tensors or training.
#pragma once
#include <string>

#include "core/config.h"

namespace eco {

std::string plan_report(const Config& cfg);

}  // namespace eco
