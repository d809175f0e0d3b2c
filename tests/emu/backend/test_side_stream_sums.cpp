// parallel.overlap on a GPU (dist/side_stream_sums.h): each range of the flat gradient that the
// backward finishes is summed over the ranks by NCCL on the CUDA backend's side stream, ordered
// against the compute stream only by events (Backend::side_fork / side_join). Two ranks (the
// emulated NCCL's rank threads) run a tiny Llama's forward + backward on the emulated CUDA
// backend, with the sums posted as the ranges finish, and must end with the bits of one sum of
// the whole gradient after the backward (the way without overlap), under an all-reduce and a
// ZeRO-1 reduce-scatter.
//
// The emulator's streams are synchronous unless a test defers one (emu::DeferStreams): then the
// deferred stream's work waits until something waits for it, as late as CUDA allows. Each case
// runs three ways: nothing deferred, the compute stream deferred (a sum that did not wait for the
// backward's kernels would read their inputs before they ran), the side stream deferred (a
// gradient read on the compute stream that did not wait for the sums would see them unsummed).
// Two control cases drop the fork, then the join, and must come out wrong: the checker can fail.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/config.h"
#include "data/loader.h"
#include "dist/device_communicator.h"
#include "dist/side_stream_sums.h"
#include "base/backend.h"
#include "model/transformer.h"
#include "optim/zero_shards.h"
#include "thread_group.h"

namespace eco {
namespace {

constexpr int kWorld = 2;

Config tiny_llama() {
  return parse_config(
      "model: {family: llama, n_layer: 2, n_head: 2, d_model: 32, vocab_size: 97, seq_len: 16}\n"
      "data: {source: synthetic}\n"
      "train: {batch_size: 2, max_steps: 1}\n"
      "precision: {treatment: fp8-eco-sr}\n",
      "test_side_stream_sums");
}

// How the overlapped way orders its streams: as SideStreamSums does, or (the control cases)
// without the fork before each sum, or without the join after the backward.
enum class Order { Events, NoFork, NoJoin };

struct RankResult {
  std::vector<float> summed, overlapped;  // the flat gradient after the sum, both ways
  int64_t ranges = 0;                     // ranges posted by the overlapped way
};

// bounds: empty (all-reduce) or ZeRO-1's ranks' ranges (reduce-scatter). `defer`: the streams
// deferred on each rank thread, by creation order (the backend makes its compute stream first,
// its side stream second).
std::vector<RankResult> run_world(const std::vector<int64_t>& bounds_fraction_of_3,
                                  std::set<int> defer, Order order) {
  const Config c = tiny_llama();
  const int B = c.train.batch_size, T = c.model.seq_len;
  GroupBoard board;
  std::vector<RankResult> out(kWorld);
  const emu::DeferStreams deferred(std::move(defer));
  run_rank_threads(kWorld, "side stream sums", [&](int r) {
    ThreadGroup host(r, kWorld, board);
    std::unique_ptr<Backend> be = make_cuda_backend();
    std::unique_ptr<DeviceCommunicator> comm = make_nccl_communicator(host, *be);
    Transformer model(c.model, *be, B, c.precision.treatment, c.precision.quantize);
    model.init_weights(c.train.seed);
    const DataLoader data =
        DataLoader::synthetic(0, LoaderOptions{B, T, c.model.vocab_size, c.train.seed, false});
    std::vector<int32_t> in(size_t(B) * size_t(T)), tgt(in.size());
    data.batch(r, in.data(), tgt.data());
    const Tensor& g = model.grads();
    const int64_t n = g.numel();
    std::vector<int64_t> bounds;  // the given thirds of the gradient, or none
    for (int64_t third : bounds_fraction_of_3) bounds.push_back(n * third / 3);
    RankResult& o = out[size_t(r)];
    const float scale = 1.0f / float(kWorld);

    // Without overlap: the backward, then one sum of the whole gradient (compute stream).
    model.zero_grad();
    model.forward_backward(in.data(), tgt.data(), B, T, scale);
    if (bounds.empty())
      comm->all_reduce_sum(g.as<float>(), n);
    else
      comm->reduce_scatter_sum(g.as<float>(), bounds);
    o.summed.resize(size_t(n));
    be->copy_to_host(o.summed.data(), g);

    // Overlapped: each range's sum posted as the backward finishes it.
    model.zero_grad();
    SideStreamSums sums(*be, *comm, bounds);
    model.set_grad_ready([&](int64_t begin, int64_t end) {
      if (order != Order::NoFork) {
        sums.post(g.as<float>(), begin, end);
        return;
      }
      const LaneScope lane(*comm, DeviceCommunicator::Lane::Side);  // no side_fork
      if (bounds.empty())
        comm->all_reduce_sum(g.as<float>() + begin, end - begin);
      else
        comm->reduce_scatter_sum(g.as<float>() + begin, clamp_bounds(bounds, begin, end));
    });
    model.forward_backward(in.data(), tgt.data(), B, T, scale);
    model.set_grad_ready({});
    if (order != Order::NoJoin) sums.join();
    o.overlapped.resize(size_t(n));
    be->copy_to_host(o.overlapped.data(), g);  // waits for the compute stream only
    o.ranges = sums.posted();
    comm.reset();  // before the backend (it synchronises both streams)
  });
  return out;
}

// The elements each rank's sum is defined on: all of them, or its own range under ZeRO-1.
std::pair<int64_t, int64_t> owned(const std::vector<int64_t>& thirds, int r, int64_t n) {
  if (thirds.empty()) return {0, n};
  return {n * thirds[size_t(r)] / 3, n * thirds[size_t(r) + 1] / 3};
}

// Elements of rank r's owned part whose bits differ between the two ways.
int64_t differing(const RankResult& o, std::pair<int64_t, int64_t> part) {
  int64_t d = 0;
  for (int64_t i = part.first; i < part.second; ++i)
    d += std::memcmp(&o.summed[size_t(i)], &o.overlapped[size_t(i)], sizeof(float)) != 0;
  return d;
}

const std::vector<int64_t> kAllReduce = {}, kZero1 = {0, 2, 3};  // rank 0: two thirds

TEST(EmuSideStreamSums, OverlappedSumsGiveTheBitsOfOneSumAfterTheBackward) {
  for (const auto& thirds : {kAllReduce, kZero1})
    for (const std::set<int>& defer : {std::set<int>{}, std::set<int>{1}, std::set<int>{2}}) {
      const std::string what = std::string(thirds.empty() ? "all-reduce" : "reduce-scatter") +
                               (defer.empty()        ? ", streams synchronous"
                                : defer.count(1) > 0 ? ", compute stream deferred"
                                                     : ", side stream deferred");
      const std::vector<RankResult> res = run_world(thirds, defer, Order::Events);
      for (int r = 0; r < kWorld; ++r) {
        const RankResult& o = res[size_t(r)];
        const auto part = owned(thirds, r, int64_t(o.summed.size()));
        EXPECT_EQ(differing(o, part), 0) << what << ": rank " << r;
        // One range per block, the final norm with the head, the embeddings: 4 for 2 layers.
        EXPECT_EQ(o.ranges, 4) << what << ": rank " << r;
        int64_t nonzero = 0;
        for (int64_t i = part.first; i < part.second; ++i) nonzero += o.summed[size_t(i)] != 0;
        EXPECT_GT(nonzero, (part.second - part.first) / 2) << what << ": gradients missing";
      }
      // The ranks hold the same sums (their own micro-batches differ: the sum is not one's).
      if (thirds.empty()) {
        EXPECT_EQ(std::memcmp(res[0].summed.data(), res[1].summed.data(),
                              res[0].summed.size() * sizeof(float)),
                  0)
            << what;
      }
      if (!::testing::Test::HasFailure())
        std::printf("[   emu    ] %s: the same bits overlapped\n", what.c_str());
    }
}

// The checker's controls: a sum enqueued without the fork reads the gradient before the
// deferred compute stream wrote it; a read without the join sees the deferred side stream's sums
// not yet done. Both must differ from the sum after the backward somewhere.
TEST(EmuSideStreamSums, DeferredStreamsCatchAMissingForkOrJoin) {
  for (const Order order : {Order::NoFork, Order::NoJoin}) {
    const std::set<int> defer = order == Order::NoFork ? std::set<int>{1} : std::set<int>{2};
    const std::vector<RankResult> res = run_world(kAllReduce, defer, order);
    for (int r = 0; r < kWorld; ++r) {
      const RankResult& o = res[size_t(r)];
      const int64_t d = differing(o, owned(kAllReduce, r, int64_t(o.summed.size())));
      const char* what = order == Order::NoFork ? "without the fork" : "without the join";
      EXPECT_GT(d, 0) << what << ": rank " << r;
      std::printf("[   emu    ] %s: rank %d, %lld of %zu gradients wrong (caught)\n", what, r,
                  static_cast<long long>(d), o.summed.size());
    }
  }
}

}  // namespace
}  // namespace eco
