// The memory check of a run (see memory_check.h).
#include "train/memory_check.h"

#include <fmt/format.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "base/error.h"
#include "base/backend.h"
#include "model/transformer.h"
#include "optim/optimizer.h"

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

int local_ranks() {
  // OpenMPI's mpirun, MPICH / Intel MPI, Slurm's srun.
  for (const char* v : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"})
    if (const char* s = std::getenv(v)) {
      const int n = std::atoi(s);
      if (n > 0) return n;
    }
  return 1;
}

Tensor alloc_trainer_buffers(Backend& be, const Config& cfg, const Transformer& model) {
  if (cfg.train.grad_accum == 1) return Tensor{};
  return be.alloc("gradient accumulator", model.grads().shape, model.grads().dtype,
                  MemCategory::Grads);
}

MemoryFit memory_fit(const Config& cfg) {
  // The planning backend records every allocation without making it.
  auto be = make_planning_backend(cfg.device);
  {
    // Expert parallelism: rank 0's experts (every rank holds as many).
    Transformer model(cfg.model, *be, cfg.train.batch_size, cfg.precision.treatment,
                      cfg.precision.quantize, expert_placement(cfg.parallel.dp, cfg.parallel.ep, 0,
                                                       cfg.parallel.ep_row_factor,
                                                       cfg.train.grad_accum));
    const int zero_world = cfg.parallel.zero == 1 ? cfg.parallel.world() : 1;
    Optimizer opt(cfg.optim, model, 0, zero_world, Optimizer::largest_rank(model, zero_world));
    // device: cuda with expert parallelism at dp > 1: the NCCL expert-gradient receive buffer.
    if (cfg.device == Device::Cuda) model.reserve_expert_receive_buffer();
    alloc_trainer_buffers(*be, cfg, model);
  }
  MemoryFit fit;
  fit.needed = be->ledger().total();
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
