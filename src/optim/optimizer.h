// The optimizer: AdamW or SGD with momentum (EMA form) over the model's parameters, with the
// treatment's update policy for quantized block linears (master weights, naive requantization,
// or ECO's error injection into the momentum). Global-norm clipping is fused into the update.
// Under ZeRO-1 (parallel.zero: 1; optim/zero_shards.h) each rank keeps the moments of its own
// rows only, updates those rows, and all-gathers the stored weights (codes, scales, values).
// With expert parallelism ZeRO-1 shards in two groups: the dense parameters (replicated on every
// rank) over the whole world, the routed experts over the expert-data-parallel group (the dp
// ranks that hold the same experts).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"
#include "dist/parallel_plan.h"
#include "model/transformer.h"
#include "optim/zero_shards.h"

namespace eco {

class Optimizer {
 public:
  // Allocates the moments (m, and v for AdamW): backend dtype for plain parameters, and
  // cfg.state_dtype (fp32 or bf16) for quantized ones, one arena per moment and dtype
  // (model/arena.h). `seed` keys the SR random streams.
  // zero_world > 1: ZeRO-1 over that many ranks (the world), this process being world rank
  // `rank`; `plan` carries the step's collectives (dist/parallel_plan.h; null for one process,
  // or a plan's optimizer, which takes no step). Under expert parallelism
  // (model.expert_parallel()) the experts' group is the dp ranks of rank / ep's column.
  Optimizer(const OptimConfig& cfg, Transformer& model, uint64_t seed = 0, int zero_world = 1,
            int rank = 0, ParallelPlan* plan = nullptr);

  // The world rank whose ZeRO-1 share of the moments is the largest (a plan's rank): the dense
  // share plus, under expert parallelism, its experts' share in their group.
  static int largest_rank(const Transformer& model, int zero_world);

  // The L2 norm of all gradients: one double partial per ZeRO piece, added in piece order, so the
  // bits do not depend on the sharding. Under ZeRO-1 the gradient must hold the reduced sum in
  // this rank's range (grad_bounds), and the ranks exchange their partials.
  double grad_norm();
  // One update with learning rate `lr`, clipping to cfg.grad_clip given the gradient norm; under
  // ZeRO-1 of this rank's rows, then every rank's rows of the stored weights all-gathered.
  void step(double lr, double grad_norm);
  bool sharded() const { return !groups_.empty(); }
  // ZeRO-1: the dense group's shards over the world (every parameter's without expert
  // parallelism); grad_bounds() of it cut the reduce-scatter of the dense gradient.
  const ZeroShards& shards() const { return groups_.front().shards; }
  // Elements whose moments this rank keeps, and the parameters divided between ranks by rows.
  int64_t elements_here() const;
  // (`experts`: of the experts' group only, under expert parallelism.)
  int split_params(bool experts = false) const;
  // ZeRO-1's all-gathers of the stored weights so far, and the bytes this rank sent in them by
  // the communicator's counter: of the quantized weights' codes and scales, and of the values
  // (plain parameters, masters).
  int64_t weight_gathers() const { return gathers_; }
  // Per group (dense, then experts): the bytes sent, and the group's world.
  struct GatherBytes {
    int world = 1;
    int64_t quantized = 0, values = 0;
  };
  std::vector<GatherBytes> gather_bytes() const;
  // Per group: the bytes of this rank's rows in the stored weights, which each all-gather sends
  // to the group's world - 1 others (a plan's figure).
  std::vector<GatherBytes> own_weight_bytes() const;
  int64_t steps_taken() const { return t_; }
  void set_steps_taken(int64_t t) { t_ = t; }  // resume
  // Every persistent tensor (moments), named, for checkpoints: under ZeRO-1 this rank's rows.
  std::vector<std::pair<std::string, Tensor>> state() const;
  // For each state() entry, the world + 1 byte offsets of the ranks' pieces of the whole tensor
  // (ZeroShards::tensor_bounds); empty when every rank holds it whole.
  std::vector<std::vector<int64_t>> state_bounds() const;
  // The moments' arenas ("m f32", "v f32", and "m bf16", "v bf16" under state_dtype bf16): each
  // one buffer with its table of tensors.
  const std::vector<Arena>& moment_arenas() const { return arenas_; }

 private:
  OptimConfig cfg_;
  Transformer& model_;
  uint64_t seed_;
  bool adamw_;
  std::vector<Arena> arenas_;
  std::vector<Tensor> m_, v_;  // per parameter: views into arenas_
  std::vector<PlainUpdate> plain_;  // this step's unquantized updates (kept: no per-step allocation)
  int64_t t_ = 0;
  // A ZeRO-1 sharding group: its shards, which group of the plan it is, this rank's place, and
  // per arena the segments of its members with the ranks' bounds cut to each (relative to the
  // segment's first byte), as its all-gathers take them.
  struct Group {
    ZeroShards shards;
    ZeroGroup which = ZeroGroup::World;
    int rank = 0;
    std::vector<GatherSegment> parts[3];  // by ParamArena
    GatherBytes sent;
  };
  ZeroShards pieces_;        // every present parameter, one rank: grad_norm's pieces
  std::vector<Group> groups_;  // ZeRO-1: dense (the world), then routed experts (edp)
  int rank_;
  ParallelPlan* plan_;
  std::vector<std::pair<int64_t, int64_t>> rows_;  // per parameter: this rank's rows
  std::vector<double> partials_;                   // grad_norm's, one per piece
  std::vector<char> mine_;                         // grad_norm: piece k's rows are this rank's
  std::vector<char> dense_piece_;                  // expert parallelism: piece k not an expert's
  std::vector<SumSegment> segments_;               // grad_norm's pieces on this rank
  std::vector<size_t> segment_piece_;              // and their piece indices
  std::vector<double> segment_sums_;
  int64_t gathers_ = 0;

  void all_gather_weights();
  void all_gather_group(Group& g);
};

// Learning rate at `step` (0-based): linear warmup to lr over `warmup` steps, then cosine or
// linear decay to final_lr_frac * lr at `total` steps (constant: no decay).
double lr_at(const OptimConfig& cfg, int64_t step, int64_t warmup, int64_t total);

}  // namespace eco
