// Whether a run fits its device, decided before anything is allocated: the --plan ledger's total
// (every tensor the run would allocate) against the host's available RAM (MemAvailable of
// /proc/meminfo) for device cpu, or the GPU's free memory for device cuda.
#pragma once
#include <cstdint>
#include <string>

#include "core/config.h"

namespace eco {

struct MemoryFit {
  uint64_t needed = 0;     // the plan's total bytes
  uint64_t available = 0;  // the device's; 0 when it cannot be known (then the run is not refused)
  std::string source;      // where `available` comes from, for messages
  bool fits() const { return available == 0 || needed <= available; }
  // "the plan needs 1.2 GiB; 22.3 GiB available (host RAM, MemAvailable in /proc/meminfo)".
  std::string describe() const;
};

// For device cpu the plan is counted once per rank that an MPI launcher put on this host.
MemoryFit memory_fit(const Config& cfg);
// A usage error naming the total and the limit when the run does not fit.
void require_memory_fits(const Config& cfg);

}  // namespace eco
