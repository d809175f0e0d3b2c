// The host communicator of tests/emu/backend's multi-rank tests: the ranks are emu::nccl's rank
// threads (shim/nccl.h, one running at a time), and a group's collectives meet on a GroupBoard
// (every rank's bytes of a call kept, in memory, for the test's life: tiny models only). Every
// collective of dist/communicator.h, with MpiCommunicator's results: sums in rank order from 0,
// split groups ranked by key then rank; the byte counters approximately (tests do not compare
// them). One thread per rank calls it (any_thread() false: the trainer uses no worker).
#pragma once
#include <gtest/gtest.h>
#include <nccl.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dist/communicator.h"

namespace eco {

// The collectives of one group so far: call k -> each rank's bytes (and all_to_all_v's counts,
// split's color and key); the groups split off it, by (call, color).
struct GroupBoard {
  struct Call {
    std::vector<std::vector<unsigned char>> data;
    std::vector<std::vector<int64_t>> counts;
    int posted = 0;
  };
  std::map<int64_t, Call> calls;
  std::map<std::pair<int64_t, int>, std::unique_ptr<GroupBoard>> children;
};

class ThreadGroup final : public Communicator {
 public:
  ThreadGroup(int rank, int world, GroupBoard& board) : rank_(rank), world_(world), board_(board) {}
  int rank() const override { return rank_; }
  int world() const override { return world_; }
  std::string name() const override { return "threads"; }
  // The ranks take turns on the emulator (shim/nccl.h): only the rank's own thread may call.
  bool any_thread() const override { return false; }
  bool concurrent() const override { return false; }

  void broadcast(void* data, int64_t bytes, int root) override {
    ++broadcasts;
    const GroupBoard::Call& c = post(rank_ == root ? data : nullptr, rank_ == root ? bytes : 0, {});
    if (rank_ != root) std::memcpy(data, c.data[size_t(root)].data(), size_t(bytes));
    if (rank_ == root && world_ > 1) bytes_.broadcast += bytes;
  }
  void all_gather(void* out, const void* in, int64_t bytes) override {
    const GroupBoard::Call& c = post(in, bytes, {});
    for (int q = 0; q < world_; ++q)
      std::memcpy(static_cast<char*>(out) + q * bytes, c.data[size_t(q)].data(), size_t(bytes));
    bytes_.all_gather += bytes;
    ++all_gathers;
  }
  void all_to_all_v(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                    const std::vector<int64_t>& recv_bytes) override {
    check_block_bytes(send_bytes, recv_bytes, world_, rank_);
    int64_t total = 0;
    for (int64_t b : send_bytes) total += b;
    const GroupBoard::Call& c = post(send, total, send_bytes);
    auto* out = static_cast<char*>(recv);
    for (int s = 0; s < world_; ++s) {  // rank s's block for this rank, after its blocks before
      const std::vector<int64_t>& sb = c.counts[size_t(s)];
      int64_t at = 0;
      for (int d = 0; d < rank_; ++d) at += sb[size_t(d)];
      if (sb[size_t(rank_)] != recv_bytes[size_t(s)])
        emu::nccl::fail("all_to_all_v: counts disagree between ranks");
      std::memcpy(out, c.data[size_t(s)].data() + at, size_t(recv_bytes[size_t(s)]));
      out += recv_bytes[size_t(s)];
      if (s != rank_) bytes_.all_to_all += send_bytes[size_t(s)];
    }
    ++all_to_alls;
  }
  // Sums in rank order from zero, element by element: ((0 + x_0) + x_1) + ..., as
  // MpiCommunicator adds them.
  void all_reduce_sum(float* x, int64_t n) override { all_reduce(x, n, Sum{}); }
  void all_reduce_sum(double* x, int64_t n) override { all_reduce(x, n, Sum{}); }
  void all_reduce_sum(int64_t* x, int64_t n) override { all_reduce(x, n, Sum{}); }
  void all_reduce_max(double* x, int64_t n) override { all_reduce(x, n, Max{}); }
  void reduce_scatter_sum(float* x, const std::vector<int64_t>& bounds) override {
    check_bounds(bounds, world_, bounds.back(), "reduce_scatter_sum");
    const int64_t begin = bounds[size_t(rank_)], end = bounds[size_t(rank_) + 1];
    fold(x, bounds.back(), begin, end, Sum{});
    bytes_.reduce_scatter += (bounds.back() - (end - begin)) * int64_t(sizeof(float));
  }
  void all_gather(void* buf, const std::vector<int64_t>& byte_bounds) override {
    gather_ranges(buf, byte_bounds, -1);
  }
  void gather(const void* mine, void* out, const std::vector<int64_t>& byte_bounds,
              int root) override {
    gather_ranges(out, byte_bounds, root, mine);
  }
  // The ranks passing the same color form a group on a board of its own, ranked by key, then
  // by their rank here.
  std::unique_ptr<Communicator> split(int color, int key) override {
    check_split_color(color);
    const int64_t call = calls_;
    const GroupBoard::Call& c = post(nullptr, 0, {color, key});
    std::vector<std::pair<int64_t, int>> members;  // (key, rank) of this color
    for (int q = 0; q < world_; ++q)
      if (c.counts[size_t(q)][0] == color) members.emplace_back(c.counts[size_t(q)][1], q);
    std::sort(members.begin(), members.end());
    int me = 0;
    while (members[size_t(me)].second != rank_) ++me;
    std::unique_ptr<GroupBoard>& child = board_.children[{call, color}];
    if (!child) child = std::make_unique<GroupBoard>();
    return std::make_unique<ThreadGroup>(me, int(members.size()), *child);
  }
  void barrier() override { post(nullptr, 0, {}); }
  [[noreturn]] void abort(int code) override {
    emu::nccl::fail("rank " + std::to_string(rank_) + " aborted the run, exit code " +
                    std::to_string(code));
  }

  long all_gathers = 0, all_to_alls = 0, broadcasts = 0;

 private:
  struct Sum {  // from zero: ((0 + x_0) + x_1) + ...
    template <class T>
    T operator()(const T* acc, T x) const { return (acc ? *acc : T(0)) + x; }
  };
  struct Max {  // from rank 0's
    template <class T>
    T operator()(const T* acc, T x) const { return acc && *acc > x ? *acc : x; }
  };
  // x[begin, end) = op over the ranks' x (n elements each), in rank order.
  template <class T, class Op>
  void fold(T* x, int64_t n, int64_t begin, int64_t end, Op op) {
    const GroupBoard::Call& c = post(x, n * int64_t(sizeof(T)), {});
    std::vector<T> acc(size_t(end - begin));
    for (int q = 0; q < world_; ++q) {
      const T* xq = reinterpret_cast<const T*>(c.data[size_t(q)].data());
      for (int64_t i = begin; i < end; ++i)
        acc[size_t(i - begin)] = op(q == 0 ? nullptr : &acc[size_t(i - begin)], xq[i]);
    }
    std::copy(acc.begin(), acc.end(), x + begin);
  }
  template <class T, class Op>
  void all_reduce(T* x, int64_t n, Op op) {
    fold(x, n, 0, n, op);
    bytes_.all_reduce += 2 * (n - n / world_) * int64_t(sizeof(T));  // a ring's, about
  }
  // Every rank's range [bb[q], bb[q + 1]) of buf reaches every rank (root < 0) or root.
  // src: this rank's range (root < 0: buf's own, in place); buf written at root (everywhere when
  // root < 0).
  void gather_ranges(void* buf, const std::vector<int64_t>& bb, int root,
                     const void* src = nullptr) {
    check_bounds(bb, world_, bb.back(), root < 0 ? "all_gather" : "gather");
    auto* p = static_cast<unsigned char*>(buf);
    const int64_t mine = bb[size_t(rank_) + 1] - bb[size_t(rank_)];
    if (root < 0) src = p + bb[size_t(rank_)];
    if (rank_ == root && mine > 0 && src != p + bb[size_t(rank_)])
      std::memmove(p + bb[size_t(rank_)], src, size_t(mine));
    const GroupBoard::Call& c = post(src, mine, {});
    if (root < 0 || root == rank_)
      for (int q = 0; q < world_; ++q)
        if (q != rank_ && !c.data[size_t(q)].empty())
          std::memcpy(p + bb[size_t(q)], c.data[size_t(q)].data(), c.data[size_t(q)].size());
    (root < 0 ? bytes_.all_gather : bytes_.gather) += root < 0 ? mine * (world_ - 1)
                                                               : (rank_ == root ? 0 : mine);
  }
  // Posts this rank's bytes for the group's next call and waits for every rank's.
  const GroupBoard::Call& post(const void* p, int64_t bytes, const std::vector<int64_t>& counts) {
    GroupBoard::Call& c = board_.calls[calls_++];
    if (c.data.empty()) {
      c.data.resize(size_t(world_));
      c.counts.resize(size_t(world_));
    }
    const auto* b = static_cast<const unsigned char*>(p);
    if (bytes > 0) c.data[size_t(rank_)].assign(b, b + bytes);
    c.counts[size_t(rank_)] = counts;
    ++c.posted;
    emu::nccl::notify();
    emu::nccl::wait_until([&] { return c.posted == world_; }, "a host collective of the group");
    return c;
  }
  int rank_, world_;
  GroupBoard& board_;
  int64_t calls_ = 0;
};

// body(rank) on `world` rank threads (emu::nccl::run_ranks); a rank that throws fails the test,
// named by `what` and its rank.
template <class F>
void run_rank_threads(int world, const std::string& what, F body) {
  std::vector<std::string> errors;
  emu::nccl::run_ranks(world, body, &errors);
  for (int r = 0; r < world; ++r) EXPECT_EQ(errors[size_t(r)], "") << what << ": rank " << r;
}

}  // namespace eco
