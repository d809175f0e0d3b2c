// Expert parallelism's collectives (see expert_collectives.h).
#include "dist/expert_collectives.h"

#include <algorithm>
#include <utility>

#include "base/error.h"

namespace eco {

ExpertCollectives::ExpertCollectives(Backend& be, const ExpertParallel& placement,
                                     Communicator* ep, Communicator* edp)
    : be_(be), placement_(placement), ep_(ep), edp_(edp) {}

void ExpertCollectives::use_device_communicators(DeviceCommunicator* ep_device,
                                                 DeviceCommunicator* edp_device) {
  ECO_ASSERT(!be_.host_memory() || (!ep_device && !edp_device),
             "device communicators on a host-memory backend");
  ep_device_ = ep_device;
  edp_device_ = edp_device;
}

void ExpertCollectives::add_expert_gradients(ExpertGradients layer) {
  layers_.push_back(std::move(layer));
}

void ExpertCollectives::gather_counts(int64_t* all, const int64_t* mine, int64_t n) {
  ep_->all_gather(all, mine, n * int64_t(sizeof(int64_t)));
}

void ExpertCollectives::exchange_rows(const Tensor& from, const std::vector<int64_t>& from_rows,
                                      const Tensor& to, const std::vector<int64_t>& to_rows,
                                      int width) {
  const int64_t row_bytes = int64_t(width) * int64_t(dtype_size(from.dtype));
  std::vector<int64_t> sb(from_rows.size()), rb(to_rows.size());
  int64_t send_rows = 0, recv_rows = 0;
  for (size_t d = 0; d < sb.size(); ++d) sb[d] = from_rows[d] * row_bytes, send_rows += from_rows[d];
  for (size_t d = 0; d < rb.size(); ++d) rb[d] = to_rows[d] * row_bytes, recv_rows += to_rows[d];
  if (be_.host_memory()) {
    ep_->all_to_all_v(from.data, sb, to.data, rb);
    return;
  }
  if (ep_device_) {  // GPU to GPU, on the backend's stream
    ep_device_->all_to_all_v(from.data, sb, to.data, rb);
    // NCCL waits without a timeout: wait for the rows here, under parallel.timeout_s, where the
    // host-staged exchange's copies waited for them, so that no later wait of the host (the
    // next dispatch's histogram, the router sums, the loss) hangs on a rank that stopped.
    const Communicator::WaitGuard guard(*ep_, "the NCCL token exchange");
    be_.synchronize();
    return;
  }
  // Device memory goes through the host (rows [0, send_rows) of `from`, [0, recv_rows) of `to`).
  host_send_.resize(size_t(send_rows * row_bytes));
  host_recv_.resize(size_t(recv_rows * row_bytes));
  if (send_rows > 0) be_.copy_to_host(host_send_.data(), from.slice(0, {send_rows, width}));
  ep_->all_to_all_v(host_send_.data(), sb, host_recv_.data(), rb);
  if (recv_rows > 0) be_.copy_from_host(to.slice(0, {recv_rows, width}), host_recv_.data());
}

void ExpertCollectives::fold_expert_gradients() {
  for (const ExpertGradients& layer : layers_) fold(layer);
}

void ExpertCollectives::fold(const ExpertGradients& layer) {
  // Rank (d, s) = d ep + s: the sources of the expert-data-parallel groups' accumulators
  // (d = 0 .. dp - 1, each holding sources s = 0 .. ep - 1) are folded in that order, d then s,
  // as a running sum handed along the groups: group d adds its sources to the sum of groups
  // 0 .. d - 1 and broadcasts it to the others, so no rank receives another group's sources
  // ((dp - 1) x local x span floats in a step, nothing held beside the gradient itself).
  // (Without keep_sources, dp 1, the accumulator holds one running sum, ((0 + g_0) + g_1) + ...
  // in source order as the backward added the segments: the fold makes the gradient 0 + it,
  // exact, as a sum from +0 is never -0.)
  const ExpertParallel& P = placement_;
  if (!be_.host_memory() && P.dp > 1 && !edp_device_) {  // device memory without NCCL
    fold_on_host(layer);
    return;
  }
  const Tensor& acc = layer.sources;
  ECO_ASSERT(P.dp == 1 || acc.dtype == DType::F32, "expert gradients in {}", dtype_name(acc.dtype));
  for (const Tensor& g : layer.grads) be_.zero(g);
  for (int d = 0; d < P.dp; ++d) {
    if (d == P.group) fold_sources(layer, acc);
    if (P.dp == 1) break;
    for (const Tensor& g : layer.grads) {
      if (be_.host_memory()) edp_->broadcast(g.data, int64_t(g.bytes()), d);
      else edp_device_->broadcast(g.data, int64_t(g.bytes()), d);  // rank d of the group
    }
  }
  if (!be_.host_memory() && P.dp > 1) {  // NCCL waits without a timeout: wait here, under
    const Communicator::WaitGuard guard(*edp_, "the NCCL expert-gradient broadcasts");
    be_.synchronize();  // parallel.timeout_s
  }
  be_.zero(acc);
}

void ExpertCollectives::fold_sources(const ExpertGradients& layer, const Tensor& parts) {
  const int64_t L = layer.local, span = layer.span;
  for (int64_t k = 0; k < L; ++k)
    for (int64_t s = 0; s < layer.n_sources; ++s)
      be_.add_inplace(layer.grads[size_t(k)], parts.slice((s * L + k) * span, {span}), span);
}

void ExpertCollectives::fold_on_host(const ExpertGradients& layer) {
  const ExpertParallel& P = placement_;
  const Tensor& acc = layer.sources;
  ECO_ASSERT(acc.dtype == DType::F32, "expert gradients in {}", dtype_name(acc.dtype));
  const size_t n = size_t(acc.numel()), L = size_t(layer.local), span = size_t(layer.span);
  host_sources_.resize(n);
  be_.copy_to_host(host_sources_.data(), acc);
  const float* parts = host_sources_.data();
  const size_t sources = size_t(layer.n_sources);
  // ((0 + g_0) + g_1) + ... in fp32, as Backend::add_inplace adds on either backend, over the
  // sources of group 0, then group 1, ...: the running sum handed along the groups as in fold().
  std::vector<float> sum(L * span, 0.0f);
  for (int d = 0; d < P.dp; ++d) {
    if (d == P.group)
      for (size_t k = 0; k < L; ++k) {
        float* g = sum.data() + k * span;
        for (size_t s = 0; s < sources; ++s) {
          const float* part = parts + (s * L + k) * span;
          for (size_t i = 0; i < span; ++i) g[i] = g[i] + part[i];
        }
      }
    if (P.dp > 1) edp_->broadcast(sum.data(), int64_t(sum.size() * sizeof(float)), d);
  }
  for (size_t k = 0; k < L; ++k) be_.copy_from_host(layer.grads[k], sum.data() + k * span);
  be_.zero(acc);
}

}  // namespace eco
