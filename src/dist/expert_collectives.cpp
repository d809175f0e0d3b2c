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
  if (edp_device_) reserve_receive_buffer();
}

void ExpertCollectives::reserve_receive_buffer() {
  if (placement_.dp == 1) return;
  int64_t largest = 0;
  for (const ExpertGradients& l : layers_) largest = std::max(largest, l.sources.numel());
  if (largest == 0 || receive_.numel() >= largest) return;
  receive_ = be_.alloc("moe_ep_part", {largest}, DType::F32, MemCategory::Grads);
}

void ExpertCollectives::add_expert_gradients(ExpertGradients layer) {
  layers_.push_back(std::move(layer));
  if (edp_device_) reserve_receive_buffer();
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
  // (d = 0 .. dp - 1, each holding sources s = 0 .. ep - 1) are folded in that order, d then s.
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
  const int64_t n = acc.numel();
  for (const Tensor& g : layer.grads) be_.zero(g);
  if (be_.host_memory() && P.dp > 1) {  // every group's accumulators at once
    gathered_.resize(size_t(P.dp) * size_t(n));
    edp_->all_gather(gathered_.data(), acc.data, int64_t(acc.bytes()));
    const Tensor all{gathered_.data(), {int64_t(gathered_.size())}, DType::F32};
    for (int d = 0; d < P.dp; ++d) fold_sources(layer, all.slice(int64_t(d) * n, {n}));
  } else {  // this group's alone (dp 1), or each group's in turn GPU to GPU into receive_
    for (int d = 0; d < P.dp; ++d) {
      Tensor parts = acc;
      if (P.dp > 1) {
        ECO_ASSERT(receive_.numel() >= n && receive_.dtype == DType::F32,
                   "expert accumulators of {} elements, a receive buffer of {}", n,
                   receive_.numel());
        if (d != P.group) parts = receive_.slice(0, {n});
        edp_device_->broadcast(parts.data, int64_t(acc.bytes()), d);  // rank d of the group
      }
      fold_sources(layer, parts);
    }
    if (P.dp > 1) {  // NCCL waits without a timeout: wait here, under parallel.timeout_s
      const Communicator::WaitGuard guard(*edp_, "the NCCL expert-gradient broadcasts");
      be_.synchronize();
    }
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
  if (P.dp > 1) {
    gathered_.resize(size_t(P.dp) * n);
    edp_->all_gather(gathered_.data(), host_sources_.data(), int64_t(n * sizeof(float)));
    parts = gathered_.data();
  }
  // ((0 + g_0) + g_1) + ... in fp32, as Backend::add_inplace adds on either backend.
  std::vector<float> g(span);
  for (size_t k = 0; k < L; ++k) {
    std::fill(g.begin(), g.end(), 0.0f);
    for (int src = 0; src < P.dp * P.ep; ++src) {
      const float* part = parts + (size_t(src) * L + k) * span;
      for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] + part[i];
    }
    be_.copy_from_host(layer.grads[k], g.data());
  }
  be_.zero(acc);
}

}  // namespace eco
