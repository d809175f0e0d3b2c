// Expert parallelism on the emulated CUDA backend over the emulated NCCL (shim/nccl.h: the ranks
// are host threads, one running at a time): a sparse MoE at dp 2 x ep 2 (4 ranks) runs one
// micro-batch per rank and folds its expert gradients (ExpertCollectives::fold_expert_gradients)
// twice on the same model: through host memory (the host-staged exchange over the host
// communicators, the expert gradients' running sum folded on the host and broadcast along the
// expert-data-parallel group), then GPU to GPU (the groups' NCCL communicators set with
// ExpertCollectives::use_device_communicators: the rows by all_to_all_v, the running sum folded
// and broadcast on the device). Every rank's loss and every
// gradient are the same bits both ways, and each way moved its data where it should (the host
// communicators' exchanges against NCCL's sends and broadcasts).
//
// The host communicators of the test (ThreadGroup, thread_group.h) implement what the model asks
// of them (all_gather, all_to_all_v, broadcast for the NCCL id) between the threads of one group.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/config.h"
#include "data/loader.h"
#include "dist/communicator.h"
#include "dist/device_communicator.h"
#include "dist/expert_collectives.h"
#include "base/backend.h"
#include "model/expert_parallel.h"
#include "model/transformer.h"
#include "thread_group.h"

namespace eco {
namespace {

// One rank's view after its micro-batch and the expert fold.
struct RankResult {
  double loss = 0;
  std::vector<float> grads;
  // all_to_all_v on ep_comm; all_gather and broadcast on edp_comm
  long host_exchanges = 0, host_gathers = 0, host_broadcasts = 0;
};

// A gpt2 SMoE of one layer, 4 experts of hidden 32, top-2, experts quantized to FP8 (the expert
// GEMMs on 16-row segments, as tests/e2e/data_parallel_cuda.sh's ep run); a micro-batch of 16
// tokens a rank (one rank's forward + backward takes seconds here).
Config smoe() {
  return parse_config(
      "model: {family: gpt2, n_layer: 1, n_head: 2, d_model: 32, vocab_size: 97, seq_len: 16,\n"
      "  moe: {n_experts: 4, top_k: 2, expert_hidden: 32,\n"
      "        aux_loss_coef: 0.01, z_loss_coef: 0.001}}\n"
      "data: {source: synthetic}\n"
      "train: {batch_size: 1, max_steps: 1}\n"
      "precision: {treatment: fp8-eco-sr, quantize: experts}\n",
      "test_expert_parallel_nccl");
}

// Every rank of dp x ep: forward + backward of its own micro-batch (batch index = world rank),
// then the expert fold, twice on the same model: host-staged ([0]), then with the groups' NCCL
// communicators set on the exchange ([1]).
std::vector<std::array<RankResult, 2>> run_world(int dp, int ep) {
  const Config c = smoe();
  const int world = dp * ep, B = c.train.batch_size, T = c.model.seq_len;
  std::vector<GroupBoard> ep_boards(static_cast<size_t>(dp)), edp_boards(static_cast<size_t>(ep));
  std::vector<std::array<RankResult, 2>> out(static_cast<size_t>(world));
  run_rank_threads(world, "expert parallelism", [&](int r) {
    ThreadGroup ep_comm(r % ep, ep, ep_boards[size_t(r / ep)]);
    ThreadGroup edp_comm(r / ep, dp, edp_boards[size_t(r % ep)]);
    const ExpertParallel P = expert_placement(dp, ep, r);
    std::unique_ptr<Backend> be = make_cuda_backend();
    ExpertCollectives exchange(*be, P, &ep_comm, &edp_comm);
    Transformer model(c.model, *be, B, c.precision.treatment, c.precision.quantize, P, &exchange);
    model.init_weights(c.train.seed);
    const DataLoader data =
        DataLoader::synthetic(0, LoaderOptions{B, T, c.model.vocab_size, c.train.seed, false});
    std::vector<int32_t> in(size_t(B) * size_t(T)), tgt(in.size());
    data.batch(r, in.data(), tgt.data());
    const auto step = [&](RankResult& o) {
      const long exchanges = ep_comm.all_to_alls, gathers = edp_comm.all_gathers,
                 broadcasts = edp_comm.broadcasts;
      model.zero_grad();
      o.loss = model.forward_backward(in.data(), tgt.data(), B, T, 1.0f);
      exchange.fold_expert_gradients();
      o.grads.resize(size_t(model.grads().numel()));
      be->copy_to_host(o.grads.data(), model.grads());
      o.host_exchanges = ep_comm.all_to_alls - exchanges;
      o.host_gathers = edp_comm.all_gathers - gathers;
      o.host_broadcasts = edp_comm.broadcasts - broadcasts;
    };
    step(out[size_t(r)][0]);
    // In the trainer's order: the expert-parallel group's, then (dp > 1) the other's, on the
    // backend's stream (as the trainer makes them).
    std::unique_ptr<DeviceCommunicator> ep_dev = make_nccl_communicator(ep_comm, *be);
    std::unique_ptr<DeviceCommunicator> edp_dev;
    if (dp > 1) edp_dev = make_nccl_communicator(edp_comm, *be);
    exchange.use_device_communicators(ep_dev.get(), edp_dev.get());
    step(out[size_t(r)][1]);
    exchange.use_device_communicators(nullptr, nullptr);
    ep_dev.reset();
    edp_dev.reset();
  });
  return out;
}

TEST(EmuExpertParallel, NcclExchangeAndFoldGiveTheHostStagedBitsAtDp2Ep2) {
  const int dp = 2, ep = 2;
  const long sends = emu::nccl::sends, broadcasts = emu::nccl::broadcasts;
  const std::vector<std::array<RankResult, 2>> res = run_world(dp, ep);
  const long nccl_sends = emu::nccl::sends - sends;
  const long nccl_broadcasts = emu::nccl::broadcasts - broadcasts;
  for (int r = 0; r < dp * ep; ++r) {
    const RankResult &h = res[size_t(r)][0], &d = res[size_t(r)][1];
    // The host-staged way: the exchanges of the forward and backward (2 each, one MoE layer)
    // and the running sum broadcast once by each rank of the expert-data-parallel pair, no
    // all-gather of another group's sources; the NCCL way none of them.
    EXPECT_EQ(h.host_exchanges, 4) << "rank " << r;
    EXPECT_EQ(h.host_gathers, 0) << "rank " << r;
    EXPECT_EQ(h.host_broadcasts, dp) << "rank " << r;
    EXPECT_EQ(d.host_exchanges, 0) << "rank " << r;
    EXPECT_EQ(d.host_gathers, 0) << "rank " << r;
    EXPECT_EQ(d.host_broadcasts, 0) << "rank " << r;
    EXPECT_EQ(std::memcmp(&h.loss, &d.loss, sizeof h.loss), 0)
        << "rank " << r << ": loss " << h.loss << " host-staged, " << d.loss << " over NCCL";
    ASSERT_EQ(h.grads.size(), d.grads.size());
    int64_t differ = 0, first = -1, nonzero = 0;
    for (size_t i = 0; i < h.grads.size(); ++i) {
      nonzero += h.grads[i] != 0.0f;
      if (std::memcmp(&h.grads[i], &d.grads[i], sizeof(float)) != 0 && differ++ == 0)
        first = int64_t(i);
    }
    EXPECT_EQ(differ, 0) << "rank " << r << ": first differing gradient " << first << " of "
                         << h.grads.size();
    EXPECT_GT(nonzero, int64_t(h.grads.size()) / 4) << "rank " << r << ": gradients missing";
  }
  // Rows went both ways between the two ranks of each group (a rank's own rows are copies) and
  // each rank of an expert-data-parallel pair broadcast the running sum of its local experts'
  // gradients in turn (one broadcast per local expert, rank and turn).
  EXPECT_GT(nccl_sends, 0);
  const long local = 4 / ep;  // smoe()'s 4 experts
  EXPECT_EQ(nccl_broadcasts, long(dp * ep) * dp * local)
      << "one broadcast per local expert, rank and turn";
  std::printf("[   emu    ] smoe dp %d x ep %d: losses %.6f %.6f %.6f %.6f, the same bits "
              "host-staged and over NCCL (%ld sends, %ld broadcasts)\n",
              dp, ep, res[0][1].loss, res[1][1].loss, res[2][1].loss, res[3][1].loss, nccl_sends,
              nccl_broadcasts);
}

}  // namespace
}  // namespace eco
