// The optimizer: AdamW or SGD with momentum (EMA form) over the model's parameters, with the
// treatment's update policy for quantized block linears (master weights, naive requantization,
// or ECO's error injection into the momentum). Global-norm clipping is fused into the update.
// Under ZeRO-1 (parallel.zero: 1; optim/zero_shards.h) each rank keeps the moments of its own
// rows only, updates those rows, and all-gathers the stored weights (codes, scales, values).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"
#include "dist/communicator.h"
#include "dist/device_communicator.h"
#include "model/transformer.h"
#include "optim/zero_shards.h"

namespace eco {

class Optimizer {
 public:
  // Allocates the moments (m, and v for AdamW): backend dtype for plain parameters, and
  // cfg.state_dtype (fp32 or bf16) for quantized ones, one arena per moment and dtype
  // (model/arena.h). `seed` keys the SR random streams.
  // zero_world > 1: ZeRO-1 over that many ranks, this process being `rank`; `comm` carries the
  // step's collectives (null only for a plan, which takes no step).
  Optimizer(const OptimConfig& cfg, Transformer& model, uint64_t seed = 0, int zero_world = 1,
            int rank = 0, Communicator* comm = nullptr);

  // The L2 norm of all gradients: one double partial per ZeRO piece, added in piece order, so the
  // bits do not depend on the sharding. Under ZeRO-1 the gradient must hold the reduced sum in
  // this rank's range (grad_bounds), and the ranks exchange their partials.
  double grad_norm();
  // One update with learning rate `lr`, clipping to cfg.grad_clip given the gradient norm; under
  // ZeRO-1 of this rank's rows, then every rank's rows of the stored weights all-gathered.
  void step(double lr, double grad_norm);
  bool sharded() const { return shards_.world() > 1; }
  // ZeRO-1 on device memory: the all-gather of the stored weights goes GPU to GPU through `dc`
  // (NCCL) instead of through host memory over the host communicator.
  void set_device_communicator(DeviceCommunicator* dc) { device_comm_ = dc; }
  const ZeroShards& shards() const { return shards_; }
  // ZeRO-1's all-gathers of the stored weights so far, and the bytes this rank sent in them by
  // the communicator's counter: of the quantized weights' codes and scales, and of the values
  // (plain parameters, masters).
  int64_t weight_gathers() const { return gathers_; }
  int64_t sent_quantized_bytes() const { return sent_quantized_; }
  int64_t sent_value_bytes() const { return sent_values_; }
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
  ZeroShards shards_;
  int rank_;
  Communicator* comm_;
  DeviceCommunicator* device_comm_ = nullptr;
  std::vector<std::pair<int64_t, int64_t>> rows_;  // per parameter: this rank's rows
  std::vector<double> partials_;                   // grad_norm's, one per piece
  std::vector<char> dense_piece_;                  // expert parallelism: piece k not an expert's
  std::vector<SumSegment> segments_;               // grad_norm's pieces on this rank
  std::vector<int64_t> arena_bounds_[3];           // by ParamArena (ZeRO-1)
  std::vector<char> staging_;                      // device arenas' way through host memory
  int64_t gathers_ = 0, sent_quantized_ = 0, sent_values_ = 0;

  void all_gather_weights();
};

// Learning rate at `step` (0-based): linear warmup to lr over `warmup` steps, then cosine or
// linear decay to final_lr_frac * lr at `total` steps (constant: no decay).
double lr_at(const OptimConfig& cfg, int64_t step, int64_t warmup, int64_t total);

}  // namespace eco
