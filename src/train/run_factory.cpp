// The run's parts (see run_factory.h).
#include "train/run_factory.h"

#include "model/expert_parallel.h"

namespace eco {

RunParts build_run(const Config& cfg, Backend& be, RunShare share, const RunComms& comms) {
  const ParallelConfig& par = cfg.parallel;
  ExpertParallel ep = expert_placement(par.dp, par.ep, share.rank, par.ep_row_factor,
                                       cfg.train.grad_accum);
  ep.ep_comm = comms.ep;
  ep.edp_comm = comms.edp;
  RunParts run;
  run.model = std::make_unique<Transformer>(cfg.model, be, cfg.train.batch_size,
                                            cfg.precision.treatment, cfg.precision.quantize, ep);
  const int zero_world = par.zero == 1 ? par.world() : 1;
  run.zero_rank = share.planned ? Optimizer::largest_rank(*run.model, zero_world)
                  : par.zero == 1 ? share.rank
                                  : 0;
  run.opt = std::make_unique<Optimizer>(cfg.optim, *run.model, cfg.train.seed, zero_world,
                                        run.zero_rank, comms.world);
  // A plan of device cuda counts the buffer the run allocates when its ranks use NCCL (expert
  // parallelism at dp > 1: Transformer::set_expert_device_communicators).
  if (share.planned && cfg.device == Device::Cuda) run.model->reserve_expert_receive_buffer();
  if (cfg.train.grad_accum > 1)
    run.grad_acc = be.alloc("gradient accumulator", run.model->grads().shape,
                            run.model->grads().dtype, MemCategory::Grads);
  return run;
}

PlannedRun plan_run(const Config& cfg) {
  PlannedRun plan;
  plan.backend = make_planning_backend(cfg.device);
  plan.parts = build_run(cfg, *plan.backend, RunShare::plan());
  return plan;
}

}  // namespace eco
