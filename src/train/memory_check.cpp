// The memory check of a run (see memory_check.h).
#include "train/memory_check.h"

#include <fmt/format.h>

#include <fstream>
#include <sstream>

#include "base/error.h"
#include "dist/communicator.h"
#include "base/backend.h"
#include "train/run_factory.h"

namespace eco {
namespace {

// A field of /proc/meminfo in bytes ("MemAvailable:  23442436 kB"); 0 when absent.
uint64_t meminfo_bytes(const std::string& field) {
  std::ifstream in("/proc/meminfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(field + ":", 0) != 0) continue;
    std::istringstream ss(line.substr(field.size() + 1));
    uint64_t kib = 0;
    ss >> kib;
    return kib * 1024;
  }
  return 0;
}

std::string gib(uint64_t bytes) { return fmt::format("{:.2f} GiB", double(bytes) / (1 << 30)); }

}  // namespace

std::string MemoryFit::describe() const {
  if (available == 0) return fmt::format("the plan needs {}; {}", gib(needed), source);
  return fmt::format("the plan needs {}; {} available ({})", gib(needed), gib(available), source);
}

MemoryFit memory_fit(const Config& cfg) {
  MemoryFit fit;
  fit.needed = plan_run(cfg).backend->ledger().total();
  if (cfg.device == Device::Cuda) {
    fit.available = cuda_free_memory_bytes();
    fit.source = fit.available ? "free memory of the GPU"
                               : "the GPU's memory is unknown here (no GPU or no CUDA build)";
  } else {
    fit.available = meminfo_bytes("MemAvailable");
    fit.source = "host RAM, MemAvailable in /proc/meminfo";
    if (fit.available == 0) {
      fit.available = meminfo_bytes("MemTotal");
      fit.source = "host RAM, MemTotal in /proc/meminfo";
    }
    if (fit.available == 0) fit.source = "the host's RAM is unknown (no /proc/meminfo)";
    // The ranks an MPI launcher put on this host share its RAM: each needs the plan.
    if (const int local = local_ranks(); local > 1) {
      fit.needed *= uint64_t(local);
      fit.source += fmt::format("; {} ranks on this host, the plan counted {} times", local, local);
    }
  }
  return fit;
}

void require_memory_fits(const Config& cfg) {
  const MemoryFit fit = memory_fit(cfg);
  if (!fit.fits())
    usage_error("{}: the run does not fit: {} (see eco-train {} --plan)", cfg.source_path,
                fit.describe(), cfg.source_path);
}

}  // namespace eco
