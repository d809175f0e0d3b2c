// Expert parallelism's collectives (model/expert_exchange.h, implemented here): the segment
// sizes and the token rows between the ranks of the expert-parallel group (all_to_all_v: GPU to
// GPU over the group's device communicator when there is one, else on host memory or staged
// through it), and the fold of the routed experts' gradients over the world after the backward.
#pragma once
#include <cstdint>
#include <vector>

#include "dist/communicator.h"
#include "dist/device_communicator.h"
#include "base/backend.h"
#include "model/expert_exchange.h"
#include "model/expert_parallel.h"

namespace eco {

class ExpertCollectives final : public ExpertExchange {
 public:
  // ep: the expert-parallel group (split(r / ep, r % ep)), edp: the expert-data-parallel one
  // (split(r % ep, r / ep)); both null for a plan's, which only records its layers and runs
  // nothing.
  ExpertCollectives(Backend& be, const ExpertParallel& placement, Communicator* ep,
                    Communicator* edp);
  // Device memory: the same groups GPU to GPU (null: through the host). ep_device carries the
  // token exchange, edp_device (dp > 1) the expert gradients' running sum (broadcasts into the
  // gradient itself). Every rank of the run must pass the same kinds.
  void use_device_communicators(DeviceCommunicator* ep_device, DeviceCommunicator* edp_device);

  void gather_counts(int64_t* all, const int64_t* mine, int64_t n) override;
  void exchange_rows(const Tensor& from, const std::vector<int64_t>& from_rows, const Tensor& to,
                     const std::vector<int64_t>& to_rows, int width) override;
  void add_expert_gradients(ExpertGradients layer) override;

  // Every layer's local experts' gradients = every source rank's, summed in world rank order:
  // ((0 + g_0) + g_1) + ... over the world's ranks, as the world's all-reduce gives every expert
  // at ep 1, so every element sees the same fp32 additions at every placement. The layers'
  // accumulators are zeroed for the next step.
  void fold_expert_gradients();

 private:
  void fold(const ExpertGradients& layer);
  // Device memory at dp > 1 without edp_device: the same running sum on the host (this rank's
  // accumulators copied there, the sum broadcast along the group), then copied back.
  void fold_on_host(const ExpertGradients& layer);
  // grads of the local experts += the accumulators `parts` (n_sources, local, span) of one
  // expert-data-parallel rank, sources in rank order (Backend::add_inplace).
  void fold_sources(const ExpertGradients& layer, const Tensor& parts);

  Backend& be_;
  ExpertParallel placement_;
  Communicator* ep_ = nullptr;
  Communicator* edp_ = nullptr;
  DeviceCommunicator* ep_device_ = nullptr;
  DeviceCommunicator* edp_device_ = nullptr;
  std::vector<ExpertGradients> layers_;
  // Device memory's way through the host: the exchange's rows, this rank's accumulators.
  std::vector<char> host_send_, host_recv_;
  std::vector<float> host_sources_;
};

}  // namespace eco
