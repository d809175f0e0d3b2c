// The run's persistent state (every parameter in its stored form, the optimizer's state, the
// step) captured into a CheckpointState and restored from a checkpoint file.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"
#include "dist/parallel_plan.h"
#include "base/backend.h"
#include "model/transformer.h"
#include "optim/optimizer.h"
#include "train/checkpoint.h"

namespace eco {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// The model's stored tensors, then the optimizer's: the checkpoint's sections in order.
NamedTensors persistent_tensors(Transformer& model, const Optimizer& opt);

// For each persistent_tensors entry, the world + 1 byte offsets of the ranks' pieces of the
// whole tensor when the ranks hold it sharded (ZeRO-1's moments; expert parallelism's experts:
// the owner in the first expert-parallel group holds the whole range, every other rank an empty
// one, whether it holds a copy or nothing), else empty.
using TensorBounds = std::vector<std::vector<int64_t>>;
TensorBounds persistent_bounds(Transformer& model, const Optimizer& opt);

// The state after `step` optimizer steps, copied to the host. Sharded entries (bounds non-empty;
// `plan` then required) are gathered to rank 0, whose state holds every tensor whole; the state
// other ranks return is incomplete (their whole tensors are not even copied) and must not be
// written. Every rank calls it when any entry is sharded.
CheckpointState capture_state(const Config& cfg, int64_t step, Backend& backend,
                              const NamedTensors& tensors, const TensorBounds& bounds = {},
                              ParallelPlan* plan = nullptr);

// The first float value (F32, F64, BF16 tensors) that is NaN or infinite in `st`, as
// "'h.0.attn.qkv.weight.m' holds nan"; "" when every value is finite. A checkpoint is written
// only when this is "" (FP8 codes cannot be NaN without a NaN scale).
std::string first_non_finite(const CheckpointState& st, const NamedTensors& tensors);

// Restores `st` (read from `path`) into `tensors` and returns its step. Refuses (naming the file)
// a checkpoint of another model (fingerprint), of another trajectory (trajectory_differences:
// seed, lr, batch, schedule, ...), one whose sections do not match, or one beyond the run's
// steps.
// Sharded entries (bounds) take this rank's bytes of the whole tensor the checkpoint holds (a
// rank holding a whole tensor takes it whole), so a checkpoint resumes at any world size, zero
// stage and expert placement.
int64_t restore_state(const CheckpointState& st, const std::string& path, const Config& cfg,
                      Backend& backend, const NamedTensors& tensors,
                      const TensorBounds& bounds = {}, int rank = 0);

}  // namespace eco
