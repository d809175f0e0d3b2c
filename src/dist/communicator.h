// The processes of a run and the collectives between them (docs/parallelism.md):
// one process (LocalCommunicator) or an MPI job (mpirun / srun; MpiCommunicator). Sums are
// deterministic: every rank gets ((0 + x_0) + x_1) + ... + x_{w-1}, added in rank order on
// each element whatever algorithm the engine would pick, so a run's bits do not depend on timing
// and a data-parallel step equals one rank's gradient accumulation in the same order.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace eco {

// Bytes this rank sent, per collective (the communicator's counters; summary.json reports them).
// reduce_scatter: the device communicator's reduce_scatter_sum (dist/device_communicator.h).
struct CommBytes {
  int64_t all_reduce = 0, reduce_scatter = 0, all_gather = 0, gather = 0, broadcast = 0,
          all_to_all = 0;
  int64_t total() const {
    return all_reduce + reduce_scatter + all_gather + gather + broadcast + all_to_all;
  }
};

// What the ranks of a run are doing together; each phase has its own collective timeout
// (Communicator::set_timeouts). Load, Checkpoint, Eval and Sample are the phases in which a rank
// may wait on work the others know of (every rank reading a checkpoint or model.init_from,
// rank 0 writing a checkpoint).
enum class RunPhase { Startup, Steps, Load, Checkpoint, Eval, Sample };

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  virtual std::string name() const = 0;  // "local", "mpi"

  // x (n) = the sum over ranks in rank order from 0 (above), on every rank.
  virtual void all_reduce_sum(float* x, int64_t n) = 0;
  virtual void all_reduce_sum(double* x, int64_t n) = 0;
  virtual void all_reduce_sum(int64_t* x, int64_t n) = 0;
  // x (n) = the element-wise maximum over ranks.
  virtual void all_reduce_max(double* x, int64_t n) = 0;
  // ZeRO-1's collectives over a buffer cut into one contiguous range per rank: `bounds` holds
  // world + 1 non-decreasing offsets from bounds[0] = 0, rank r's range [bounds[r], bounds[r+1]).
  // reduce_scatter_sum: rank r's range of x = the rank-order sum of every rank's range r (as
  // all_reduce_sum adds it, element by element); the rest of x is unspecified afterwards.
  virtual void reduce_scatter_sum(float* x, const std::vector<int64_t>& bounds) = 0;
  // all_gather (bytes, in place): every rank's range of `buf` reaches every rank.
  virtual void all_gather(void* buf, const std::vector<int64_t>& byte_bounds) = 0;
  // gather (bytes): every rank's range reaches `root`. `mine`: this rank's range (its
  // byte_bounds[r + 1] - byte_bounds[r] bytes); `out` (byte_bounds.back() bytes) receives every
  // range at its offset on `root` and is not touched elsewhere (may be null there), so no other
  // rank needs room for the whole. At `root`, mine may be out + byte_bounds[root] (in place).
  virtual void gather(const void* mine, void* out, const std::vector<int64_t>& byte_bounds,
                      int root) = 0;
  // out (world * bytes) = every rank's `bytes` bytes of `in`, in rank order.
  virtual void all_gather(void* out, const void* in, int64_t bytes) = 0;
  // `bytes` of data from `root` to every rank.
  virtual void broadcast(void* data, int64_t bytes, int root) = 0;
  // Expert parallelism's token exchange (bytes). `send` holds world blocks packed in rank order,
  // block d (send_bytes[d] bytes) for rank d; `recv` (not overlapping `send`) receives world
  // blocks packed in rank order, block s (recv_bytes[s] bytes) from rank s. The counts must
  // agree pairwise (send_bytes[d] on rank s == recv_bytes[s] on rank d; the caller exchanges
  // them first, e.g. with all_gather); blocks may be empty. Vectors that are not world
  // non-negative counts, or a block to self whose two counts differ, are refused (runtime
  // error) before anything is sent.
  virtual void all_to_all_v(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                            const std::vector<int64_t>& recv_bytes) = 0;
  virtual void barrier() = 0;
  // Whether a thread other than the one that created the communicator may call its collectives
  // (one thread at a time: dist/comm_worker.h). MPI: when the library provides
  // MPI_THREAD_SERIALIZED.
  virtual bool any_thread() const { return true; }
  // Whether two threads may call collectives at once, each on its own communicator of the run
  // (this one and a split of it): MPI when the library provides MPI_THREAD_MULTIPLE.
  virtual bool concurrent() const { return true; }
  // Ends every process of the run with `code` (a rank that failed alone must not leave the
  // others waiting in a collective). Does not return.
  [[noreturn]] virtual void abort(int code) = 0;

  // Collective over this communicator (every rank calls it): the ranks that pass the same
  // `color` (>= 0) form a new communicator, ranked by `key`, ties by their rank here. The child
  // has its own byte counters and the same timeout (MPI: one watchdog for the run); destroy it
  // before its parent. Groups of world = dp x ep, rank r = d * ep + e (an expert-parallel group
  // is ep consecutive ranks, so it stays on one node when ep divides the GPUs per node):
  //   expert-parallel group d:       split(r / ep, r % ep)  ranks d ep .. d ep + ep - 1, rank e
  //   expert-data-parallel group e:  split(r % ep, r / ep)  ranks e, e + ep, e + 2 ep .., rank d
  // (the second holds the ranks with the same experts; expert gradients are summed over it).
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;

  const CommBytes& bytes_sent() const { return bytes_; }
  // A collective waiting longer than its phase's bound for the other ranks ends this process
  // with exit code 1 and a line naming the collective, the phase and the bound (the launcher
  // then ends the others). Until set_timeouts, the phase is start-up (MPI: MPI_Init and the
  // collectives before the config is agreed, bounded by ECO_STARTUP_TIMEOUT_S); set_timeouts
  // starts the training steps (parallel.timeout_s: `steps_s`) and gives the phases in which
  // ranks wait on a known piece of work (load, checkpoint, eval, sample:
  // parallel.phase_timeout_s, never less than steps_s)
  // `phases_s`. 0: wait forever (the default of a communicator never given bounds).
  virtual void set_timeouts(double /*steps_s*/, double /*phases_s*/) {}
  // What the ranks are doing (the run's phase, for the timeout); returns the phase it replaces.
  virtual RunPhase set_phase(RunPhase p) { return std::exchange(phase_, p); }
  // The run is in `p` while a PhaseGuard lives (every rank opens the same guards).
  class PhaseGuard {
   public:
    PhaseGuard(Communicator& c, RunPhase p) : c_(c), before_(c.set_phase(p)) {}
    ~PhaseGuard() { c_.set_phase(before_); }
    PhaseGuard(const PhaseGuard&) = delete;
    PhaseGuard& operator=(const PhaseGuard&) = delete;

   private:
    Communicator& c_;
    RunPhase before_;
  };
  // A wait on the other ranks outside this communicator (a device collective's synchronisation:
  // NCCL has no timeout of its own) falls under the same timeout while a WaitGuard lives.
  class WaitGuard {
   public:
    WaitGuard(Communicator& c, const char* what) : c_(c) { c_.wait_begin(what); }
    ~WaitGuard() { c_.wait_end(); }
    WaitGuard(const WaitGuard&) = delete;
    WaitGuard& operator=(const WaitGuard&) = delete;

   private:
    Communicator& c_;
  };

 protected:
  CommBytes bytes_;
  RunPhase phase_ = RunPhase::Startup;
  virtual void wait_begin(const char* /*what*/) {}
  virtual void wait_end() {}
};

// One process: rank 0 of 1; every collective is the identity (sums start from 0 as above).
std::unique_ptr<Communicator> make_local_communicator();
// Refuses (runtime error naming `what`) bounds that are not world + 1 non-decreasing offsets
// from 0 to n.
void check_bounds(const std::vector<int64_t>& bounds, int world, int64_t n, const char* what);
// bounds (world + 1 non-decreasing offsets) cut to the segment [begin, end), relative to begin:
// each rank's part of the segment (ZeRO-1's bounds over one of several segments of a buffer).
std::vector<int64_t> clamp_bounds(const std::vector<int64_t>& bounds, int64_t begin, int64_t end);
// Refuses (runtime error naming the problem) all_to_all_v's counts that are not world
// non-negative entries in each vector with the same count for the block to self (`rank`).
void check_block_bytes(const std::vector<int64_t>& send_bytes,
                       const std::vector<int64_t>& recv_bytes, int world, int rank);
// Refuses (runtime error) a negative split color.
void check_split_color(int color);
// The run's communicator: MPI when a launcher started this process (mpirun, srun: its
// environment names a world), else one process. A launched process in a build without MPI
// is refused with an error saying so.
std::unique_ptr<Communicator> make_communicator(int* argc, char*** argv);
// True when the environment says an MPI launcher started this process.
bool launched_by_mpi();
// This process's rank and the world's size as the launcher's environment gives them (before
// MPI_Init), -1 where it does not.
int launcher_rank();
int launcher_world();
// The ranks an MPI launcher started on this host (its environment), 1 without one.
int local_ranks();

}  // namespace eco
