// The run factory (train/run_factory.h): eco-train --plan counts, category by category, the bytes
// that a trainer built for real allocates on the CPU backend, for the rank the plan shows, dense
// and SMoE, with gradient accumulation, ZeRO-1 and expert parallelism.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/config.h"
#include "base/memory_ledger.h"
#include "dist/communicator.h"
#include "train/run_factory.h"
#include "train/trainer.h"

namespace eco {
namespace {
namespace fs = std::filesystem;

// Rank `rank` of a world of `world` as the trainer's constructor sees it (no step is taken, so
// no data moves): the agreement maxima are this rank's own values; split() gives the groups of
// the sizes named at construction, in call order (the expert-parallel group, then the
// expert-data-parallel one), this rank at `key`.
class OneRankOfMany final : public Communicator {
 public:
  OneRankOfMany(int rank, int world, std::vector<int> split_worlds = {})
      : rank_(rank), world_(world), split_worlds_(std::move(split_worlds)) {}
  int rank() const override { return rank_; }
  int world() const override { return world_; }
  std::string name() const override { return "one rank of many"; }
  void all_reduce_sum(float*, int64_t) override { refuse(); }
  void all_reduce_sum(double*, int64_t) override { refuse(); }
  void all_reduce_sum(int64_t*, int64_t) override { refuse(); }
  void all_reduce_max(double*, int64_t) override {}
  void reduce_scatter_sum(float*, const std::vector<int64_t>&) override { refuse(); }
  void all_gather(void*, const std::vector<int64_t>&) override { refuse(); }
  void gather(const void*, void*, const std::vector<int64_t>&, int) override { refuse(); }
  void all_gather(void*, const void*, int64_t) override { refuse(); }
  void broadcast(void*, int64_t, int) override { refuse(); }
  void all_to_all_v(const void*, const std::vector<int64_t>&, void*,
                    const std::vector<int64_t>&) override {
    refuse();
  }
  void barrier() override { refuse(); }
  [[noreturn]] void abort(int) override { std::abort(); }
  std::unique_ptr<Communicator> split(int, int key) override {
    EXPECT_LT(splits_, split_worlds_.size()) << "an unexpected split";
    return std::make_unique<OneRankOfMany>(key, split_worlds_.at(splits_++));
  }

 private:
  static void refuse() { ADD_FAILURE() << "a collective moved data while building the run"; }
  int rank_, world_;
  std::vector<int> split_worlds_;
  size_t splits_ = 0;
};

struct TempDir {
  fs::path path = fs::temp_directory_path() /
                  ("eco-run-factory-" + std::to_string(getpid()) + "-" +
                   ::testing::UnitTest::GetInstance()->current_test_info()->name());
  ~TempDir() { fs::remove_all(path); }
};

const char* const kDense =
    "model: {family: llama, n_layer: 2, n_head: 2, d_model: 32, vocab_size: 64, seq_len: 16}\n";
// configs/smoe-tiny-cpu.yaml's shape, smaller: 4 experts of top-2, only the experts quantized.
const char* const kSmoe =
    "model: {family: gpt2, n_layer: 2, n_head: 2, d_model: 32, vocab_size: 64, seq_len: 16,"
    " moe: {n_experts: 4, top_k: 2, expert_hidden: 32, router: topk_softmax}}\n"
    "precision: {treatment: fp8-eco-sr, quantize: experts}\n";

Config run_config(const std::string& model, const std::string& extra, const fs::path& out) {
  Config c = parse_config(model + "data: {source: synthetic}\n" + extra, "run_factory.yaml");
  c.train.out_dir = (out / "run").string();
  return c;
}

// Every category of the plan's ledger equals the trainer's, and so does the total.
void expect_plan_equals_trainer(const Config& cfg, int rank, std::vector<int> split_worlds = {}) {
  const PlannedRun plan = plan_run(cfg);
  OneRankOfMany comm(rank, cfg.parallel.world(), std::move(split_worlds));
  Trainer trainer(cfg, RunContext{rank, cfg.parallel.world()}, &comm);
  const MemoryLedger& planned = plan.backend->ledger();
  const MemoryLedger& real = trainer.model().backend().ledger();
  for (size_t c = 0; c < size_t(MemCategory::Count); ++c)
    EXPECT_EQ(planned.total(MemCategory(c)), real.total(MemCategory(c)))
        << mem_category_name(MemCategory(c)) << " (rank " << rank << ")";
  EXPECT_EQ(planned.total(), real.total());
  EXPECT_GT(real.total(MemCategory::OptState), 0u);
}

TEST(RunFactory, PlanCountsWhatAOneProcessTrainerAllocates) {
  const TempDir dir;
  const Config cfg = run_config(kDense, "train: {batch_size: 2, max_steps: 1}\n", dir.path);
  expect_plan_equals_trainer(cfg, 0);
}

TEST(RunFactory, PlanCountsWhatAnSmoeTrainerAccumulatingMicroBatchesAllocates) {
  const TempDir dir;
  const Config cfg =
      run_config(kSmoe, "train: {batch_size: 2, grad_accum: 2, max_steps: 1}\n", dir.path);
  ASSERT_GT(plan_run(cfg).backend->ledger().total(MemCategory::QuantCodes), 0u);
  expect_plan_equals_trainer(cfg, 0);
}

// ZeRO-1 over 3 ranks: the plan is the rank with the most rows' moments, and its trainer
// allocates what the plan counts; the ranks' shares differ, so the comparison sees the rank.
TEST(RunFactory, PlanCountsWhatTheLargestZeroOneRankAllocates) {
  const TempDir dir;
  const Config cfg = run_config(
      kSmoe, "train: {batch_size: 2, max_steps: 1}\nparallel: {dp: 3, zero: 1}\n", dir.path);
  const int rank = plan_run(cfg).parts.zero_rank;
  expect_plan_equals_trainer(cfg, rank);
  const uint64_t planned = plan_run(cfg).backend->ledger().total(MemCategory::OptState);
  int fewer = 0;
  for (int r = 0; r < 3; ++r) {
    if (r == rank) continue;
    OneRankOfMany comm(r, 3);
    Trainer other(cfg, RunContext{r, 3}, &comm);
    const uint64_t kept = other.model().backend().ledger().total(MemCategory::OptState);
    EXPECT_LE(kept, planned) << "rank " << r << " keeps more moments than the plan's rank";
    fewer += kept < planned;
  }
  EXPECT_GT(fewer, 0) << "every rank keeps as many moments: the test cannot see the rank";
}

// Expert parallelism at dp 2 x ep 2 with ZeRO-1: each rank holds half the experts, the dense
// moments divided over 4 ranks and its experts' over the 2 that hold them.
TEST(RunFactory, PlanCountsWhatAnExpertParallelZeroOneRankAllocates) {
  const TempDir dir;
  const Config cfg = run_config(
      kSmoe,
      "train: {batch_size: 2, grad_accum: 2, max_steps: 1}\nparallel: {dp: 2, ep: 2, zero: 1}\n",
      dir.path);
  const int rank = plan_run(cfg).parts.zero_rank;
  expect_plan_equals_trainer(cfg, rank, {2, 2});
}

}  // namespace
}  // namespace eco
