// A run's parts assembled from its config, once for every caller: the model (this rank's routed
// experts), the optimizer (this rank's ZeRO-1 rows) and the trainer's gradient accumulator, on a
// backend. The trainer builds its run here, and eco-train --plan and the memory check build the
// plan's on a planning backend, so a plan counts exactly what a run allocates.
#pragma once
#include <memory>

#include "core/config.h"
#include "dist/expert_collectives.h"
#include "dist/parallel_plan.h"
#include "base/backend.h"
#include "model/transformer.h"
#include "optim/optimizer.h"

namespace eco {

// Which rank's share of the run to build: world rank `rank`'s (its experts under expert
// parallelism, its rows under ZeRO-1), or the plan's (planned: rank 0's experts, as every rank
// holds as many, and the ZeRO-1 rows of the rank with the largest share).
struct RunShare {
  int rank = 0;
  bool planned = false;
  static RunShare plan() { return {0, true}; }
};

struct RunParts {
  // A plan's model under expert parallelism: what its MoE layers register for the fold (and the
  // receive buffer NCCL's fold would allocate); it runs nothing. Null for a run with a plan.
  std::unique_ptr<ExpertCollectives> planned_exchange;
  std::unique_ptr<Transformer> model;
  std::unique_ptr<Optimizer> opt;
  // The micro-batches' gradient sum (grad_accum > 1: grads()' shape and dtype), else empty.
  Tensor grad_acc;
  int zero_rank = 0;  // the ZeRO-1 rank whose rows opt keeps (0 without ZeRO-1)
};

// The parts of `share` on `be`, allocated in the run's order: the model, the optimizer, then (a
// plan of device cuda) the expert-gradient receive buffer NCCL would need, the accumulator.
// `plan`: the run's parallelism (dist/parallel_plan.h), whose collectives the parts take and
// which learns the gradient's layout here (ParallelPlan::set_gradients); null for a plan or a
// part that takes no step.
RunParts build_run(const Config& cfg, Backend& be, RunShare share, ParallelPlan* plan = nullptr);

// A plan (eco-train --plan, the memory check): the plan's parts on a planning backend of
// cfg.device, whose ledger holds every allocation the run would make, by name and category.
struct PlannedRun {
  std::unique_ptr<Backend> backend;
  RunParts parts;  // (destroyed before the backend)
};
PlannedRun plan_run(const Config& cfg);

}  // namespace eco
