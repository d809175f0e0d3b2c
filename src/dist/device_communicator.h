// Collectives on device memory (GPU to GPU, no host staging) between the ranks of a run or of one
// of its groups: NCCL for `device: cuda` data parallelism and expert parallelism's token exchange
// and expert gradients (kernels/cuda/nccl_communicator.cpp). Same determinism
// contract as the host Communicator (dist/communicator.h): every sum is
// ((0 + x_0) + x_1) + ... + x_{w-1}, fp32 adds in rank order from +0.0f, whatever algorithm NCCL
// would pick, so its bits equal MpiCommunicator's (and one rank's accumulation) on the same data.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dist/communicator.h"

namespace eco {

class Backend;

// Every call is enqueued on a backend stream (the compute stream, or the side stream: set_lane),
// in order with that stream's kernels, and may return before the data has moved: the caller's
// next kernels on that stream see the result; the host sees it after Backend::synchronize (or a
// copy to the host; after side_join for the side stream's). Every rank must make the same calls
// with the same sizes and bounds, in the same order. A rank that stops leaves the others waiting
// on their GPUs, with no timeout of their own: the next host collective's (set_timeout) or the
// launcher ends them.
class DeviceCommunicator {
 public:
  virtual ~DeviceCommunicator() = default;
  virtual std::string name() const = 0;  // "nccl"
  virtual int rank() const = 0;
  virtual int world() const = 0;

  // The backend stream the next calls are enqueued on: its compute stream (the default), or its
  // side stream (Backend::side_fork / side_join order the two; a backend without a side stream
  // refuses Side). Calls on both lanes share one communicator: they must be ordered by those
  // events (a side call after the fork, a compute call after the join), so that every rank
  // enqueues the same calls in the same order and no two run at once. LaneScope sets a lane
  // for a scope.
  enum class Lane { Compute, Side };
  virtual void set_lane(Lane lane) = 0;
  virtual Lane lane() const = 0;

  // x (n floats, device) = the rank-order sum, on every rank.
  virtual void all_reduce_sum(float* x, int64_t n) = 0;
  // bounds: world + 1 non-decreasing element offsets, bounds[0] = 0; rank r receives, in place,
  // the rank-order sum of x[bounds[r], bounds[r+1]); the rest of x is unspecified afterwards.
  virtual void reduce_scatter_sum(float* x, const std::vector<int64_t>& bounds) = 0;
  // buf (device bytes): rank r's bytes [byte_bounds[r], byte_bounds[r+1]) reach every rank, in
  // place (byte_bounds as bounds above).
  virtual void all_gather(void* buf, const std::vector<int64_t>& byte_bounds) = 0;
  // `bytes` of buf (device) from `root` to every rank, in place.
  virtual void broadcast(void* buf, int64_t bytes, int root) = 0;
  // Expert parallelism's token exchange on device bytes, with Communicator::all_to_all_v's
  // contract: `send` holds world blocks packed in rank order, block d (send_bytes[d] bytes) for
  // rank d; `recv` (not overlapping `send`) receives world blocks packed in rank order, block s
  // (recv_bytes[s] bytes) from rank s. The counts must agree pairwise (send_bytes[d] on rank s
  // == recv_bytes[s] on rank d); blocks may be empty. Vectors that are not world non-negative
  // counts, or a block to self whose two counts differ, are refused (runtime error) before
  // anything is enqueued.
  virtual void all_to_all_v(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                            const std::vector<int64_t>& recv_bytes) = 0;

  // Bytes this rank sent, counted as MpiCommunicator counts them: the chunks of the other ranks
  // in a reduce-scatter, its own chunk to each of the w - 1 others in an all-gather (an
  // all-reduce counts both under all_reduce), a broadcast's bytes once on its root, the blocks
  // to the other ranks in an all_to_all_v; 0 in a world of 1.
  const CommBytes& bytes_sent() const { return bytes_; }

 protected:
  CommBytes bytes_;
};

// The lane of `comm` for the scope's lifetime, then the one before.
class LaneScope {
 public:
  LaneScope(DeviceCommunicator& comm, DeviceCommunicator::Lane lane)
      : comm_(comm), before_(comm.lane()) {
    comm_.set_lane(lane);
  }
  ~LaneScope() { comm_.set_lane(before_); }
  LaneScope(const LaneScope&) = delete;
  LaneScope& operator=(const LaneScope&) = delete;

 private:
  DeviceCommunicator& comm_;
  DeviceCommunicator::Lane before_;
};

// NCCL over the host communicator's ranks: rank 0's ncclUniqueId reaches the others by
// host.broadcast; this process's GPU is the backend's current device (make_cuda_backend picks it
// by local rank); collectives run on the backend's compute stream, or its side stream. The
// communicator keeps a receive buffer on the GPU (world x chunk floats, at most 256 MiB),
// recorded in the backend's ledger as it grows ("nccl receive buffer", Workspace). Destroy the communicator before the backend.
// A usage error naming the reason when this build has no NCCL or `be` is not the CUDA backend.
std::unique_ptr<DeviceCommunicator> make_nccl_communicator(Communicator& host, Backend& be);
// Whether this build has NCCL (CUDA built with nccl.h and libnccl found at configure time).
bool have_nccl();

}  // namespace eco
