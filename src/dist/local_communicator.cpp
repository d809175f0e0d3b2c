// One process: the collectives of a world of 1, and the choice between it and MPI.
#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

#include "base/error.h"
#include "dist/communicator.h"
#include "dist/mpi_communicator.h"

namespace eco {
namespace {

// x = 0 + x in each element: the rank-order sum of one rank (+0 for a -0, as in every world).
template <class T>
void sum_from_zero(T* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = T(0) + x[i];
}

class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world() const override { return 1; }
  std::string name() const override { return "local"; }
  void all_reduce_sum(float* x, int64_t n) override { sum_from_zero(x, n); }
  void all_reduce_sum(double* x, int64_t n) override { sum_from_zero(x, n); }
  void all_reduce_sum(int64_t*, int64_t) override {}
  void all_reduce_max(double*, int64_t) override {}
  void reduce_scatter_sum(float* x, const std::vector<int64_t>& bounds) override {
    check_bounds(bounds, 1, bounds.empty() ? 0 : bounds.back(), "reduce_scatter_sum");
    sum_from_zero(x, bounds.back());
  }
  void all_gather(void*, const std::vector<int64_t>& bounds) override {
    check_bounds(bounds, 1, bounds.empty() ? 0 : bounds.back(), "all_gather");
  }
  void gather(const void* mine, void* out, const std::vector<int64_t>& bounds, int) override {
    check_bounds(bounds, 1, bounds.empty() ? 0 : bounds.back(), "gather");
    if (bounds.back() > 0 && out != mine) std::memmove(out, mine, size_t(bounds.back()));
  }
  void all_gather(void* out, const void* in, int64_t bytes) override {
    if (bytes > 0 && out != in) std::memmove(out, in, size_t(bytes));
  }
  void broadcast(void*, int64_t, int) override {}
  void all_to_all_v(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                    const std::vector<int64_t>& recv_bytes) override {
    check_block_bytes(send_bytes, recv_bytes, 1, 0);
    if (send_bytes[0] > 0 && recv != send) std::memmove(recv, send, size_t(send_bytes[0]));
  }
  void barrier() override {}
  [[noreturn]] void abort(int code) override { std::_Exit(code); }
  std::unique_ptr<Communicator> split(int color, int) override {
    check_split_color(color);
    return std::make_unique<LocalCommunicator>();
  }
};

}  // namespace

std::unique_ptr<Communicator> make_local_communicator() {
  return std::make_unique<LocalCommunicator>();
}

void check_bounds(const std::vector<int64_t>& bounds, int world, int64_t n, const char* what) {
  bool ok = bounds.size() == size_t(world) + 1 && bounds.front() == 0 && bounds.back() == n;
  for (size_t r = 0; ok && r + 1 < bounds.size(); ++r) ok = bounds[r] <= bounds[r + 1];
  if (!ok)
    runtime_error("{}: {} range bounds for a world of {} over {} elements are not {} "
                  "non-decreasing offsets from 0 to {}",
                  what, bounds.size(), world, n, world + 1, n);
}

std::vector<int64_t> clamp_bounds(const std::vector<int64_t>& bounds, int64_t begin, int64_t end) {
  std::vector<int64_t> b(bounds.size());
  for (size_t r = 0; r < b.size(); ++r) b[r] = std::clamp(bounds[r], begin, end) - begin;
  return b;
}

void check_block_bytes(const std::vector<int64_t>& send_bytes,
                       const std::vector<int64_t>& recv_bytes, int world, int rank) {
  const auto check = [&](const std::vector<int64_t>& counts, const char* name) {
    if (counts.size() != size_t(world))
      runtime_error("all_to_all_v: {} has {} entries for a world of {} (one block per rank)", name,
                    counts.size(), world);
    for (size_t r = 0; r < counts.size(); ++r)
      if (counts[r] < 0)
        runtime_error("all_to_all_v: {}[{}] is {} (a block's bytes must be >= 0)", name, r,
                      counts[r]);
  };
  check(send_bytes, "send_bytes");
  check(recv_bytes, "recv_bytes");
  const size_t me = size_t(rank);
  if (send_bytes[me] != recv_bytes[me])
    runtime_error("all_to_all_v: rank {} sends itself {} bytes but expects {} (send_bytes[{}] "
                  "!= recv_bytes[{}])",
                  rank, send_bytes[me], recv_bytes[me], rank, rank);
}

void check_split_color(int color) {
  if (color < 0)
    runtime_error("split: color {} is negative (every rank joins a group: colors are >= 0)",
                  color);
}

int local_ranks() {
  // OpenMPI's mpirun, MPICH / Intel MPI, Slurm's srun.
  for (const char* v : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"})
    if (const char* s = std::getenv(v)) {
      const int n = std::atoi(s);
      if (n > 0) return n;
    }
  return 1;
}

namespace {
// The first of the launcher's variables that holds a number >= 0, else -1.
int launcher_number(std::initializer_list<const char*> vars) {
  for (const char* v : vars)
    if (const char* s = std::getenv(v); s && *s) {
      char* end = nullptr;
      const long n = std::strtol(s, &end, 10);
      if (*end == '\0' && n >= 0 && n <= INT_MAX) return int(n);
    }
  return -1;
}
}  // namespace

int launcher_rank() {
  return launcher_number({"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"});
}
int launcher_world() {
  return launcher_number({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"});
}

bool launched_by_mpi() {
  // OpenMPI's mpirun, PMI (MPICH, Slurm's srun --mpi=pmi2) and PMIx (srun --mpi=pmix).
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(v)) return true;
  return false;
}

std::unique_ptr<Communicator> make_communicator(int* argc, char*** argv) {
  if (!launched_by_mpi()) return make_local_communicator();
  return make_mpi_communicator(argc, argv);
}

}  // namespace eco
