// The NCCL DeviceCommunicator (see nccl_communicator.h and dist/device_communicator.h). NCCL only
// moves data; every sum is ours, so its bits do not depend on NCCL's algorithm or topology:
//  - reduce-scatter: rank r receives its chunk of every other rank (ncclSend / ncclRecv pairs in
//    one group) into a receive buffer of world rows, copies its own chunk into row r, and adds
//    the rows in rank order (fold_rank_order, collectives.cuh): ((0 + x_0) + x_1) + ...;
//  - all-gather: one in-place ncclBroadcast per rank in one group (counts may differ);
//  - all-reduce: a reduce-scatter of equal rank-ordered chunks, then the all-gather of the sums:
//    the traffic of a ring all-reduce, 2 (w - 1) / w of the buffer per rank, as MpiCommunicator;
//  - broadcast: ncclBroadcast in place;
//  - all_to_all_v (expert parallelism's token exchange): one ncclSend / ncclRecv pair per other
//    rank's non-empty block, bytes (ncclUint8), in one group; the block to self a device copy on
//    the stream. NCCL's counts are size_t: no rounds.
// Large buffers go in rounds of at most chunk_ = kNcclRoundElems / world elements per rank chunk,
// so the receive buffer stays at most 256 MiB. (MpiCommunicator at its default
// ECO_MPI_BUFFER_BYTES, 256 MiB, cuts the same chunks and counts the same bytes on each rank;
// at another budget its rounds cut elsewhere: the same sums, and the same bytes over all ranks,
// but a rank's count may differ by a few elements' rounding.) Host code (compiled by the host
// compiler).
#include "kernels/cuda/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <exception>
#include <string>
#include <vector>

#include "base/error.h"
#include "kernels/cuda/collectives.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_buffer.h"

namespace eco::cuda {
namespace {

const char* nccl_result_name(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "ncclSuccess";
    case ncclUnhandledCudaError: return "ncclUnhandledCudaError";
    case ncclSystemError: return "ncclSystemError";
    case ncclInternalError: return "ncclInternalError";
    case ncclInvalidArgument: return "ncclInvalidArgument";
    case ncclInvalidUsage: return "ncclInvalidUsage";
    case ncclRemoteError: return "ncclRemoteError";
    case ncclInProgress: return "ncclInProgress";
    default: return "ncclResult (unknown)";
  }
}

// A failed NCCL call raises eco::Error naming the call, file:line, NCCL's message and its last
// error's detail (ncclGetLastError: its argument is unused).
#define ECO_CHECK_NCCL(call)                                                                   \
  do {                                                                                         \
    const ncclResult_t eco_nccl_rc_ = (call);                                                  \
    if (eco_nccl_rc_ != ncclSuccess)                                                           \
      ::eco::cuda::fail(__FILE__, __LINE__, #call, nccl_result_name(eco_nccl_rc_),             \
                        ncclGetErrorString(eco_nccl_rc_), ncclGetLastError(nullptr));          \
  } while (0)

class NcclCommunicator final : public DeviceCommunicator {
 public:
  NcclCommunicator(Communicator& host, cudaStream_t stream, cudaStream_t side,
                   MemoryLedger& ledger, int64_t round_elems)
      : rank_(host.rank()),
        world_(host.world()),
        chunk_(std::max<int64_t>(1, round_elems / std::max(1, host.world()))),
        compute_(stream),
        side_(side),
        stream_(stream),
        ledger_(ledger) {
    ECO_ASSERT(world_ >= 1 && 0 <= rank_ && rank_ < world_ && round_elems >= 1,
               "NCCL communicator for rank {} of {}, rounds of {} elements", rank_, world_,
               round_elems);
    ncclUniqueId id{};
    if (rank_ == 0) ECO_CHECK_NCCL(ncclGetUniqueId(&id));
    host.broadcast(&id, int64_t(sizeof id), 0);
    ECO_CHECK_NCCL(ncclCommInitRank(&comm_, world_, id, rank_));
  }
  // Unwinding from an error on this rank alone: abort (destroying would wait for the others).
  ~NcclCommunicator() override {
    if (std::uncaught_exceptions() > 0) {
      ncclCommAbort(comm_);
      return;
    }
    cudaStreamSynchronize(compute_);
    if (side_) cudaStreamSynchronize(side_);
    ncclCommDestroy(comm_);
  }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  std::string name() const override { return "nccl"; }
  int rank() const override { return rank_; }
  int world() const override { return world_; }
  void set_lane(Lane lane) override {
    ECO_ASSERT(lane == Lane::Compute || side_,
               "NCCL communicator: the side lane on a backend without a side stream");
    lane_ = lane;
    stream_ = lane == Lane::Side ? side_ : compute_;
  }
  Lane lane() const override { return lane_; }

  void all_reduce_sum(float* x, int64_t n) override {
    ECO_ASSERT(n >= 0 && (x || n == 0), "all_reduce_sum of {} elements at {}", n,
               static_cast<void*>(x));
    const int w = world_;
    std::vector<int64_t> b(size_t(w) + 1), bb(size_t(w) + 1);
    for (int64_t off = 0; off < n; off += chunk_ * w) {
      // The piece's chunk c, [c m / w, (c + 1) m / w): at most chunk_ elements, one round.
      const int64_t m = std::min(n - off, chunk_ * w);
      for (int c = 0; c <= w; ++c) {
        b[size_t(c)] = m * c / w;
        bb[size_t(c)] = b[size_t(c)] * int64_t(sizeof(float));
      }
      bytes_.all_reduce += scatter_and_fold(x + off, b);
      bytes_.all_reduce += gather(reinterpret_cast<char*>(x + off), bb);
    }
  }

  void reduce_scatter_sum(float* x, const std::vector<int64_t>& bounds) override {
    check_bounds(bounds, x, "reduce_scatter_sum");
    bytes_.reduce_scatter += scatter_and_fold(x, bounds);
  }

  void all_gather(void* buf, const std::vector<int64_t>& byte_bounds) override {
    check_bounds(byte_bounds, buf, "all_gather");
    bytes_.all_gather += gather(static_cast<char*>(buf), byte_bounds);
  }

  void broadcast(void* buf, int64_t bytes, int root) override {
    ECO_ASSERT(bytes >= 0 && (buf || bytes == 0) && 0 <= root && root < world_,
               "broadcast of {} bytes at {} from rank {} of {}", bytes, buf, root, world_);
    if (bytes == 0) return;
    ECO_CHECK_NCCL(ncclBroadcast(buf, buf, size_t(bytes), ncclUint8, root, comm_, stream_));
    if (rank_ == root && world_ > 1) bytes_.broadcast += bytes;
  }

  void all_to_all_v(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                    const std::vector<int64_t>& recv_bytes) override {
    check_blocks(send_bytes, recv_bytes);
    const size_t ws = size_t(world_), me = size_t(rank_);
    std::vector<int64_t> send_at(ws + 1, 0), recv_at(ws + 1, 0);  // the blocks' offsets
    for (size_t p = 0; p < ws; ++p) {
      send_at[p + 1] = send_at[p] + send_bytes[p];
      recv_at[p + 1] = recv_at[p] + recv_bytes[p];
    }
    ECO_ASSERT((send || send_at[ws] == 0) && (recv || recv_at[ws] == 0),
               "all_to_all_v of {} bytes from {} into {} bytes at {}", send_at[ws], send,
               recv_at[ws], recv);
    const auto* in = static_cast<const char*>(send);
    auto* out = static_cast<char*>(recv);
    if (send_bytes[me] > 0)
      ECO_CHECK_CUDA(cudaMemcpyAsync(out + recv_at[me], in + send_at[me], size_t(send_bytes[me]),
                                     cudaMemcpyDeviceToDevice, stream_));
    // Both ranks of a pair skip an empty block alike: their counts agree.
    ECO_CHECK_NCCL(ncclGroupStart());
    for (int p = 0; p < world_; ++p) {
      if (p == rank_) continue;
      if (const int64_t n = recv_bytes[size_t(p)]; n > 0)
        ECO_CHECK_NCCL(ncclRecv(out + recv_at[size_t(p)], size_t(n), ncclUint8, p, comm_, stream_));
      if (const int64_t n = send_bytes[size_t(p)]; n > 0) {
        ECO_CHECK_NCCL(ncclSend(in + send_at[size_t(p)], size_t(n), ncclUint8, p, comm_, stream_));
        bytes_.all_to_all += n;
      }
    }
    ECO_CHECK_NCCL(ncclGroupEnd());
  }

 private:
  void check_bounds(const std::vector<int64_t>& b, const void* p, const char* what) const {
    ECO_ASSERT(b.size() == size_t(world_) + 1 && b[0] == 0,
               "{}: {} bounds for a world of {} (world + 1 offsets from 0)", what, b.size(),
               world_);
    for (size_t c = 0; c < size_t(world_); ++c)
      ECO_ASSERT(b[c] <= b[c + 1], "{}: bounds decrease after rank {}: {} > {}", what, c, b[c],
                 b[c + 1]);
    ECO_ASSERT(p || b.back() == 0, "{}: {} elements at a null pointer", what, b.back());
  }

  // What dist's check_block_bytes refuses for the host communicators (this library does not link
  // src/dist): world non-negative counts each way, the block to self the same both ways.
  void check_blocks(const std::vector<int64_t>& send_bytes,
                    const std::vector<int64_t>& recv_bytes) const {
    ECO_ASSERT(send_bytes.size() == size_t(world_) && recv_bytes.size() == size_t(world_),
               "all_to_all_v: {} send and {} receive counts for a world of {} (one block per rank)",
               send_bytes.size(), recv_bytes.size(), world_);
    for (size_t p = 0; p < size_t(world_); ++p)
      ECO_ASSERT(send_bytes[p] >= 0 && recv_bytes[p] >= 0,
                 "all_to_all_v: block {} of {} / {} bytes (a block's bytes must be >= 0)", p,
                 send_bytes[p], recv_bytes[p]);
    ECO_ASSERT(send_bytes[size_t(rank_)] == recv_bytes[size_t(rank_)],
               "all_to_all_v: rank {} sends itself {} bytes but expects {}", rank_,
               send_bytes[size_t(rank_)], recv_bytes[size_t(rank_)]);
  }

  // Rank r's chunk [b[r], b[r+1]) of x = the rank-order sum of every rank's, in rounds of at most
  // chunk_ elements per chunk. Returns the bytes this rank sent.
  int64_t scatter_and_fold(float* x, const std::vector<int64_t>& b) {
    const int w = world_, r = rank_;
    // Elements of rank c's chunk in the round that starts `off` elements into every chunk.
    const auto piece = [&](int c, int64_t off) {
      return std::clamp<int64_t>(b[size_t(c) + 1] - b[size_t(c)] - off, 0, chunk_);
    };
    int64_t longest = 0;
    for (int c = 0; c < w; ++c) longest = std::max(longest, b[size_t(c) + 1] - b[size_t(c)]);
    if (longest == 0) return 0;
    float* recv = recv_buffer(int64_t(w) * piece(r, 0));
    int64_t sent = 0;
    for (int64_t off = 0; off < longest; off += chunk_) {
      const int64_t got = piece(r, off);  // this round's elements of this rank's chunk
      float* mine = x + b[size_t(r)] + off;
      ECO_CHECK_NCCL(ncclGroupStart());
      for (int c = 0; c < w; ++c) {
        if (c == r) continue;
        if (const int64_t k = piece(c, off); k > 0) {
          ECO_CHECK_NCCL(ncclSend(x + b[size_t(c)] + off, size_t(k), ncclFloat32, c, comm_,
                                  stream_));
          sent += k;
        }
        if (got > 0)
          ECO_CHECK_NCCL(ncclRecv(recv + int64_t(c) * got, size_t(got), ncclFloat32, c, comm_,
                                  stream_));
      }
      ECO_CHECK_NCCL(ncclGroupEnd());
      if (got == 0) continue;
      ECO_CHECK_CUDA(cudaMemcpyAsync(recv + int64_t(r) * got, mine, size_t(got) * sizeof(float),
                                     cudaMemcpyDeviceToDevice, stream_));
      ECO_CHECK_CUDA(fold_rank_order(mine, recv, w, got, got, stream_));
    }
    return sent * int64_t(sizeof(float));
  }

  // Rank c's bytes [bb[c], bb[c+1]) of p to every rank. Returns the bytes this rank sent.
  int64_t gather(char* p, const std::vector<int64_t>& bb) {
    ECO_CHECK_NCCL(ncclGroupStart());
    for (int c = 0; c < world_; ++c)
      if (const int64_t k = bb[size_t(c) + 1] - bb[size_t(c)]; k > 0)
        ECO_CHECK_NCCL(ncclBroadcast(p + bb[size_t(c)], p + bb[size_t(c)], size_t(k), ncclInt8, c,
                                     comm_, stream_));
    ECO_CHECK_NCCL(ncclGroupEnd());
    return (bb[size_t(rank_) + 1] - bb[size_t(rank_)]) * (world_ - 1);
  }

  // At least `floats` floats of receive buffer, grown (and recorded in the ledger) as needed.
  float* recv_buffer(int64_t floats) {
    const size_t bytes = size_t(std::max<int64_t>(floats, 1)) * sizeof(float);
    if (bytes > recv_.bytes()) {
      // Queued rounds on either lane may still read the old one.
      ECO_CHECK_CUDA(cudaStreamSynchronize(compute_));
      if (side_) ECO_CHECK_CUDA(cudaStreamSynchronize(side_));
      const size_t old = recv_.bytes();
      recv_ = DeviceBuffer();
      recv_ = DeviceBuffer(bytes);
      ledger_.record(old ? "nccl receive buffer (growth)" : "nccl receive buffer",
                     MemCategory::Workspace, bytes - old);
    }
    return recv_.get<float>();
  }

  const int rank_, world_;
  const int64_t chunk_;  // elements per rank chunk and round
  const cudaStream_t compute_, side_;  // the backend's streams (side_: null when it has none)
  cudaStream_t stream_;                 // the lane's: where the next calls are enqueued
  Lane lane_ = Lane::Compute;
  MemoryLedger& ledger_;
  ncclComm_t comm_ = nullptr;
  DeviceBuffer recv_;  // (world, chunk) floats of the current round
};

}  // namespace

std::unique_ptr<DeviceCommunicator> make_nccl_communicator(Communicator& host, cudaStream_t stream,
                                                           MemoryLedger& ledger,
                                                           int64_t round_elems,
                                                           cudaStream_t side) {
  return std::make_unique<NcclCommunicator>(host, stream, side, ledger, round_elems);
}

}  // namespace eco::cuda
