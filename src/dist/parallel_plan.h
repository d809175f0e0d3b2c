// The run's parallelism, decided once from the config and the world, and every collective of a
// step: the groups of a world of dp x ep ranks (rank r = d ep + e), the transport of each
// collective (MPI on host memory; on a GPU NCCL when every rank can use it, else host-staged
// over MPI), whether the gradient sums overlap the backward (a worker thread on host memory,
// the side stream on a GPU), and the ZeRO-1 bounds. The trainer, the optimizer and (through
// model/expert_exchange.h) the MoE layers ask it; nothing else in the library calls a collective.
// Sums are rank-order deterministic (dist/communicator.h), whichever transport carries them.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"
#include "dist/comm_worker.h"
#include "dist/communicator.h"
#include "dist/device_communicator.h"
#include "dist/expert_collectives.h"
#include "dist/side_stream_sums.h"
#include "base/backend.h"
#include "model/expert_parallel.h"

namespace eco {

// ZeRO-1's sharding groups (optim/optimizer.h): every parameter's (or, under expert
// parallelism, the dense ones') over the world, and the routed experts' over the
// expert-data-parallel group (the dp ranks that hold the same experts).
enum class ZeroGroup { World, Experts };

// One segment of a buffer for ZeRO-1's all-gather: its first byte, and the ranks' byte bounds
// (group world + 1 offsets) relative to it.
struct GatherSegment {
  int64_t begin = 0;
  std::vector<int64_t> bounds;
};

class ParallelPlan {
 public:
  // world: the run's processes (world.world() == cfg.parallel.world()); be: the backend whose
  // memory the collectives move (destroy the plan before it). Splits the expert groups, picks
  // the transports and the overlap, every rank alike (agreed by collectives on `world`).
  ParallelPlan(const Config& cfg, Communicator& world, Backend& be);
  ~ParallelPlan();
  ParallelPlan(const ParallelPlan&) = delete;
  ParallelPlan& operator=(const ParallelPlan&) = delete;

  int rank() const { return world_.rank(); }
  int world() const { return world_.world(); }
  // This rank's place under expert parallelism (ep 1: every expert here).
  const ExpertParallel& experts() const { return experts_; }
  // The MoE layers' way to the other ranks (expert parallelism), else null.
  ExpertExchange* expert_exchange() { return expert_.get(); }

  // What the run's log says of the transports once the plan is made ("device collectives: ...",
  // "expert exchange: ..."); empty on one process or host memory.
  const std::vector<std::string>& transport_notes() const { return notes_; }
  // How the gradient sums run, for the log: during the backward (which way) or after it (why).
  std::string overlap_line() const;
  // "worker thread", "side stream" or "off" (summary.json).
  const char* overlap_name() const;
  // The host communicator's name, "+" the device one's when the sums go GPU to GPU.
  std::string communicator_name() const;
  // Bytes this rank sent so far, over every communicator of the run.
  CommBytes bytes_sent() const;

  // ---- The gradient sums ------------------------------------------------------------------
  // The flat gradient of n elements: under expert parallelism `world_ranges` are the ranges
  // summed over the world (everything but the routed experts, whose gradients fold over their
  // own groups: fold_expert_gradients); `zero_bounds`: ZeRO-1's world + 1 offsets (each rank
  // receives the sum of its own range), or empty (every rank receives the whole sum).
  void set_gradients(int64_t n, std::vector<std::pair<int64_t, int64_t>> world_ranges,
                     std::vector<int64_t> zero_bounds);
  // Whether the last micro-batch's sums run during the backward (post_gradient_range, then
  // wait_gradient_sums and fold_expert_gradients) rather than after it (sum_gradients).
  bool overlaps() const { return worker_ || side_sums_; }
  // After the backward: grads (the step's gradient on this rank) = the sum over the ranks (its
  // own range of it under ZeRO-1), the routed experts' folded over the world.
  void sum_gradients(const Tensor& grads);
  // Overlapped: [begin, end) of grads is final on this rank; its sum over the ranks starts.
  void post_gradient_range(const Tensor& grads, int64_t begin, int64_t end);
  // Returns when every posted sum is done (a GPU's waited for under parallel.timeout_s).
  void wait_gradient_sums();
  // Expert parallelism: every local expert's gradient = the world's sum of it, in world rank
  // order (the layers' accumulators, model/expert_exchange.h); nothing otherwise.
  void fold_expert_gradients();

  // ---- The optimizer ----------------------------------------------------------------------
  // grad_norm's partials (one per piece of the gradient) summed over the ranks, in rank order,
  // each piece counted once: under ZeRO-1 (zero_sharded) every piece is one rank's (the others
  // hold zeros) over the world; under expert parallelism an expert's piece is its owner's, and a
  // dense piece (dense[k], the same on every rank) the first rank's of the expert-parallel group.
  void sum_norm_partials(std::vector<double>& partials, const std::vector<char>& dense,
                         bool zero_sharded);
  // ZeRO-1: every rank's rows of the stored-weight buffer `buf` (codes, scales or values) reach
  // every rank of `group`, segment by segment. Returns the bytes this rank sent.
  int64_t all_gather_segments(ZeroGroup group, const Tensor& buf,
                              const std::vector<GatherSegment>& segments);

  // ---- The step's agreements and the checkpoint (no-ops on one process) --------------------
  // x (n) = the sum over the ranks, in rank order.
  void sum_over_ranks(double* x, int64_t n);
  void sum_over_ranks(int64_t* x, int64_t n);
  // Whether any rank says so (a stop signal: every rank must leave the loop at the same step).
  bool any_rank(bool mine);
  // `bytes` of data from rank 0 to every rank.
  void broadcast_from_lead(void* data, int64_t bytes);
  // Returns when every rank has called it (a barrier).
  void wait_for_every_rank();
  // Every rank's byte range (bounds: world + 1 offsets; `mine`: this rank's) reaches rank 0's
  // `out` (bounds.back() bytes, rank 0 only: null elsewhere is fine).
  void gather_to_lead(const void* mine, void* out, const std::vector<int64_t>& byte_bounds);

 private:
  void start_device_communicators();
  void choose_overlap(bool requested);
  // Sums x (n floats, host memory or through it) over `comm`: ranges_ (expert parallelism) or
  // all of it; each rank's range of it under ZeRO-1.
  template <class Comm>
  void sum_ranges(float* x, int64_t n, Comm& comm);
  void sum_range_on_worker(float* x, int64_t begin, int64_t end);

  Communicator& world_;
  Backend& be_;
  bool overlap_requested_ = false;
  bool side_stream_wanted_ = false;  // overlap on the side stream, made by set_gradients
  ExpertParallel experts_;
  // Expert parallelism: the expert-parallel and expert-data-parallel groups (split from world_).
  std::unique_ptr<Communicator> ep_comm_, edp_comm_;
  // device: cuda with several ranks, when NCCL can serve them: the world's; under expert
  // parallelism also its two groups' (the expert-data-parallel one at dp > 1).
  std::unique_ptr<DeviceCommunicator> device_comm_, ep_device_comm_, edp_device_comm_;
  std::unique_ptr<ExpertCollectives> expert_;  // expert parallelism
  std::vector<std::string> notes_;
  std::vector<std::pair<int64_t, int64_t>> ranges_;  // expert parallelism: the world's ranges
  std::vector<int64_t> bounds_;                      // ZeRO-1's, of the flat gradient
  std::vector<std::vector<int64_t>> range_bounds_;   // ZeRO-1: bounds_ cut to each of ranges_
  std::vector<float> grads_host_;  // device memory without NCCL: the sums go through it
  std::vector<char> staging_;      // the same for ZeRO-1's all-gathers
  // parallel.overlap: the sums on the backend's side stream (a GPU with NCCL), or on a worker
  // thread (host memory). Last: stopped before the buffers its jobs write.
  std::unique_ptr<SideStreamSums> side_sums_;
  std::unique_ptr<CommWorker> worker_;
};

}  // namespace eco
