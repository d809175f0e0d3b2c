// The run's parts (see run_factory.h).
#include "train/run_factory.h"

#include "model/expert_parallel.h"
#include "optim/zero_shards.h"

namespace eco {

RunParts build_run(const Config& cfg, Backend& be, RunShare share, ParallelPlan* plan) {
  const ParallelConfig& par = cfg.parallel;
  const ExpertParallel ep = plan ? plan->experts()
                                 : expert_placement(par.dp, par.ep, share.rank, par.ep_row_factor,
                                                    cfg.train.grad_accum);
  RunParts run;
  ExpertExchange* exchange = plan ? plan->expert_exchange() : nullptr;
  if (share.planned && ep.enabled()) {
    run.planned_exchange = std::make_unique<ExpertCollectives>(be, ep, nullptr, nullptr);
    exchange = run.planned_exchange.get();
  }
  run.model = std::make_unique<Transformer>(cfg.model, be, cfg.train.batch_size,
                                            cfg.precision.treatment, cfg.precision.quantize, ep,
                                            exchange);
  const int zero_world = par.zero == 1 ? par.world() : 1;
  run.zero_rank = share.planned ? Optimizer::largest_rank(*run.model, zero_world)
                  : par.zero == 1 ? share.rank
                                  : 0;
  run.opt = std::make_unique<Optimizer>(cfg.optim, *run.model, cfg.train.seed, zero_world,
                                        run.zero_rank, plan);
  if (cfg.train.grad_accum > 1)
    run.grad_acc = be.alloc("gradient accumulator", run.model->grads().shape,
                            run.model->grads().dtype, MemCategory::Grads);
  if (plan) {
    // Under expert parallelism the world sums the dense parameters' ranges of the flat gradient
    // (ZeRO-1's dense group's segments); the routed experts fold over their own groups.
    std::vector<std::pair<int64_t, int64_t>> world_ranges;
    if (ep.enabled())
      world_ranges =
          ZeroShards(run.model->store(), 1, zero_members(run.model->store(), true).dense)
              .grad_segments();
    plan->set_gradients(run.model->grads().numel(), std::move(world_ranges),
                        run.opt->sharded() ? run.opt->shards().grad_bounds()
                                           : std::vector<int64_t>{});
  }
  return run;
}

PlannedRun plan_run(const Config& cfg) {
  PlannedRun plan;
  plan.backend = make_planning_backend(cfg.device);
  plan.parts = build_run(cfg, *plan.backend, RunShare::plan());
  return plan;
}

}  // namespace eco
