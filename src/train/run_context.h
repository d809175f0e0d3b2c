// Which process of a run this is: rank `rank` of `world` (rank 0 of 1 for one process; eco-train
// fills it from the run's communicator). Rank 0 owns the run directory and the console's
// progress lines; the others write nothing and print only warnings and errors.
#pragma once
#include <fmt/format.h>

#include <string>

namespace eco {

struct RunContext {
  int rank = 0;
  int world = 1;

  // The rank that writes files (metrics.jsonl, checkpoints, samples, summary, resolved config)
  // and prints progress.
  bool is_lead() const { return rank == 0; }
  // "[rank 1/4] " when there are several processes; "" for one, so single-process output is
  // unchanged.
  std::string log_prefix() const {
    return world > 1 ? fmt::format("[rank {}/{}] ", rank, world) : std::string();
  }
};

}  // namespace eco
