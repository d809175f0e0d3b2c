// The run's parallelism (see parallel_plan.h): the groups, the transports, and the step's
// collectives.
#include "dist/parallel_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

#include "base/error.h"
#include "dist/gpu_sharing.h"

namespace eco {

// The transport the ranks agreed on for device memory (a maximum over the ranks' reasons).
enum class DeviceTransport : int { Nccl = 0, SharedGpu = 1, NoNccl = 2 };

ParallelPlan::ParallelPlan(const Config& cfg, Communicator& world, Backend& be)
    : world_(world), be_(be) {
  const ParallelConfig& par = cfg.parallel;
  ECO_ASSERT(world_.world() == par.world(), "a plan of {} ranks over a world of {}", par.world(),
             world_.world());
  if (world_.world() > 1) world_.set_timeouts(par.timeout_s, par.phase_timeout_s);
  experts_ = expert_placement(par.dp, par.ep, world_.rank(), par.ep_row_factor,
                              cfg.train.grad_accum);
  if (experts_.enabled()) {  // the groups of world = dp x ep, rank r = d ep + e
    const int r = world_.rank();
    ep_comm_ = world_.split(r / par.ep, r % par.ep);
    edp_comm_ = world_.split(r % par.ep, r / par.ep);
    expert_ = std::make_unique<ExpertCollectives>(be_, experts_, ep_comm_.get(), edp_comm_.get());
  }
  if (cfg.device == Device::Cuda && world_.world() > 1) start_device_communicators();
  choose_overlap(par.overlap);
}

ParallelPlan::~ParallelPlan() = default;

void ParallelPlan::start_device_communicators() {
  // NCCL before 2.30 refuses two ranks on one GPU (and 2.30 only with
  // NCCL_MULTI_RANK_GPU_ENABLE=1): then, or without NCCL in this build, the sums go through host
  // memory over MPI. Every rank must choose alike: the reasons are agreed by a maximum.
  const bool shared_gpu = ranks_share_a_gpu(world_, cuda_device_bus_id(), cuda_device_count()) &&
                          !std::getenv("NCCL_MULTI_RANK_GPU_ENABLE");
  double agreed = double(!have_nccl() ? DeviceTransport::NoNccl
                         : shared_gpu ? DeviceTransport::SharedGpu
                                      : DeviceTransport::Nccl);
  world_.all_reduce_max(&agreed, 1);
  const auto transport = DeviceTransport(int(agreed));
  const bool nccl = transport == DeviceTransport::Nccl;
  if (nccl) device_comm_ = make_nccl_communicator(world_, be_);
  const char* host_why = transport == DeviceTransport::NoNccl
                             ? "this build has no NCCL"
                             : "ranks share a GPU, which NCCL refuses before 2.30; "
                               "NCCL_MULTI_RANK_GPU_ENABLE=1 asks for it";
  notes_.push_back(fmt::format(
      "device collectives: {}", nccl ? "NCCL (GPU to GPU, summed in rank order by our fold kernel)"
                                     : fmt::format("through host memory over MPI ({})", host_why)));
  if (!experts_.enabled()) return;
  // Expert parallelism: the two groups GPU to GPU too, built in the same order on every rank
  // (each NCCL init waits for its group); the expert-data-parallel one only when it has peers
  // (dp 1: the expert gradients fold on the device with nothing to receive).
  if (nccl) {
    ep_device_comm_ = make_nccl_communicator(*ep_comm_, be_);
    if (edp_comm_->world() > 1) edp_device_comm_ = make_nccl_communicator(*edp_comm_, be_);
    expert_->use_device_communicators(ep_device_comm_.get(), edp_device_comm_.get());
  }
  notes_.push_back(fmt::format(
      "expert exchange: {}",
      nccl ? "NCCL (tokens by ncclSend / ncclRecv in the expert-parallel group, expert gradients "
             "broadcast in the expert-data-parallel group and folded in rank order on the GPU)"
           : fmt::format("host-staged over MPI ({})", host_why)));
}

void ParallelPlan::choose_overlap(bool requested) {
  overlap_requested_ = requested;
  if (!requested || world_.world() == 1) return;
  // Every rank must sum the same ranges in the same order: overlap only if all can. Host
  // memory: a worker thread calls the (MPI) communicator, and under expert parallelism the
  // main thread's token exchanges run meanwhile (MPI_THREAD_MULTIPLE); a GPU: NCCL on the
  // side stream (not beside expert parallelism's NCCL exchanges: NCCL documents that two
  // communicators' operations running at once may deadlock).
  const bool host = be_.host_memory();
  const bool can = host ? world_.any_thread() && (!experts_.enabled() || world_.concurrent())
                        : !experts_.enabled() && device_comm_ && be_.has_side_stream();
  double any_cannot = can ? 0 : 1;
  world_.all_reduce_max(&any_cannot, 1);
  if (any_cannot != 0) return;
  if (host)
    worker_ = std::make_unique<CommWorker>();
  else
    side_stream_wanted_ = true;  // made by set_gradients, which knows the ZeRO-1 bounds
}

std::string ParallelPlan::overlap_line() const {
  if (worker_)
    return fmt::format("gradient sums overlap the backward: each block's{}, over the ranks in "
                       "rank order, on a worker thread while the blocks below it compute "
                       "(parallel.overlap)",
                       experts_.enabled() ? " dense parameters' (the token exchanges run meanwhile)"
                                          : "");
  if (side_sums_ || side_stream_wanted_)
    return "gradient sums overlap the backward: each block's, over the ranks in rank order, by "
           "NCCL on a second CUDA stream while the blocks below it compute (parallel.overlap)";
  const bool ep = experts_.enabled();
  return fmt::format(
      "gradient sums after the backward ({})",
      !overlap_requested_ ? "parallel.overlap: false"
      : !be_.host_memory()
          ? (ep ? "no overlap under expert parallelism on a GPU: its NCCL token exchanges beside "
                  "the sums would be two communicators' kernels at once, which may deadlock"
                : "no overlap: the gradient sums go through host memory (no NCCL on some rank)")
      : ep ? "no overlap: MPI without MPI_THREAD_MULTIPLE on some rank"
           : "no overlap: MPI without MPI_THREAD_SERIALIZED on some rank");
}

const char* ParallelPlan::overlap_name() const {
  return worker_ ? "worker thread" : side_sums_ ? "side stream" : "off";
}

std::string ParallelPlan::communicator_name() const {
  return device_comm_ ? world_.name() + "+" + device_comm_->name() : world_.name();
}

CommBytes ParallelPlan::bytes_sent() const {
  CommBytes b = world_.bytes_sent();  // host and device collectives together
  for (const auto* dc : {&device_comm_, &ep_device_comm_, &edp_device_comm_}) {
    if (!*dc) continue;  // (the expert groups' NCCL communicators: expert parallelism)
    const CommBytes& d = (*dc)->bytes_sent();
    b.all_reduce += d.all_reduce;
    b.reduce_scatter += d.reduce_scatter;
    b.all_gather += d.all_gather;
    b.gather += d.gather;
    b.broadcast += d.broadcast;
    b.all_to_all += d.all_to_all;
  }
  for (const Communicator* c : {ep_comm_.get(), edp_comm_.get()}) {  // expert parallelism
    if (!c) continue;
    const CommBytes& d = c->bytes_sent();
    b.all_reduce += d.all_reduce;
    b.all_gather += d.all_gather;
    b.all_to_all += d.all_to_all;
  }
  return b;
}

// ---- The gradient sums --------------------------------------------------------------------

void ParallelPlan::set_gradients(int64_t n, std::vector<std::pair<int64_t, int64_t>> world_ranges,
                                 std::vector<int64_t> zero_bounds) {
  ECO_ASSERT(zero_bounds.empty() || zero_bounds.size() == size_t(world()) + 1,
             "{} ZeRO-1 bounds for a world of {}", zero_bounds.size(), world());
  ECO_ASSERT(experts_.enabled() || world_ranges.empty() ||
                 (world_ranges.size() == 1 && world_ranges[0] == std::pair<int64_t, int64_t>{0, n}),
             "gradient ranges without expert parallelism");
  ranges_ = std::move(world_ranges);
  bounds_ = std::move(zero_bounds);
  range_bounds_.clear();
  if (!bounds_.empty())
    for (const auto& [begin, end] : ranges_)
      range_bounds_.push_back(clamp_bounds(bounds_, begin, end));
  if (side_stream_wanted_)
    side_sums_ = std::make_unique<SideStreamSums>(be_, *device_comm_, bounds_);
}

template <class Comm>
void ParallelPlan::sum_ranges(float* x, int64_t n, Comm& comm) {
  if (!experts_.enabled()) {  // all of it; ZeRO-1: each rank receives the sum of its own range
    if (!bounds_.empty())
      comm.reduce_scatter_sum(x, bounds_);
    else
      comm.all_reduce_sum(x, n);
    return;
  }
  for (size_t k = 0; k < ranges_.size(); ++k) {  // the dense ranges (expert slots ride along)
    const auto [begin, end] = ranges_[k];
    if (!bounds_.empty())
      comm.reduce_scatter_sum(x + begin, range_bounds_[k]);
    else
      comm.all_reduce_sum(x + begin, end - begin);
  }
}

void ParallelPlan::sum_gradients(const Tensor& g) {
  if (world() == 1) return;
  // Expert parallelism: the dense ranges summed over the world (ZeRO-1: each rank receives its
  // rows of each range), then each local expert's gradient folded from every source's, in world
  // rank order (fold_expert_gradients).
  const bool scatter = !bounds_.empty(), ep = experts_.enabled();
  const ScopedRange range(be_, ep ? (scatter ? "gradient reduce-scatter + expert fold"
                                             : "gradient all-reduce + expert fold")
                                  : (scatter ? "gradient reduce-scatter" : "gradient all-reduce"));
  ECO_ASSERT(g.dtype == DType::F32, "{} gradients in {}", ep ? "expert-parallel" : "data-parallel",
             dtype_name(g.dtype));
  if (be_.host_memory()) {  // summed in place
    sum_ranges(g.as<float>(), g.numel(), world_);
  } else if (device_comm_) {  // GPU to GPU
    sum_ranges(g.as<float>(), g.numel(), *device_comm_);
    // NCCL waits without a timeout: a rank that stopped would hang the others in the next
    // synchronisation; wait for the sum here, under parallel.timeout_s.
    const Communicator::WaitGuard guard(world_, "the NCCL gradient sum");
    be_.synchronize();
  } else {
    // Without NCCL (or with ranks sharing a GPU) the GPU gradients go through host memory over
    // MPI: correct and rank-order deterministic, but bound by PCIe and the network stack.
    grads_host_.resize(size_t(g.numel()));
    be_.copy_to_host(grads_host_.data(), g);
    sum_ranges(grads_host_.data(), g.numel(), world_);
    be_.copy_from_host(g, grads_host_.data());
  }
  fold_expert_gradients();
}

void ParallelPlan::post_gradient_range(const Tensor& g, int64_t begin, int64_t end) {
  if (side_sums_) {
    side_sums_->post(g.as<float>(), begin, end);
    return;
  }
  ECO_ASSERT(worker_, "an overlapped gradient sum without a way to overlap it");
  float* x = g.as<float>();
  if (!experts_.enabled()) {
    worker_->post([this, x, begin, end] { sum_range_on_worker(x, begin, end); });
    return;
  }
  // Expert parallelism: the range's dense parts only (the experts' are folded after the
  // backward, over their expert-data-parallel group: fold_expert_gradients).
  for (const auto& [dense_begin, dense_end] : ranges_) {
    const int64_t a = std::max(begin, dense_begin), b = std::min(end, dense_end);
    if (a < b) worker_->post([this, x, a, b] { sum_range_on_worker(x, a, b); });
  }
}

void ParallelPlan::sum_range_on_worker(float* x, int64_t begin, int64_t end) {
  if (bounds_.empty()) {
    world_.all_reduce_sum(x + begin, end - begin);
    return;
  }
  // ZeRO-1: the ranks' ranges cut to [begin, end), relative to begin.
  world_.reduce_scatter_sum(x + begin, clamp_bounds(bounds_, begin, end));
}

void ParallelPlan::wait_gradient_sums() {
  const ScopedRange wait_range(be_, "gradient sums (overlapped): wait");
  if (worker_) {
    worker_->wait();
    return;
  }
  side_sums_->join();
  // NCCL waits without a timeout: wait here, under parallel.timeout_s (as sum_gradients).
  const Communicator::WaitGuard guard(world_, "the NCCL gradient sum");
  be_.synchronize();
}

void ParallelPlan::fold_expert_gradients() {
  if (expert_) expert_->fold_expert_gradients();
}

// ---- The optimizer ------------------------------------------------------------------------

void ParallelPlan::sum_norm_partials(std::vector<double>& partials, const std::vector<char>& dense,
                                     bool zero_sharded) {
  if (zero_sharded) {
    // ZeRO-1: each piece is one rank's in the world (a dense piece by the world's shards, an
    // expert's by its owners' group's): the others' partials are zeros, added exactly.
    world_.all_reduce_sum(partials.data(), int64_t(partials.size()));
  } else if (experts_.enabled()) {
    // An expert's piece is its owner's (the others' are zeros); a dense piece, the same on
    // every rank, is rank 0's of the group.
    if (experts_.rank != 0)
      for (size_t k = 0; k < partials.size(); ++k)
        if (dense[k]) partials[k] = 0;
    ep_comm_->all_reduce_sum(partials.data(), int64_t(partials.size()));
  }
}

int64_t ParallelPlan::all_gather_segments(ZeroGroup group, const Tensor& buf,
                                          const std::vector<GatherSegment>& segments) {
  Communicator& comm = group == ZeroGroup::World ? world_ : *edp_comm_;
  // The world's group goes GPU to GPU when the ranks use NCCL; the experts' through the host.
  const bool device = group == ZeroGroup::World && device_comm_ && !be_.host_memory();
  // The bytes this rank sends, by the communicator's own counter.
  const auto counted = [&] {
    return (device ? device_comm_->bytes_sent() : comm.bytes_sent()).all_gather;
  };
  const int64_t before = counted();
  // Each segment of the group's parameters, cut between the ranks by the same bounds.
  const auto gather = [&](char* base, auto&& all_gather) {
    for (const GatherSegment& s : segments) all_gather(base + s.begin, s.bounds);
  };
  if (be_.host_memory()) {
    gather(buf.as<char>(), [&](char* p, const std::vector<int64_t>& b) { comm.all_gather(p, b); });
  } else if (device) {  // GPU to GPU, waited for under the run's collective timeout
    gather(buf.as<char>(),
           [&](char* p, const std::vector<int64_t>& b) { device_comm_->all_gather(p, b); });
    const Communicator::WaitGuard guard(world_, "the NCCL all-gather of the weights");
    be_.synchronize();
  } else {  // device memory through the host
    staging_.resize(buf.bytes());
    be_.copy_to_host(staging_.data(), buf);
    gather(staging_.data(), [&](char* p, const std::vector<int64_t>& b) { comm.all_gather(p, b); });
    be_.copy_from_host(buf, staging_.data());
  }
  return counted() - before;
}

// ---- The step's agreements and the checkpoint ---------------------------------------------

void ParallelPlan::sum_over_ranks(double* x, int64_t n) {
  if (world() > 1) world_.all_reduce_sum(x, n);
}

void ParallelPlan::sum_over_ranks(int64_t* x, int64_t n) {
  if (world() > 1) world_.all_reduce_sum(x, n);
}

bool ParallelPlan::any_rank(bool mine) {
  if (world() == 1) return mine;
  double any = mine ? 1.0 : 0.0;
  world_.all_reduce_max(&any, 1);
  return any > 0;
}

void ParallelPlan::broadcast_from_lead(void* data, int64_t bytes) {
  if (world() > 1) world_.broadcast(data, bytes, 0);
}

void ParallelPlan::wait_for_every_rank() {
  if (world_.world() > 1) world_.barrier();
}

void ParallelPlan::gather_to_lead(const void* mine, void* out,
                                  const std::vector<int64_t>& byte_bounds) {
  world_.gather(mine, out, byte_bounds, 0);
}

}  // namespace eco
