// The host communicator of tests/emu/backend's multi-rank tests: the ranks are emu::nccl's rank
// threads (shim/nccl.h, one running at a time), and a group's collectives meet on a GroupBoard.
// It implements what those tests ask of it: all_gather, all_to_all_v, and broadcast (the NCCL
// unique id); anything else aborts, naming the test's mistake.
#pragma once
#include <nccl.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dist/communicator.h"

namespace eco {

// The collectives of one group so far: call k -> each rank's bytes (and all_to_all_v's counts).
struct GroupBoard {
  struct Call {
    std::vector<std::vector<unsigned char>> data;
    std::vector<std::vector<int64_t>> counts;
    int posted = 0;
  };
  std::map<int64_t, Call> calls;
};

class ThreadGroup final : public Communicator {
 public:
  ThreadGroup(int rank, int world, GroupBoard& board) : rank_(rank), world_(world), board_(board) {}
  int rank() const override { return rank_; }
  int world() const override { return world_; }
  std::string name() const override { return "threads"; }

  void broadcast(void* data, int64_t bytes, int root) override {
    const GroupBoard::Call& c = post(rank_ == root ? data : nullptr, rank_ == root ? bytes : 0, {});
    if (rank_ != root) std::memcpy(data, c.data[size_t(root)].data(), size_t(bytes));
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
  void all_reduce_sum(float*, int64_t) override { unused(); }
  void all_reduce_sum(double*, int64_t) override { unused(); }
  void all_reduce_sum(int64_t*, int64_t) override { unused(); }
  void all_reduce_max(double*, int64_t) override { unused(); }
  void reduce_scatter_sum(float*, const std::vector<int64_t>&) override { unused(); }
  void all_gather(void*, const std::vector<int64_t>&) override { unused(); }
  void gather(void*, const std::vector<int64_t>&, int) override { unused(); }
  std::unique_ptr<Communicator> split(int, int) override { unused(); }
  void barrier() override { unused(); }
  [[noreturn]] void abort(int) override { unused(); }

  long all_gathers = 0, all_to_alls = 0;

 private:
  [[noreturn]] static void unused() { emu::nccl::fail("the model asked the group for more"); }
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

}  // namespace eco
