// The MPI communicator. The deterministic sum is a reduce-scatter by rank-ordered chunks (rank c
// receives chunk c of every rank with MPI_Alltoallv and adds the w pieces in rank order from 0)
// followed by an all-gather of the summed chunks: the traffic of a ring all-reduce, 2 (w - 1) / w
// of the buffer per rank, with the order of the additions fixed by us rather than by MPI.
// The sums receive into one buffer of at most ECO_MPI_BUFFER_BYTES (256 MiB by default) whatever
// the world: they run in rounds of budget / world bytes per rank chunk, so a sum of B bytes takes
// about B / budget rounds at every world size. Each element is added on its own, so where the
// rounds cut changes neither its bits nor the bytes sent over all ranks.
// Byte exchanges (ranges, all_to_all_v) are MPI_Isend / MPI_Irecv pairs in rounds of at most
// 1 GiB per message, so that MPI's int counts never overflow.
#include "dist/mpi_communicator.h"

#include "base/error.h"
#include "core/test_faults.h"

#ifdef ECO_HAVE_MPI
#include <mpi.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <condition_variable>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#define ECO_CHECK_MPI(call)                                                        \
  do {                                                                             \
    if (const int eco_mpi_rc_ = (call); eco_mpi_rc_ != MPI_SUCCESS) {             \
      char eco_mpi_msg_[MPI_MAX_ERROR_STRING];                                     \
      int eco_mpi_len_ = 0;                                                        \
      MPI_Error_string(eco_mpi_rc_, eco_mpi_msg_, &eco_mpi_len_);                  \
      ::eco::runtime_error("{}:{}: {} failed: {}", __FILE__, __LINE__, #call,      \
                           std::string(eco_mpi_msg_, size_t(eco_mpi_len_)));        \
    }                                                                              \
  } while (0)

namespace eco {
namespace {

template <class T>
MPI_Datatype mpi_type();
template <>
MPI_Datatype mpi_type<float>() { return MPI_FLOAT; }
template <>
MPI_Datatype mpi_type<double>() { return MPI_DOUBLE; }

// The sums' receive buffer bound (ECO_MPI_BUFFER_BYTES, bytes): a round of a sum receives
// budget / world bytes from each rank (one element at least).
constexpr int64_t kBufferBytes = int64_t(1) << 28;
constexpr int64_t kMaxBufferBytes = int64_t(1) << 40;
int64_t buffer_bytes() {
  const char* text = std::getenv("ECO_MPI_BUFFER_BYTES");
  if (!text || !*text) return kBufferBytes;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || errno == ERANGE || v < 1 || v > kMaxBufferBytes)
    usage_error("ECO_MPI_BUFFER_BYTES '{}': expected bytes in [1, 2^40] (the sums' receive "
                "buffer per rank)",
                clip_for_message(text));
  return int64_t(v);
}

// The start-up bound (ECO_STARTUP_TIMEOUT_S, seconds; 0: wait forever): MPI_Init and the
// collectives before the config is agreed, which cannot wait under the config's timeout.
constexpr double kStartupTimeoutS = 600;
double startup_timeout_s() {
  const char* text = std::getenv("ECO_STARTUP_TIMEOUT_S");
  if (!text || !*text) return kStartupTimeoutS;
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (*end != '\0' || !std::isfinite(v) || v < 0 || v > 1e7)
    usage_error("ECO_STARTUP_TIMEOUT_S '{}': expected 0 (wait forever) or seconds in (0, 1e7]",
                clip_for_message(text));
  return v;
}

// Ends the process when a collective has waited longer than its phase's bound. The thread makes
// no MPI call: it prints one line and _Exits, and the launcher (mpirun) then ends the other
// ranks. It starts before MPI_Init, which it watches too (the ranks named by the launcher's
// environment until MPI names them). Two threads may be in collectives at once
// (parallel.overlap under expert parallelism: the gradient sums on the worker, the token
// exchange on the main thread): each Scope is watched.
class CollectiveWatchdog {
 public:
  CollectiveWatchdog(int rank, int world) : rank_(rank), world_(world) {
    bound_s_[size_t(RunPhase::Startup)] = startup_timeout_s();
    thread_ = std::thread([this] { watch(); });
  }
  ~CollectiveWatchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  void set_ranks(int rank, int world) {
    const std::lock_guard<std::mutex> lock(mu_);
    rank_ = rank;
    world_ = world;
  }
  // Ends start-up: the steps wait `steps_s`, the other phases max(steps_s, phases_s)
  // (0 in either: forever; a phase's bound never shortens the steps').
  void set_timeouts(double steps_s, double phases_s) {
    const std::lock_guard<std::mutex> lock(mu_);
    const bool longer = steps_s > 0 && phases_s > steps_s;
    const double phase_bound = steps_s > 0 && phases_s > 0 ? std::max(steps_s, phases_s) : 0;
    bound_s_[size_t(RunPhase::Steps)] = steps_s;
    for (RunPhase p : {RunPhase::Load, RunPhase::Checkpoint, RunPhase::Eval, RunPhase::Sample}) {
      bound_s_[size_t(p)] = phase_bound;
      bound_key_[size_t(p)] = longer ? "parallel.phase_timeout_s" : "parallel.timeout_s";
    }
    if (phase_ == RunPhase::Startup) phase_ = RunPhase::Steps;
  }
  RunPhase set_phase(RunPhase p) {
    const std::lock_guard<std::mutex> lock(mu_);
    return std::exchange(phase_, p);
  }
  // Marks the calling collective for its scope.
  class Scope {
   public:
    Scope(CollectiveWatchdog& w, const char* what) : w_(w), what_(what), since_ns_(now_ns()) {
      const std::lock_guard<std::mutex> lock(w_.mu_);
      w_.open_.push_back(this);
    }
    ~Scope() {
      const std::lock_guard<std::mutex> lock(w_.mu_);
      w_.open_.erase(std::find(w_.open_.begin(), w_.open_.end(), this));
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    friend class CollectiveWatchdog;
    CollectiveWatchdog& w_;
    const char* what_;
    int64_t since_ns_;
  };

 private:
  static int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  // What the ranks were doing while the collective waited, for the message.
  static const char* phase_text(RunPhase p) {
    switch (p) {
      case RunPhase::Startup:
        return "during MPI start-up (MPI_Init and the check that every rank runs the same config)";
      case RunPhase::Steps:
        return "in the training steps";
      case RunPhase::Load:
        return "while the ranks read the checkpoint or model.init_from";
      case RunPhase::Checkpoint:
        return "while rank 0 writes a checkpoint";
      case RunPhase::Eval:
        return "during an evaluation";
      case RunPhase::Sample:
        return "during a sample";
    }
    return "";
  }
  void watch() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, std::chrono::milliseconds(200), [this] { return quit_; })) {
      const double bound = bound_s_[size_t(phase_)];
      if (bound <= 0) continue;
      for (const Scope* s : open_) {
        const double waited = double(now_ns() - s->since_ns_) / 1e9;
        if (waited <= bound) continue;
        const std::string who = rank_ < 0 ? std::string("?")
                                          : std::to_string(rank_) + "/" + std::to_string(world_);
        std::fprintf(stderr,
                     "eco-train: error: [rank %s] %s has waited %.0f s for the other ranks "
                     "(%s %g) %s: a rank is stuck or gone; ending the run\n",
                     who.c_str(), s->what_, waited, bound_key_[size_t(phase_)], bound,
                     phase_text(phase_));
        std::fflush(stderr);
        std::_Exit(1);
      }
    }
  }

  static constexpr size_t kPhases = size_t(RunPhase::Sample) + 1;
  int rank_, world_;  // -1 while unknown (under mu_)
  RunPhase phase_ = RunPhase::Startup;
  double bound_s_[kPhases] = {};  // seconds a collective may wait in each phase; 0: forever
  const char* bound_key_[kPhases] = {"ECO_STARTUP_TIMEOUT_S", "parallel.timeout_s",
                                     "parallel.timeout_s",    "parallel.timeout_s",
                                     "parallel.timeout_s",    "parallel.timeout_s"};
  std::vector<const Scope*> open_;  // the collectives waiting now (under mu_)
  std::mutex mu_;
  std::condition_variable cv_;
  bool quit_ = false;
  std::thread thread_;
};

// The root (MPI_COMM_WORLD: initialises and finalises MPI) or a child of split (its own
// MPI_Comm, freed on destruction). A run's communicators share one watchdog: the timeout is the
// run's.
class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(int* argc, char*** argv)
      : comm_(MPI_COMM_WORLD),
        root_(true),
        buffer_bytes_(buffer_bytes()),
        watchdog_(std::make_shared<CollectiveWatchdog>(launcher_rank(), launcher_world())) {
    int provided = 0;
    stall_for_test("mpi_init", launcher_rank());
    // The gradient sums run on a worker thread while the main thread computes
    // (dist/comm_worker.h): SERIALIZED lets one thread at a time call MPI; MULTIPLE lets the
    // main thread exchange tokens (expert parallelism) while the worker sums.
    {
      const CollectiveWatchdog::Scope scope(*watchdog_, "MPI_Init");
      ECO_CHECK_MPI(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
    }
    any_thread_ = provided >= MPI_THREAD_SERIALIZED;
    concurrent_ = provided >= MPI_THREAD_MULTIPLE;
    init_ranks();
    watchdog_->set_ranks(rank_, world_);  // the messages name the world rank
    const CollectiveWatchdog::Scope scope(*watchdog_, "the agreement on ECO_MPI_BUFFER_BYTES");
    agree_on_buffer_bytes();
  }
  MpiCommunicator(MPI_Comm comm, std::shared_ptr<CollectiveWatchdog> watchdog, bool any_thread,
                  bool concurrent, int64_t buffer_bytes)
      : comm_(comm),
        root_(false),
        any_thread_(any_thread),
        concurrent_(concurrent),
        buffer_bytes_(buffer_bytes),
        watchdog_(std::move(watchdog)) {
    init_ranks();
    agree_on_buffer_bytes();
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!root_) {
      if (!finalized) MPI_Comm_free(&comm_);
      return;
    }
    wait_.reset();
    watchdog_.reset();
    if (!finalized) MPI_Finalize();
  }
  int rank() const override { return rank_; }
  int world() const override { return world_; }
  std::string name() const override { return "mpi"; }
  bool any_thread() const override { return any_thread_; }
  bool concurrent() const override { return concurrent_; }
  int64_t receive_buffer_bytes() const { return recv_bytes_; }  // mpi_receive_buffer_bytes
  void set_timeouts(double steps_s, double phases_s) override {
    watchdog_->set_timeouts(steps_s, phases_s);
  }
  RunPhase set_phase(RunPhase p) override { return watchdog_->set_phase(p); }
  void wait_begin(const char* what) override { wait_.emplace(*watchdog_, what); }
  void wait_end() override { wait_.reset(); }

  void all_reduce_sum(float* x, int64_t n) override { ordered_sum(x, n); }
  void all_reduce_sum(double* x, int64_t n) override { ordered_sum(x, n); }
  void all_reduce_sum(int64_t* x, int64_t n) override {  // integer sums: any order is exact
    const CollectiveWatchdog::Scope scope(*watchdog_, "all_reduce_sum (int64)");
    for (int64_t off = 0; off < n; off += INT_MAX) {
      const int c = int(std::min<int64_t>(n - off, INT_MAX));
      ECO_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, x + off, c, MPI_INT64_T, MPI_SUM, comm_));
    }
    bytes_.all_reduce += n * int64_t(sizeof(int64_t));
  }
  void all_reduce_max(double* x, int64_t n) override {
    const CollectiveWatchdog::Scope scope(*watchdog_, "all_reduce_max");
    for (int64_t off = 0; off < n; off += INT_MAX) {
      const int c = int(std::min<int64_t>(n - off, INT_MAX));
      ECO_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, x + off, c, MPI_DOUBLE, MPI_MAX, comm_));
    }
    bytes_.all_reduce += n * int64_t(sizeof(double));
  }
  void reduce_scatter_sum(float* x, const std::vector<int64_t>& bounds) override {
    const CollectiveWatchdog::Scope scope(*watchdog_, "reduce_scatter_sum (the gradients' sum)");
    check_bounds(bounds, world_, bounds.empty() ? 0 : bounds.back(), "reduce_scatter_sum");
    const size_t ws = size_t(world_), me = size_t(rank_);
    const int64_t mine = bounds[me + 1] - bounds[me];
    const int64_t chunk = chunk_elems(sizeof(float));  // the same on every rank
    for (int64_t done = 0, rounds = max_rounds(bounds, chunk), k = 0; k < rounds; ++k) {
      // Round k: the k-th `chunk` elements of each rank's range, into (world, take) floats.
      const int64_t take = std::clamp<int64_t>(mine - done, 0, chunk);
      float* recv = receive_space<float>(take * world_);
      std::vector<MPI_Request> reqs;
      for (int s = 0; s < world_; ++s) {
        if (s == rank_) continue;
        const int64_t b = bounds[size_t(s)] + k * chunk;
        const int64_t send = std::clamp<int64_t>(bounds[size_t(s) + 1] - b, 0, chunk);
        if (take > 0)
          post(reqs, MPI_Irecv(recv + size_t(s) * size_t(take), int(take), MPI_FLOAT, s,
                               kTagReduceScatter, comm_, next(reqs)));
        if (send > 0) {
          post(reqs, MPI_Isend(x + b, int(send), MPI_FLOAT, s, kTagReduceScatter, comm_,
                               next(reqs)));
          bytes_.reduce_scatter += send * int64_t(sizeof(float));
        }
      }
      wait_all(reqs);
      float* out = x + bounds[me] + done;
      for (int64_t i = 0; i < take; ++i) {
        float acc = 0.0f;
        for (size_t s = 0; s < ws; ++s)
          acc += s == me ? out[i] : recv[s * size_t(take) + size_t(i)];
        out[i] = acc;
      }
      done += take;
    }
  }
  void all_gather(void* buf, const std::vector<int64_t>& bounds) override {
    const CollectiveWatchdog::Scope scope(*watchdog_, "all_gather (ranges)");
    exchange_ranges(static_cast<char*>(buf), nullptr, bounds, -1);
  }
  void gather(const void* mine, void* out, const std::vector<int64_t>& bounds,
              int root) override {
    const CollectiveWatchdog::Scope scope(*watchdog_, "gather (ranges)");
    exchange_ranges(static_cast<char*>(out), static_cast<const char*>(mine), bounds, root);
  }
  void all_gather(void* out, const void* in, int64_t bytes) override {
    const CollectiveWatchdog::Scope scope(*watchdog_, "all_gather");
    if (bytes > INT_MAX)
      runtime_error("all_gather of {} bytes per rank: more than MPI's int count", bytes);
    ECO_CHECK_MPI(MPI_Allgather(in, int(bytes), MPI_BYTE, out, int(bytes), MPI_BYTE,
                                comm_));
    bytes_.all_gather += bytes;
  }
  void broadcast(void* data, int64_t bytes, int root) override {
    const CollectiveWatchdog::Scope scope(*watchdog_, "broadcast");
    auto* p = static_cast<char*>(data);
    for (int64_t off = 0; off < bytes; off += INT_MAX) {
      const int c = int(std::min<int64_t>(bytes - off, INT_MAX));
      ECO_CHECK_MPI(MPI_Bcast(p + off, c, MPI_BYTE, root, comm_));
    }
    if (rank_ == root) bytes_.broadcast += bytes;
  }
  void barrier() override {
    const CollectiveWatchdog::Scope scope(*watchdog_, "barrier");
    ECO_CHECK_MPI(MPI_Barrier(comm_));
  }
  [[noreturn]] void abort(int code) override {
    MPI_Abort(MPI_COMM_WORLD, code);  // every process of the run, whichever group this is
    std::_Exit(code);
  }
  std::unique_ptr<Communicator> split(int color, int key) override {
    const CollectiveWatchdog::Scope scope(*watchdog_, "split");
    check_split_color(color);
    const int64_t budget = buffer_bytes();  // refused on every rank alike, before MPI
    MPI_Comm child = MPI_COMM_NULL;
    ECO_CHECK_MPI(MPI_Comm_split(comm_, color, key, &child));
    return std::make_unique<MpiCommunicator>(child, watchdog_, any_thread_, concurrent_, budget);
  }
  void all_to_all_v(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                    const std::vector<int64_t>& recv_bytes) override {
    const CollectiveWatchdog::Scope scope(*watchdog_, "all_to_all_v");
    check_block_bytes(send_bytes, recv_bytes, world_, rank_);
    const size_t ws = size_t(world_), me = size_t(rank_);
    std::vector<int64_t> send_at(ws + 1, 0), recv_at(ws + 1, 0);  // blocks' offsets
    for (size_t r = 0; r < ws; ++r) {
      send_at[r + 1] = send_at[r] + send_bytes[r];
      recv_at[r + 1] = recv_at[r] + recv_bytes[r];
    }
    const auto* in = static_cast<const char*>(send);
    auto* out = static_cast<char*>(recv);
    if (send_bytes[me] > 0)
      std::memcpy(out + recv_at[me], in + send_at[me], size_t(send_bytes[me]));
    // Round k moves the k-th kMaxMessageBytes of every block: the two ranks of a block agree on
    // its rounds (their counts agree), whatever the other blocks' sizes.
    const int64_t rounds = std::max(max_rounds(send_at, kMaxMessageBytes),
                                    max_rounds(recv_at, kMaxMessageBytes));
    for (int64_t k = 0; k < rounds; ++k) {
      std::vector<MPI_Request> reqs;
      for (int p = 0; p < world_; ++p) {
        if (p == rank_) continue;
        if (const auto [off, n] = round_piece(recv_at, size_t(p), k); n > 0)
          post(reqs, MPI_Irecv(out + off, n, MPI_BYTE, p, kTagAllToAll, comm_, next(reqs)));
        if (const auto [off, n] = round_piece(send_at, size_t(p), k); n > 0) {
          post(reqs, MPI_Isend(in + off, n, MPI_BYTE, p, kTagAllToAll, comm_, next(reqs)));
          bytes_.all_to_all += n;
        }
      }
      wait_all(reqs);
    }
  }

 private:
  // x (n) = the rank-order sum, in pieces of chunk_elems x w elements (the last one shorter):
  // chunk c of a piece goes to rank c, which adds the w ranks' copies in rank order.
  template <class T>
  void ordered_sum(T* x, int64_t n) {
    const CollectiveWatchdog::Scope scope(*watchdog_, "all_reduce_sum (the gradients' sum)");
    const int w = world_;
    const size_t ws = static_cast<size_t>(w);
    const int64_t piece_elems = chunk_elems(sizeof(T)) * w;  // at most INT_MAX: int displs
    for (int64_t off = 0; off < n; off += piece_elems) {
      const int64_t m = std::min<int64_t>(n - off, piece_elems);
      T* piece = x + off;
      // Chunk c of the piece: [c m / w, (c + 1) m / w).
      std::vector<int> counts(ws), displs(ws);
      for (int c = 0; c < w; ++c) {
        const int64_t b = m * c / w, e = m * (c + 1) / w;
        counts[size_t(c)] = int(e - b);
        displs[size_t(c)] = int(b);
      }
      const int mine = counts[size_t(rank_)];
      T* recv = receive_space<T>(int64_t(mine) * w);  // (w, mine)
      std::vector<int> rcounts(ws, mine), rdispls(ws);
      for (int r = 0; r < w; ++r) rdispls[size_t(r)] = r * mine;
      ECO_CHECK_MPI(MPI_Alltoallv(piece, counts.data(), displs.data(), mpi_type<T>(), recv,
                                  rcounts.data(), rdispls.data(), mpi_type<T>(), comm_));
      T* out = piece + displs[size_t(rank_)];
      for (int i = 0; i < mine; ++i) {
        T acc = T(0);
        for (int r = 0; r < w; ++r) acc += recv[size_t(r) * size_t(mine) + size_t(i)];
        out[i] = acc;
      }
      ECO_CHECK_MPI(MPI_Allgatherv(MPI_IN_PLACE, 0, mpi_type<T>(), piece, counts.data(),
                                   displs.data(), mpi_type<T>(), comm_));
      // Sent: every other rank's chunks, then this rank's summed chunk to the w - 1 others.
      bytes_.all_reduce += int64_t(sizeof(T)) * ((m - mine) + int64_t(mine) * (w - 1));
    }
  }

  static constexpr int kTagReduceScatter = 41, kTagGather = 42, kTagAllToAll = 43;
  static constexpr int64_t kMaxMessageBytes = int64_t(1) << 30;

  // Elements of `elem` bytes a sum takes from each rank per round: world x them fill at most
  // max(buffer_bytes_, world x elem) bytes and at most INT_MAX elements (MPI's int counts).
  int64_t chunk_elems(size_t elem) const {
    const int64_t fit = std::min<int64_t>(buffer_bytes_ / int64_t(elem), INT_MAX);
    return std::max<int64_t>(1, fit / world_);
  }
  // The receive buffer as n elements of T (float, double): grown to exactly the largest round's
  // need so far, never shrunk.
  template <class T>
  T* receive_space(int64_t n) {
    const int64_t bytes = n * int64_t(sizeof(T));
    if (bytes > recv_bytes_) {
      recv_.reset();  // the old buffer goes before the larger one comes
      recv_ = std::make_unique_for_overwrite<std::byte[]>(size_t(bytes));
      recv_bytes_ = bytes;
    }
    return reinterpret_cast<T*>(recv_.get());
  }

  // Rounds of at most `per_round` elements of each range that cover every range.
  static int64_t max_rounds(const std::vector<int64_t>& bounds, int64_t per_round) {
    int64_t rounds = 0;
    for (size_t r = 0; r + 1 < bounds.size(); ++r)
      rounds = std::max(rounds, (bounds[r + 1] - bounds[r] + per_round - 1) / per_round);
    return rounds;
  }
  // Range r's bytes in round k of max_rounds(bounds, kMaxMessageBytes): (offset, count).
  static std::pair<int64_t, int> round_piece(const std::vector<int64_t>& bounds, size_t r,
                                             int64_t k) {
    const int64_t b = bounds[r] + k * kMaxMessageBytes;
    return {b, int(std::clamp<int64_t>(bounds[r + 1] - b, 0, kMaxMessageBytes))};
  }
  static MPI_Request* next(std::vector<MPI_Request>& reqs) {
    reqs.push_back(MPI_REQUEST_NULL);
    return &reqs.back();
  }
  static void post(std::vector<MPI_Request>&, int rc) { ECO_CHECK_MPI(rc); }
  static void wait_all(std::vector<MPI_Request>& reqs) {
    if (!reqs.empty())
      ECO_CHECK_MPI(MPI_Waitall(int(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE));
  }
  // Every rank's byte range of buf to every other rank (root < 0, in place: `mine` unused) or to
  // root alone: sent from `mine` (this rank's range), received into buf at root (buf is touched
  // only there).
  void exchange_ranges(char* buf, const char* mine, const std::vector<int64_t>& bounds, int root) {
    check_bounds(bounds, world_, bounds.empty() ? 0 : bounds.back(),
                 root < 0 ? "all_gather" : "gather");
    const size_t me = size_t(rank_);
    const int64_t my_begin = bounds[me], my_bytes = bounds[me + 1] - bounds[me];
    if (root < 0) mine = buf + my_begin;
    if (rank_ == root && my_bytes > 0 && buf + my_begin != mine)
      std::memmove(buf + my_begin, mine, size_t(my_bytes));
    for (int64_t k = 0, rounds = max_rounds(bounds, kMaxMessageBytes); k < rounds; ++k) {
      std::vector<MPI_Request> reqs;
      for (int s = 0; s < world_; ++s) {
        if (s == rank_) continue;
        if (root < 0 || rank_ == root) {
          if (const auto [off, n] = round_piece(bounds, size_t(s), k); n > 0)
            post(reqs, MPI_Irecv(buf + off, n, MPI_BYTE, s, kTagGather, comm_,
                                 next(reqs)));
        }
        if (root < 0 || s == root) {
          if (const auto [off, n] = round_piece(bounds, me, k); n > 0) {
            post(reqs, MPI_Isend(mine + (off - my_begin), n, MPI_BYTE, s, kTagGather, comm_,
                                 next(reqs)));
            (root < 0 ? bytes_.all_gather : bytes_.gather) += n;
          }
        }
      }
      wait_all(reqs);
    }
  }

  void init_ranks() {
    ECO_CHECK_MPI(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    ECO_CHECK_MPI(MPI_Comm_rank(comm_, &rank_));
    ECO_CHECK_MPI(MPI_Comm_size(comm_, &world_));
  }
  // The ranks cut the same rounds: each takes the smallest budget any rank was given (not
  // counted in bytes_, which counts the run's collectives).
  void agree_on_buffer_bytes() {
    ECO_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &buffer_bytes_, 1, MPI_INT64_T, MPI_MIN, comm_));
  }

  MPI_Comm comm_;
  const bool root_;  // owns MPI (MPI_COMM_WORLD) rather than a split's MPI_Comm
  bool any_thread_ = false;  // MPI_THREAD_SERIALIZED provided
  bool concurrent_ = false;  // MPI_THREAD_MULTIPLE provided
  int rank_ = 0, world_ = 1;
  int64_t buffer_bytes_;  // the receive buffer's bound (ECO_MPI_BUFFER_BYTES, agreed)
  std::shared_ptr<CollectiveWatchdog> watchdog_;
  std::optional<CollectiveWatchdog::Scope> wait_;  // a WaitGuard's
  // The sums' receive buffer (float and double rounds alike): recv_bytes_ bytes.
  std::unique_ptr<std::byte[]> recv_;
  int64_t recv_bytes_ = 0;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(int* argc, char*** argv) {
  return std::make_unique<MpiCommunicator>(argc, argv);
}

int64_t mpi_receive_buffer_bytes(const Communicator& c) {
  const auto* mpi = dynamic_cast<const MpiCommunicator*>(&c);
  return mpi ? mpi->receive_buffer_bytes() : 0;
}

}  // namespace eco

#else  // no MPI in this build

namespace eco {

std::unique_ptr<Communicator> make_mpi_communicator(int*, char***) {
  usage_error("this eco-train was built without MPI, but an MPI launcher started it (mpirun / "
              "srun); install libopenmpi-dev and rebuild (scripts/build.sh), or run it alone");
}

int64_t mpi_receive_buffer_bytes(const Communicator&) { return 0; }

}  // namespace eco

#endif
