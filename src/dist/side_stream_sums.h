// parallel.overlap on a GPU: the data-parallel gradient sum of each range of the flat gradient
// that the backward finishes, enqueued (NCCL, DeviceCommunicator::Lane::Side) on the backend's
// side stream after everything enqueued so far on its compute stream (Backend::side_fork), so
// that it runs while the compute stream goes on with the blocks below. join() orders the compute
// stream's next work after every posted sum (Backend::side_join). No host thread is involved:
// the calls only enqueue. The sums are elementwise, so summing the ranges one by one gives the
// bits of one sum of the whole buffer (the rank-order fold of DeviceCommunicator).
#pragma once
#include <cstdint>
#include <vector>

#include "dist/device_communicator.h"
#include "base/backend.h"

namespace eco {

class SideStreamSums {
 public:
  // bounds: ZeRO-1's ranks' ranges of the flat gradient (world + 1 offsets, as
  // DeviceCommunicator::reduce_scatter_sum's: each rank receives the sum of its own range only),
  // or empty: every rank receives the sum of all of it (all_reduce_sum). A usage error when `be`
  // has no side stream.
  SideStreamSums(Backend& be, DeviceCommunicator& comm, std::vector<int64_t> bounds);
  // [begin, end) of `grads` (the flat gradient, device floats) is final on the compute stream:
  // its sum over the ranks, on the side stream. Every rank posts the same ranges in the same
  // order, between joins.
  void post(float* grads, int64_t begin, int64_t end);
  // The compute stream's next work waits for every sum posted so far.
  void join();
  int64_t posted() const { return posted_; }  // ranges since construction

 private:
  Backend& be_;
  DeviceCommunicator& comm_;
  std::vector<int64_t> bounds_;
  int64_t posted_ = 0;
};

}  // namespace eco
