// Whether every rank of a run starts the same run: values each rank computes (a hash of its
// resolved config, of its binary's source revision) compared with rank 0's.
#pragma once
#include <cstdint>
#include <vector>

#include "dist/communicator.h"

namespace eco {

// For each of `mine` (the same count on every rank), the ranks whose value differs from rank
// 0's, in rank order; every rank calls it and gets the same lists (empty on one process).
std::vector<std::vector<int>> ranks_differing_from_lead(Communicator& comm,
                                                        const std::vector<uint64_t>& mine);

}  // namespace eco
