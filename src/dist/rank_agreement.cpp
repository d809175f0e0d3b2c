// Whether every rank starts the same run (see rank_agreement.h).
#include "dist/rank_agreement.h"

namespace eco {

std::vector<std::vector<int>> ranks_differing_from_lead(Communicator& comm,
                                                        const std::vector<uint64_t>& mine) {
  const size_t n = mine.size();
  std::vector<std::vector<int>> differ(n);
  if (comm.world() == 1) return differ;
  std::vector<uint64_t> all(n * size_t(comm.world()));
  comm.all_gather(all.data(), mine.data(), int64_t(n * sizeof(uint64_t)));
  for (int r = 1; r < comm.world(); ++r)
    for (size_t k = 0; k < n; ++k)
      if (all[n * size_t(r) + k] != all[k]) differ[k].push_back(r);
  return differ;
}

}  // namespace eco
