// The NCCL subset kernels/cuda/nccl_communicator.cpp uses, emulated for tests/emu: the ranks of a
// test are host threads of this process (emu::nccl::run_ranks), each with its own emulated
// device memory, and one rank runs at a time (the emulator is not thread-safe): a rank gives the
// others their turn only while it waits for a message. Semantics as NCCL documents them
// (docs.nvidia.com/deeplearning/nccl: ncclGroupStart / End, point-to-point, ncclBroadcast):
//  - ncclCommInitRank joins the world named by the unique id and waits until all nranks joined;
//  - operations between ncclGroupStart and ncclGroupEnd run at ncclGroupEnd (alone: at once);
//    every send and every broadcast's root data is posted first, then each receive takes the
//    next message from its peer, so a group of sends and receives in any order completes;
//  - messages between two ranks match in the order they were posted, point-to-point and
//    collectives apart; a message whose size differs from its receive's aborts (NCCL would hang
//    or corrupt), and so does a buffer outside cudaMalloc'd memory or a receive that waits 30 s;
//  - ncclCommDestroy with undelivered messages for the rank aborts.
// Streams (cuda_runtime.h, emu_streams.h): a group whose operations are all on one stream is work
// on that stream: at ncclGroupEnd when the stream is not deferred; on a deferred stream queued as
// one item, run (posts, then receives waiting for the peers, the other ranks having their turn
// meanwhile) when the rank's host thread makes the queue run. So messages are posted, and match,
// in the order the ranks' queues run. A group over several streams runs at ncclGroupEnd, after
// those streams' queues.
#pragma once
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "cuda_runtime.h"

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclNumResults = 8
} ncclResult_t;

typedef enum {
  ncclInt8 = 0, ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2, ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6, ncclHalf = 6,
  ncclFloat32 = 7, ncclFloat = 7,
  ncclFloat64 = 8, ncclDouble = 8,
  ncclBfloat16 = 9
} ncclDataType_t;

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

namespace emu::nccl {

// The rank lock: held by the running rank, released only while it waits.
inline std::mutex rank_lock;
inline std::condition_variable changed;
inline thread_local std::unique_lock<std::mutex>* held = nullptr;

[[noreturn]] inline void fail(const std::string& what) {
  std::fprintf(stderr, "EMU NCCL ERROR: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// Waits, giving the other ranks their turn, until pred() holds; aborts after 30 s.
template <class Pred>
void wait_until(Pred pred, const std::string& what) {
  if (!held) fail(what + ": called outside emu::nccl::run_ranks");
  if (!changed.wait_for(*held, std::chrono::seconds(30), pred)) fail(what + ": waited 30 s");
}
inline void notify() { changed.notify_all(); }

// Runs body(rank) for rank 0 .. world - 1, each on its own host thread, one at a time (above).
// An exception thrown by a rank's body is kept in errors[rank] (a message).
template <class F>
void run_ranks(int world, F body, std::vector<std::string>* errors = nullptr) {
  if (errors) errors->assign(size_t(world), "");
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      std::unique_lock<std::mutex> lock(rank_lock);
      held = &lock;
      try {
        body(r);
      } catch (const std::exception& e) {
        if (!errors) fail(std::string("rank threw: ") + e.what());
        (*errors)[size_t(r)] = e.what();
      }
      held = nullptr;
    });
  for (auto& t : threads) t.join();
}

struct World {
  int size = 0, joined = 0, alive = 0;
  std::vector<bool> taken;
  // (from, to, channel: 0 point-to-point, 1 collectives) -> messages in posting order
  std::map<std::tuple<int, int, int>, std::deque<std::vector<unsigned char>>> mail;
};
inline std::map<std::string, std::shared_ptr<World>> worlds;
inline long next_id = 0;
// Counters the tests read (under the rank lock).
inline long comms_alive = 0, groups = 0, sends = 0, recvs = 0, broadcasts = 0;

inline size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
  }
}

// The whole of [p, p + bytes) lies in one cudaMalloc allocation.
inline void check_device(const void* p, size_t bytes, const char* what) {
  const auto [start, size] = emu::allocation_of(p);
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  if (!start || a + bytes > start + size)
    fail(std::string(what) + ": " + std::to_string(bytes) +
         " bytes outside cudaMalloc'd device memory");
}

enum class OpKind { Send, Recv, Broadcast };
struct Op {
  OpKind kind;
  const void* src;
  void* dst;
  size_t bytes;
  int peer;  // Send / Recv: the other rank; Broadcast: the root
  cudaStream_t stream;
};

}  // namespace emu::nccl

struct ncclComm {
  std::shared_ptr<emu::nccl::World> world;
  int rank = 0;
};
typedef struct ncclComm* ncclComm_t;

namespace emu::nccl {
inline thread_local int group_depth = 0;
using Group = std::vector<std::pair<ncclComm_t, Op>>;
inline thread_local Group pending;

// Runs the operations of a group: posts, then receives (waiting for the peers).
inline void run_group(const Group& ops) {
  for (auto& [c, op] : ops) {  // post
    World& w = *c->world;
    if (op.kind == OpKind::Send) {
      const auto* p = static_cast<const unsigned char*>(op.src);
      w.mail[{c->rank, op.peer, 0}].emplace_back(p, p + op.bytes);
    } else if (op.kind == OpKind::Broadcast && op.peer == c->rank) {
      const auto* p = static_cast<const unsigned char*>(op.src);
      for (int to = 0; to < w.size; ++to)
        if (to != c->rank) w.mail[{c->rank, to, 1}].emplace_back(p, p + op.bytes);
      if (op.dst != op.src) std::memcpy(op.dst, op.src, op.bytes);
    }
  }
  notify();
  for (auto& [c, op] : ops) {  // receive
    const bool p2p = op.kind == OpKind::Recv;
    if (!p2p && (op.kind != OpKind::Broadcast || op.peer == c->rank)) continue;
    auto& box = c->world->mail[{op.peer, c->rank, p2p ? 0 : 1}];
    const std::string what = "rank " + std::to_string(c->rank) + " receiving " +
                             std::to_string(op.bytes) + " bytes from rank " +
                             std::to_string(op.peer) + (p2p ? " (ncclRecv)" : " (ncclBroadcast)");
    wait_until([&] { return !box.empty(); }, what);
    std::vector<unsigned char> m = std::move(box.front());
    box.pop_front();
    if (m.size() != op.bytes) fail(what + ": the peer sent " + std::to_string(m.size()));
    if (op.bytes) std::memcpy(op.dst, m.data(), op.bytes);
  }
}

// A group ends (or a lone operation is called): work on its stream, queued as one item on a
// deferred stream. A group over several streams runs at once, after the deferred queues among
// them (and, with the legacy stream among them, every deferred queue of the thread).
inline void end_group() {
  ++groups;
  Group ops;
  ops.swap(pending);
  if (ops.empty()) return;
  const cudaStream_t s = ops.front().second.stream;
  if (std::all_of(ops.begin(), ops.end(), [s](const auto& o) { return o.second.stream == s; })) {
    emu::on_stream(s, [ops = std::move(ops)] { run_group(ops); });
    return;
  }
  for (const auto& o : ops) cudaStreamSynchronize(o.second.stream);
  run_group(ops);
}

// The rank's communicator goes; the world with the last one.
inline void leave(ncclComm_t comm) {
  if (--comm->world->alive == 0)
    for (auto it = worlds.begin(); it != worlds.end();)
      it = it->second == comm->world ? worlds.erase(it) : std::next(it);
  --comms_alive;
  delete comm;
}

inline ncclResult_t enqueue(ncclComm_t comm, Op op, const char* what) {
  if (!comm) return ncclInvalidArgument;
  if (op.peer < 0 || op.peer >= comm->world->size) return ncclInvalidArgument;
  if (op.bytes) {
    if (op.src) check_device(op.src, op.bytes, what);
    if (op.dst) check_device(op.dst, op.bytes, what);
  }
  pending.emplace_back(comm, op);
  if (group_depth == 0) end_group();
  return ncclSuccess;
}
}  // namespace emu::nccl

inline const char* ncclGetErrorString(ncclResult_t r) {
  return r == ncclSuccess ? "no error" : "emulated NCCL error";
}
inline const char* ncclGetLastError(ncclComm_t) { return ""; }

inline ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  std::memset(id, 0, sizeof *id);
  std::snprintf(id->internal, sizeof id->internal, "emu-nccl-%ld", ++emu::nccl::next_id);
  return ncclSuccess;
}

inline ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  using namespace emu::nccl;
  if (nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  const std::string key(id.internal, strnlen(id.internal, sizeof id.internal));
  std::shared_ptr<World>& w = worlds[key];
  if (!w) {
    w = std::make_shared<World>();
    w->size = nranks;
    w->taken.assign(size_t(nranks), false);
  }
  if (w->size != nranks || w->taken[size_t(rank)]) return ncclInvalidUsage;
  w->taken[size_t(rank)] = true;
  ++w->joined;
  ++w->alive;
  ++comms_alive;
  notify();
  const std::shared_ptr<World> world = w;
  wait_until([&] { return world->joined == world->size; },
             "ncclCommInitRank of rank " + std::to_string(rank) + " (id '" + key +
                 "'): the other ranks never joined");
  *comm = new ncclComm{world, rank};
  return ncclSuccess;
}

inline ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  using namespace emu::nccl;
  if (!comm) return ncclInvalidArgument;
  for (const auto& [key, box] : comm->world->mail)
    if (std::get<1>(key) == comm->rank && !box.empty())
      fail("ncclCommDestroy of rank " + std::to_string(comm->rank) + ": " +
           std::to_string(box.size()) + " message(s) from rank " +
           std::to_string(std::get<0>(key)) + " never received");
  leave(comm);
  return ncclSuccess;
}
inline ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (!comm) return ncclInvalidArgument;
  emu::nccl::leave(comm);
  return ncclSuccess;
}

inline ncclResult_t ncclGroupStart() {
  ++emu::nccl::group_depth;
  return ncclSuccess;
}
inline ncclResult_t ncclGroupEnd() {
  using namespace emu::nccl;
  if (group_depth == 0) return ncclInvalidUsage;
  if (--group_depth == 0) end_group();
  return ncclSuccess;
}

inline ncclResult_t ncclSend(const void* buf, size_t count, ncclDataType_t t, int peer,
                             ncclComm_t comm, cudaStream_t s) {
  ++emu::nccl::sends;
  return emu::nccl::enqueue(
      comm, {emu::nccl::OpKind::Send, buf, nullptr, count * emu::nccl::type_size(t), peer, s},
      "ncclSend");
}
inline ncclResult_t ncclRecv(void* buf, size_t count, ncclDataType_t t, int peer,
                             ncclComm_t comm, cudaStream_t s) {
  ++emu::nccl::recvs;
  return emu::nccl::enqueue(
      comm, {emu::nccl::OpKind::Recv, nullptr, buf, count * emu::nccl::type_size(t), peer, s},
      "ncclRecv");
}
// sendbuff is read on the root only; sendbuff == recvbuff is in place.
inline ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                  ncclDataType_t t, int root, ncclComm_t comm, cudaStream_t s) {
  ++emu::nccl::broadcasts;
  const bool is_root = comm && comm->rank == root;
  return emu::nccl::enqueue(comm,
                            {emu::nccl::OpKind::Broadcast, is_root ? sendbuff : nullptr, recvbuff,
                             count * emu::nccl::type_size(t), root, s},
                            "ncclBroadcast");
}
