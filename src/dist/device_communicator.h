// Collectives on device memory (GPU to GPU, no host staging) between the ranks of a run: NCCL
// for `device: cuda` data parallelism (kernels/cuda/nccl_communicator.cpp). Same determinism
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

// Every call is enqueued on the backend's stream, in order with its kernels, and may return
// before the data has moved: the caller's next kernels on that stream see the result; the host
// sees it after Backend::synchronize (or a copy to the host). Every rank must make the same calls
// with the same sizes and bounds, in the same order. A rank that stops leaves the others waiting
// on their GPUs, with no timeout of their own: the next host collective's (set_timeout) or the
// launcher ends them.
class DeviceCommunicator {
 public:
  virtual ~DeviceCommunicator() = default;
  virtual std::string name() const = 0;  // "nccl"
  virtual int rank() const = 0;
  virtual int world() const = 0;

  // x (n floats, device) = the rank-order sum, on every rank.
  virtual void all_reduce_sum(float* x, int64_t n) = 0;
  // bounds: world + 1 non-decreasing element offsets, bounds[0] = 0; rank r receives, in place,
  // the rank-order sum of x[bounds[r], bounds[r+1]); the rest of x is unspecified afterwards.
  virtual void reduce_scatter_sum(float* x, const std::vector<int64_t>& bounds) = 0;
  // buf (device bytes): rank r's bytes [byte_bounds[r], byte_bounds[r+1]) reach every rank, in
  // place (byte_bounds as bounds above).
  virtual void all_gather(void* buf, const std::vector<int64_t>& byte_bounds) = 0;

  // Bytes this rank sent, counted as MpiCommunicator counts them: the chunks of the other ranks
  // in a reduce-scatter, its own chunk to each of the w - 1 others in an all-gather (an
  // all-reduce counts both under all_reduce); 0 in a world of 1.
  const CommBytes& bytes_sent() const { return bytes_; }

 protected:
  CommBytes bytes_;
};

// NCCL over the host communicator's ranks: rank 0's ncclUniqueId reaches the others by
// host.broadcast; this process's GPU is the backend's current device (make_cuda_backend picks it
// by local rank); collectives run on the backend's stream. The communicator keeps a receive
// buffer on the GPU (world x chunk floats, at most 256 MiB), recorded in the backend's ledger as
// it grows ("nccl receive buffer", Workspace). Destroy the communicator before the backend.
// A usage error naming the reason when this build has no NCCL or `be` is not the CUDA backend.
std::unique_ptr<DeviceCommunicator> make_nccl_communicator(Communicator& host, Backend& be);
// Whether this build has NCCL (CUDA built with nccl.h and libnccl found at configure time).
bool have_nccl();

}  // namespace eco
