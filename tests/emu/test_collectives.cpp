// kernels/cuda/collectives.cu and kernels/cuda/nccl_communicator.cpp (emulated):
//  - fold_rank_order equals the CPU loop ((0 + row_0) + row_1) + ... bit for bit: worlds 1 to 4,
//    n ragged against the 256-thread block, row strides past n, values whose sum depends on the
//    order, -0 / inf / NaN; the arguments it refuses.
//  - the NCCL communicator over an emulated NCCL (shim/nccl.h: ranks as host threads, messages
//    matched in order, sizes and device-memory bounds checked), worlds 1 to 4, in one round and in
//    rounds of a few elements: all_reduce_sum is the rank-order fold on every rank (the bits of
//    MpiCommunicator and LocalCommunicator, 0 + x at world 1), reduce_scatter_sum with ragged and
//    empty chunks, all_gather with ragged byte ranges, broadcast from every root, all_to_all_v
//    with uneven and empty blocks (the blocks tests/mpi checks MpiCommunicator's against; at
//    world 1 LocalCommunicator's result), the byte counters as MpiCommunicator counts them, the
//    receive buffer in the ledger, bounds and block counts it refuses.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include <nccl.h>

#include "base/error.h"
#include "dist/communicator.h"
#include "emu_common.h"
#include "kernels/cuda/collectives.cuh"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/nccl_communicator.h"

namespace {

using namespace emuh;
namespace ec = eco::cuda;

// Rank r's element i (as tests/mpi): large and small magnitudes of both signs, so that the sum's
// rounding depends on the order of the additions from 3 ranks on.
float value(int r, int64_t i) {
  const double big = (r + i) % 3 == 0 ? 1e8 : (r + i) % 3 == 1 ? -1e8 : 1.0;
  return float(big * (1 + 0.001 * r) + 0.37 * double(i % 11) + 1e-3 * r);
}

// The host communicators' sum of element i: ((0 + x_0) + x_1) + ... in rank order.
float fold(int world, int64_t i) {
  float acc = 0.0f;
  for (int r = 0; r < world; ++r) acc += value(r, i);
  return acc;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

TEST(EmuCollectives, FoldIsTheRankOrderSumBitForBit) {
  emu::sequential = true;  // barrier-free: every thread in turn
  Tally t;
  for (int w : {1, 2, 3, 4})
    for (int64_t n : {1, 7, 256, 257, 1000})
      for (int64_t pad : {0, 3}) {
        const int64_t stride = n + pad;
        std::vector<float> recv(size_t(w * stride), std::numeric_limits<float>::quiet_NaN());
        for (int r = 0; r < w; ++r)
          for (int64_t i = 0; i < n; ++i) recv[size_t(r * stride + i)] = value(r, i);
        // -0 everywhere (0 + -0 = +0), an inf, an inf against a -inf (NaN), a NaN.
        const int64_t last = n - 1;
        for (int r = 0; r < w; ++r) recv[size_t(r * stride)] = -0.0f;
        if (n >= 7) {
          recv[size_t(1)] = INFINITY;
          recv[size_t((w - 1) * stride + 2)] = -INFINITY;
          recv[size_t(last)] = NAN;
        }
        Guarded<float> d_recv(recv), d_out{size_t(n)};
        ASSERT_EQ(ec::fold_rank_order(d_out.data(), d_recv.data(), w, n, stride), cudaSuccess);
        const std::vector<float> out = d_out.host();
        int64_t order_matters = 0;
        for (int64_t i = 0; i < n; ++i) {
          float ref = 0.0f, reversed = 0.0f;
          for (int r = 0; r < w; ++r) ref += recv[size_t(r * stride + i)];
          for (int r = w - 1; r >= 0; --r) reversed += recv[size_t(r * stride + i)];
          order_matters += !same_bits(ref, reversed);
          if (!same_bits(out[size_t(i)], ref)) {
            t.fail("world " + std::to_string(w) + " n " + std::to_string(n) + " stride " +
                   std::to_string(stride) + " element " + std::to_string(i) + ": " +
                   std::to_string(out[size_t(i)]) + " vs " + std::to_string(ref));
            break;
          }
        }
        if (w >= 3 && n >= 257) {
          EXPECT_GT(order_matters, 0) << "the values hide the order";
        }
        EXPECT_TRUE(same_bits(out[0], 0.0f)) << "-0 rows must sum to +0";
        EXPECT_TRUE(d_out.guards_intact() && d_recv.guards_intact());
        ++t.cases;
      }
  emu::sequential = false;
  EXPECT_EQ(t.cases, 40);
}

TEST(EmuCollectives, FoldIsTheSameThreadedAndInReversedBlocks) {
  const int w = 3;
  const int64_t n = 300, stride = 301;  // two blocks, a ragged second one
  std::vector<float> recv(size_t(w * stride));
  for (int r = 0; r < w; ++r)
    for (int64_t i = 0; i < stride; ++i) recv[size_t(r * stride + i)] = value(r, i);
  std::vector<float> ref(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ref[size_t(i)] = fold(w, i);
  for (bool reverse : {false, true}) {
    emu::reverse_blocks = reverse;
    Guarded<float> d_recv(recv), d_out{size_t(n)};
    ASSERT_EQ(ec::fold_rank_order(d_out.data(), d_recv.data(), w, n, stride), cudaSuccess);
    long first = -1;
    EXPECT_EQ(differ(d_out.host(), ref, &first), 0) << "reversed " << reverse << " first " << first;
    EXPECT_TRUE(d_out.guards_intact());
  }
  emu::reverse_blocks = false;
}

TEST(EmuCollectives, FoldRefusesBadArguments) {
  Guarded<float> a{8}, b{8};
  EXPECT_EQ(ec::fold_rank_order(a.data(), b.data(), 0, 4, 4), cudaErrorInvalidValue);
  EXPECT_EQ(ec::fold_rank_order(a.data(), b.data(), 2, 4, 3), cudaErrorInvalidValue);  // stride < n
  EXPECT_EQ(ec::fold_rank_order(a.data(), b.data(), 2, -1, 4), cudaErrorInvalidValue);
  EXPECT_EQ(ec::fold_rank_order(nullptr, b.data(), 2, 4, 4), cudaErrorInvalidValue);
  EXPECT_EQ(ec::fold_rank_order(nullptr, nullptr, 2, 0, 0), cudaSuccess);  // nothing to do
  EXPECT_TRUE(a.guards_intact() && b.guards_intact());
}

// ---- the communicator over the emulated NCCL -------------------------------------------------

// The host side of a world of threads (emu::nccl::run_ranks): only what make_nccl_communicator
// asks of it, the unique id's broadcast from rank 0.
struct IdBoard {
  std::map<int64_t, std::vector<unsigned char>> posted;  // broadcast number -> the root's bytes
};
class ThreadCommunicator final : public eco::Communicator {
 public:
  ThreadCommunicator(int rank, int world, IdBoard& board)
      : rank_(rank), world_(world), board_(board) {}
  int rank() const override { return rank_; }
  int world() const override { return world_; }
  std::string name() const override { return "threads"; }
  void broadcast(void* data, int64_t bytes, int root) override {
    const int64_t k = calls_++;
    if (rank_ == root) {
      const auto* p = static_cast<const unsigned char*>(data);
      board_.posted[k].assign(p, p + bytes);
      emu::nccl::notify();
      return;
    }
    emu::nccl::wait_until([&] { return board_.posted.count(k) > 0; }, "the id's broadcast");
    std::memcpy(data, board_.posted[k].data(), size_t(bytes));
  }
  void all_reduce_sum(float*, int64_t) override { unused(); }
  void all_reduce_sum(double*, int64_t) override { unused(); }
  void all_reduce_sum(int64_t*, int64_t) override { unused(); }
  void all_reduce_max(double*, int64_t) override { unused(); }
  void all_gather(void*, const void*, int64_t) override { unused(); }
  void reduce_scatter_sum(float*, const std::vector<int64_t>&) override { unused(); }
  void all_gather(void*, const std::vector<int64_t>&) override { unused(); }
  void gather(const void*, void*, const std::vector<int64_t>&, int) override { unused(); }
  std::unique_ptr<eco::Communicator> split(int, int) override { unused(); }
  void all_to_all_v(const void*, const std::vector<int64_t>&, void*,
                    const std::vector<int64_t>&) override {
    unused();
  }
  void barrier() override { unused(); }
  [[noreturn]] void abort(int) override { unused(); }

 private:
  [[noreturn]] static void unused() {
    emu::nccl::fail("the NCCL communicator's host side asked for more than broadcast");
  }
  int rank_, world_;
  IdBoard& board_;
  int64_t calls_ = 0;
};

// What one rank saw: its device buffer after the calls, its byte counters, its ledger.
struct RankResult {
  std::vector<float> x;
  std::vector<unsigned char> bytes;
  eco::CommBytes sent;
  uint64_t ledger_bytes = 0;
  size_t ledger_entries = 0;
};

// Runs `calls(comm, rank)` on every rank of a world of `w` threads, each with its own NCCL
// communicator (rounds of round_elems elements), and returns what each rank saw.
template <class Calls>
std::vector<RankResult> on_every_rank(int w, int64_t round_elems, Calls calls) {
  IdBoard board;
  std::vector<RankResult> out(static_cast<size_t>(w));
  std::vector<std::string> errors;
  emu::sequential = true;
  emu::nccl::run_ranks(
      w,
      [&](int r) {
        ThreadCommunicator host(r, w, board);
        eco::MemoryLedger ledger;
        cudaStream_t s = nullptr;
        ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
        {
          std::unique_ptr<eco::DeviceCommunicator> comm =
              ec::make_nccl_communicator(host, s, ledger, round_elems);
          EXPECT_EQ(comm->name(), "nccl");
          EXPECT_EQ(comm->rank(), r);
          EXPECT_EQ(comm->world(), w);
          calls(*comm, r, out[size_t(r)]);
          out[size_t(r)].sent = comm->bytes_sent();
        }
        out[size_t(r)].ledger_bytes = ledger.total(eco::MemCategory::Workspace);
        out[size_t(r)].ledger_entries = ledger.entries().size();
        cudaStreamDestroy(s);
      },
      &errors);
  emu::sequential = false;
  for (int r = 0; r < w; ++r) EXPECT_EQ(errors[size_t(r)], "") << "rank " << r;
  EXPECT_EQ(emu::nccl::comms_alive, 0);
  return out;
}

// Device memory holding h (cudaMalloc'd: the emulated NCCL checks its buffers are).
template <class T>
ec::DeviceBuffer device_copy(const std::vector<T>& h) {
  ec::DeviceBuffer d(h.size() * sizeof(T));
  EXPECT_EQ(cudaMemcpy(d.get(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice),
            cudaSuccess);
  return d;
}
template <class T>
std::vector<T> host_copy(const ec::DeviceBuffer& d, size_t n) {
  std::vector<T> h(n);
  EXPECT_EQ(cudaMemcpy(h.data(), d.get(), n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

// Rank r's input of n elements: value(r, i), with a -0 first (so 0 + x shows at world 1).
std::vector<float> rank_input(int r, int64_t n) {
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[size_t(i)] = value(r, i);
  x[0] = -0.0f;
  return x;
}

TEST(EmuNcclCommunicator, AllReduceSumIsTheRankOrderFoldOnEveryRank) {
  const int64_t sizes[] = {1, 5, 1001};
  for (int w : {1, 2, 3, 4})
    for (int64_t round : {ec::kNcclRoundElems, int64_t(7)}) {  // one round; rounds of 7 / w
      const long groups_before = emu::nccl::groups;
      const auto calls = [&](eco::DeviceCommunicator& c, int r, RankResult& o) {
        for (int64_t n : sizes) {
          ec::DeviceBuffer x = device_copy(rank_input(r, n));
          c.all_reduce_sum(x.get<float>(), n);
          const std::vector<float> h = host_copy<float>(x, size_t(n));
          o.x.insert(o.x.end(), h.begin(), h.end());
        }
      };
      const auto res = on_every_rank(w, round, calls);
      int64_t total_sent = 0;
      for (int r = 0; r < w; ++r) {
        const RankResult& o = res[size_t(r)];
        size_t at = 0;
        for (int64_t n : sizes)
          for (int64_t i = 0; i < n; ++i, ++at) {
            const float ref = i == 0 ? 0.0f : fold(w, i);  // ((0 + -0) + -0) ... = +0
            ASSERT_TRUE(same_bits(o.x[at], ref))
                << "world " << w << " round " << round << " rank " << r << " n " << n
                << " element " << i << ": " << o.x[at] << " vs the rank-order fold " << ref;
          }
        total_sent += o.sent.all_reduce;
        EXPECT_EQ(o.sent.total(), o.sent.all_reduce);
        // MpiCommunicator's count in one round: the others' chunks + this chunk to w - 1 ranks.
        if (round == ec::kNcclRoundElems) {
          int64_t mpi = 0;
          for (int64_t n : sizes) {
            const int64_t mine = n * (r + 1) / w - n * r / w;
            mpi += int64_t(sizeof(float)) * ((n - mine) + mine * (w - 1));
          }
          EXPECT_EQ(o.sent.all_reduce, mpi) << "world " << w << " rank " << r;
        }
        // The receive buffer: world x chunk floats, within the round's bound.
        EXPECT_LE(o.ledger_bytes, uint64_t(std::max<int64_t>(round, w)) * sizeof(float));
        EXPECT_GE(o.ledger_entries, 1u);
      }
      int64_t n_all = 0;
      for (int64_t n : sizes) n_all += n;
      EXPECT_EQ(total_sent, 2 * n_all * (w - 1) * int64_t(sizeof(float))) << "world " << w;
      // Rounds of 7 / w elements per chunk: 1001 elements take many groups.
      if (round == 7) {
        EXPECT_GT(emu::nccl::groups - groups_before, 100 * w);
      }
    }
}

TEST(EmuNcclCommunicator, ReduceScatterSumLeavesEachRankItsChunksFold) {
  const std::map<int, std::vector<int64_t>> bounds = {
      {1, {0, 6}}, {2, {0, 9, 9}}, {3, {0, 0, 5, 6}}, {4, {0, 3, 3, 10, 11}}};
  for (const auto& [w, b] : bounds)
    for (int64_t round : {ec::kNcclRoundElems, int64_t(2 * w)}) {  // chunks of 2 per round
      const int64_t n = b.back();
      const auto calls = [&](eco::DeviceCommunicator& c, int r, RankResult& o) {
        ec::DeviceBuffer x = device_copy(rank_input(r, n));
        c.reduce_scatter_sum(x.get<float>(), b);
        o.x = host_copy<float>(x, size_t(n));
      };
      const auto res = on_every_rank(w, round, calls);
      for (int r = 0; r < w; ++r) {
        const RankResult& o = res[size_t(r)];
        for (int64_t i = b[size_t(r)]; i < b[size_t(r) + 1]; ++i) {
          const float ref = i == 0 ? 0.0f : fold(w, i);
          ASSERT_TRUE(same_bits(o.x[size_t(i)], ref))
              << "world " << w << " round " << round << " rank " << r << " element " << i << ": "
              << o.x[size_t(i)] << " vs " << ref;
        }
        const int64_t mine = b[size_t(r) + 1] - b[size_t(r)];
        EXPECT_EQ(o.sent.reduce_scatter, (n - mine) * int64_t(sizeof(float)))
            << "world " << w << " rank " << r;
        EXPECT_EQ(o.sent.total(), o.sent.reduce_scatter);
      }
    }
}

TEST(EmuNcclCommunicator, AllGatherDeliversEveryRanksBytesInPlace) {
  const std::map<int, std::vector<int64_t>> bounds = {
      {1, {0, 5}}, {2, {0, 0, 7}}, {3, {0, 3, 4, 13}}, {4, {0, 1, 1, 6, 9}}};
  for (const auto& [w, b] : bounds) {
    const int64_t n = b.back();
    const auto pattern = [](int64_t j) { return static_cast<unsigned char>(37 * j + 11); };
    const auto calls = [&](eco::DeviceCommunicator& c, int r, RankResult& o) {
      std::vector<unsigned char> h(size_t(n), 0xEE);  // others' bytes: stale until gathered
      for (int64_t j = b[size_t(r)]; j < b[size_t(r) + 1]; ++j) h[size_t(j)] = pattern(j);
      ec::DeviceBuffer buf = device_copy(h);
      c.all_gather(buf.get(), b);
      o.bytes = host_copy<unsigned char>(buf, size_t(n));
    };
    const auto res = on_every_rank(w, ec::kNcclRoundElems, calls);
    for (int r = 0; r < w; ++r) {
      for (int64_t j = 0; j < n; ++j)
        ASSERT_EQ(res[size_t(r)].bytes[size_t(j)], pattern(j))
            << "world " << w << " rank " << r << " byte " << j;
      const int64_t mine = b[size_t(r) + 1] - b[size_t(r)];
      EXPECT_EQ(res[size_t(r)].sent.all_gather, mine * (w - 1));
      EXPECT_EQ(res[size_t(r)].sent.total(), res[size_t(r)].sent.all_gather);
    }
  }
}

TEST(EmuNcclCommunicator, BroadcastDeliversTheRootsBytesInPlace) {
  for (int w : {1, 2, 3, 4}) {
    const int64_t n = 13;
    const auto pattern = [](int root, int64_t j) {
      return static_cast<unsigned char>(root * 50 + j);
    };
    const auto calls = [&](eco::DeviceCommunicator& c, int r, RankResult& o) {
      for (int root = 0; root < w; ++root) {
        std::vector<unsigned char> h(size_t(n), 0xEE);  // stale but on the root
        if (r == root)
          for (int64_t j = 0; j < n; ++j) h[size_t(j)] = pattern(root, j);
        ec::DeviceBuffer buf = device_copy(h);
        c.broadcast(buf.get(), n, root);
        c.broadcast(buf.get(), 0, root);  // nothing to move
        const std::vector<unsigned char> got = host_copy<unsigned char>(buf, size_t(n));
        o.bytes.insert(o.bytes.end(), got.begin(), got.end());
      }
    };
    const auto res = on_every_rank(w, ec::kNcclRoundElems, calls);
    for (int r = 0; r < w; ++r) {
      for (int root = 0; root < w; ++root)
        for (int64_t j = 0; j < n; ++j)
          ASSERT_EQ(res[size_t(r)].bytes[size_t(root * n + j)], pattern(root, j))
              << "world " << w << " rank " << r << " root " << root << " byte " << j;
      // MpiCommunicator counts a broadcast's bytes on its root: here once per world > 1.
      EXPECT_EQ(res[size_t(r)].sent.broadcast, w > 1 ? n : 0) << "world " << w << " rank " << r;
      EXPECT_EQ(res[size_t(r)].sent.total(), res[size_t(r)].sent.broadcast);
    }
  }
}

// all_to_all_v's block from rank s to rank d: (s + 2 d + 1) % 5 bytes (uneven, some empty, rank
// 3's to itself too), byte j of it 50 s + 10 d + j (tests/mpi/test_communicator.cpp's blocks,
// which MpiCommunicator delivers, shifted by one so that a world of 1 moves a byte).
int64_t block_bytes(int s, int d) { return (s + 2 * d + 1) % 5; }
unsigned char block_byte(int s, int d, int64_t j) {
  return static_cast<unsigned char>(50 * s + 10 * d + j);
}

TEST(EmuNcclCommunicator, AllToAllVDeliversEveryBlockInRankOrder) {
  for (int w : {1, 2, 3, 4}) {
    const long sends_before = emu::nccl::sends;
    const auto calls = [&](eco::DeviceCommunicator& c, int r, RankResult& o) {
      const size_t ws = static_cast<size_t>(w);
      std::vector<int64_t> send_bytes(ws), recv_bytes(ws);
      std::vector<unsigned char> send;
      for (int q = 0; q < w; ++q) {
        send_bytes[size_t(q)] = block_bytes(r, q);
        recv_bytes[size_t(q)] = block_bytes(q, r);
        for (int64_t j = 0; j < block_bytes(r, q); ++j) send.push_back(block_byte(r, q, j));
      }
      const int64_t total = std::accumulate(recv_bytes.begin(), recv_bytes.end(), int64_t(0));
      send.push_back(0);  // (a world of 1 may have nothing to send: cudaMalloc of 0 bytes)
      ec::DeviceBuffer d_send = device_copy(send);
      // Twice into the same buffer: one exchange leaks nothing into the next. One guard byte.
      for (int round = 0; round < 2; ++round) {
        ec::DeviceBuffer d_recv = device_copy(std::vector<unsigned char>(size_t(total) + 1, 0xEE));
        c.all_to_all_v(d_send.get(), send_bytes, d_recv.get(), recv_bytes);
        const std::vector<unsigned char> got = host_copy<unsigned char>(d_recv, size_t(total) + 1);
        o.bytes.insert(o.bytes.end(), got.begin(), got.end());
      }
      if (w == 1) {  // LocalCommunicator's result on the same blocks
        std::vector<unsigned char> local(size_t(total) + 1, 0xEE);
        eco::make_local_communicator()->all_to_all_v(send.data(), send_bytes, local.data(),
                                                     recv_bytes);
        EXPECT_EQ(std::vector<unsigned char>(o.bytes.begin(), o.bytes.begin() + total + 1), local);
      }
    };
    const auto res = on_every_rank(w, ec::kNcclRoundElems, calls);
    for (int r = 0; r < w; ++r) {
      const std::vector<unsigned char>& got = res[size_t(r)].bytes;
      int64_t total = 0;
      for (int s = 0; s < w; ++s) total += block_bytes(s, r);
      ASSERT_EQ(got.size(), size_t(2 * (total + 1)));
      for (int round = 0; round < 2; ++round) {
        size_t at = size_t(round * (total + 1));
        for (int s = 0; s < w; ++s)
          for (int64_t j = 0; j < block_bytes(s, r); ++j, ++at)
            ASSERT_EQ(got[at], block_byte(s, r, j)) << "world " << w << " rank " << r << " byte "
                                                    << j << " of the block from rank " << s;
        EXPECT_EQ(got[at], 0xEE) << "world " << w << " rank " << r << ": written past the blocks";
      }
      // As MpiCommunicator counts: the bytes of the blocks to the other ranks, per exchange.
      int64_t to_others = 0;
      for (int d = 0; d < w; ++d)
        if (d != r) to_others += block_bytes(r, d);
      EXPECT_EQ(res[size_t(r)].sent.all_to_all, 2 * to_others) << "world " << w << " rank " << r;
      EXPECT_EQ(res[size_t(r)].sent.total(), res[size_t(r)].sent.all_to_all);
    }
    // Empty blocks post nothing: one send per non-empty block to another rank and exchange.
    long nonempty = 0;
    for (int s = 0; s < w; ++s)
      for (int d = 0; d < w; ++d) nonempty += s != d && block_bytes(s, d) > 0;
    EXPECT_EQ(emu::nccl::sends - sends_before, 2 * nonempty) << "world " << w;
  }
}

TEST(EmuNcclCommunicator, AllToAllVRefusesCountsBeforeSendingAnything) {
  const long groups_before = emu::nccl::groups;
  on_every_rank(2, ec::kNcclRoundElems, [&](eco::DeviceCommunicator& c, int r, RankResult&) {
    ec::DeviceBuffer a = device_copy(std::vector<unsigned char>(8, 1));
    ec::DeviceBuffer b = device_copy(std::vector<unsigned char>(8, 2));
    const auto refused = [&](std::vector<int64_t> sb, std::vector<int64_t> rb) {
      EXPECT_THROW(c.all_to_all_v(a.get(), sb, b.get(), rb), eco::Error);
    };
    refused({1, 1, 1}, {1, 1});  // one block per rank
    refused({1, 1}, {1});
    refused({1, -1}, {1, -1});   // negative
    std::vector<int64_t> to_self = {1, 1};
    to_self[size_t(r)] = 2;      // the block to itself: 2 bytes sent, 1 expected
    refused(to_self, {1, 1});
  });
  EXPECT_EQ(emu::nccl::groups, groups_before) << "a refused exchange enqueued a group";
}

TEST(EmuNcclCommunicator, RefusesBoundsThatDoNotCoverTheWorld) {
  on_every_rank(2, ec::kNcclRoundElems, [&](eco::DeviceCommunicator& c, int r, RankResult&) {
    ec::DeviceBuffer x = device_copy(rank_input(r, 4));
    EXPECT_THROW(c.reduce_scatter_sum(x.get<float>(), {0, 4}), eco::Error);      // world + 1
    EXPECT_THROW(c.reduce_scatter_sum(x.get<float>(), {1, 2, 4}), eco::Error);   // from 0
    EXPECT_THROW(c.reduce_scatter_sum(x.get<float>(), {0, 3, 2}), eco::Error);   // decreasing
    EXPECT_THROW(c.all_gather(x.get(), {0, 8}), eco::Error);
    EXPECT_THROW(c.all_reduce_sum(x.get<float>(), -1), eco::Error);
  });
}

}  // namespace
