// parallel.overlap's sums on a GPU's side stream (see side_stream_sums.h).
#include "dist/side_stream_sums.h"

#include <utility>

#include "base/error.h"

namespace eco {

SideStreamSums::SideStreamSums(Backend& be, DeviceCommunicator& comm, std::vector<int64_t> bounds)
    : be_(be), comm_(comm), bounds_(std::move(bounds)) {
  if (!be_.has_side_stream())
    usage_error("overlapped gradient sums on the device need a side stream, which the '{}' "
                "backend does not have",
                be_.name());
  ECO_ASSERT(bounds_.empty() || bounds_.size() == size_t(comm_.world()) + 1,
             "{} ZeRO-1 bounds for a world of {}", bounds_.size(), comm_.world());
}

void SideStreamSums::post(float* grads, int64_t begin, int64_t end) {
  ECO_ASSERT(0 <= begin && begin <= end, "gradient range [{}, {})", begin, end);
  be_.side_fork();  // the range is final on the compute stream: the side stream waits for it
  const LaneScope lane(comm_, DeviceCommunicator::Lane::Side);
  if (bounds_.empty())
    comm_.all_reduce_sum(grads + begin, end - begin);
  else  // the ranks' ranges cut to [begin, end), relative to begin
    comm_.reduce_scatter_sum(grads + begin, clamp_bounds(bounds_, begin, end));
  ++posted_;
}

void SideStreamSums::join() { be_.side_join(); }

}  // namespace eco
