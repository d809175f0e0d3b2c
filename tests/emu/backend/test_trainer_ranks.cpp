// The trainer itself on 2 ranks of the emulated CUDA backend (its multi-rank CUDA paths, checked
// here without a GPU): the ranks are the emulated NCCL's rank threads (shim/nccl.h), their host
// communicator a ThreadGroup (thread_group.h), and eco::Trainer picks NCCL as on a machine with
// a GPU per rank. A tiny Llama under fp8-eco-sr, 4 steps: the final checkpoint of 2 ranks must
// equal, section by section, one rank's accumulating 2 micro-batches a step, with the gradient
// sums after the backward, overlapping it on the side stream (parallel.overlap; the side stream
// deferred, then the compute stream deferred: emu::DeferStreams), and under ZeRO-1 (the
// reduce-scatter and the all-gather of codes and scales over NCCL), overlapped too; then expert
// parallelism over NCCL. The ZeRO-1 and expert-parallel runs defer the compute stream: a host
// read of device memory without a synchronisation would see it stale. The log says which way
// each run summed and exchanged.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <nccl.h>
#include <nlohmann/json.hpp>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"
#include "thread_group.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace eco {
namespace {

namespace fs = std::filesystem;

constexpr int kSteps = 4;

const char* const kLlama =
    "{family: llama, n_layer: 2, n_head: 2, d_model: 32, vocab_size: 97, seq_len: 16}";
// An SMoE: 4 experts, top-2, FP8 experts on 16-row segments.
const char* const kSmoe =
    "{family: gpt2, n_layer: 1, n_head: 2, d_model: 32, vocab_size: 97, seq_len: 16,\n"
    "  moe: {n_experts: 4, top_k: 2, expert_hidden: 32}}";

// The model (kLlama or kSmoe), fp8-eco-sr (on the experts only for the SMoE), `extra` lines.
Config tiny(const std::string& extra, const char* model = kLlama) {
  const bool moe = model == kSmoe;
  return parse_config(
      "device: cuda\n"
      "model: " + std::string(model) + "\n"
      "data: {source: synthetic}\n"
      "precision: {treatment: fp8-eco-sr" + (moe ? ", quantize: experts" : "") + "}\n"
      "train: {batch_size: 2, max_steps: " + std::to_string(kSteps) +
          ", checkpoint_interval: " + std::to_string(kSteps) +
          ", log_interval: 1, eval_batches: 1, sample_tokens: 0}\n" + extra,
      "test_trainer_ranks");
}

// The log lines of the runs since the last take (every rank's; spdlog's default logger).
class LogTap {
 public:
  LogTap() : sink_(std::make_shared<Sink>()) { spdlog::default_logger()->sinks().push_back(sink_); }
  ~LogTap() {
    auto& sinks = spdlog::default_logger()->sinks();
    sinks.erase(std::find(sinks.begin(), sinks.end(), sink_));
  }
  std::string take() { return sink_->take(); }

 private:
  class Sink final : public spdlog::sinks::base_sink<std::mutex> {
   public:
    std::string take() {
      const std::lock_guard<std::mutex> lock(mutex_);
      return std::exchange(text_, std::string());
    }

   protected:
    void sink_it_(const spdlog::details::log_msg& msg) override {
      spdlog::memory_buf_t line;
      formatter_->format(msg, line);
      text_.append(line.data(), line.size());
    }
    void flush_() override {}

   private:
    std::string text_;
  };
  std::shared_ptr<Sink> sink_;
};

class EmuTrainerRanks : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("eco-emu-ranks-" + std::to_string(getpid()));
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // One rank accumulating `accum` micro-batches a step (resume: from the checkpoint in its
  // directory).
  CheckpointState one(const std::string& name, const std::string& extra, int accum,
                      const char* model = kLlama, bool resume = false) {
    Config c = tiny(extra, model);
    c.train.grad_accum = accum;
    c.train.out_dir = (dir_ / name).string();
    {
      Trainer t(c);
      RunOptions o;
      o.resume = resume;
      EXPECT_EQ(t.run(o), 0) << name;
    }
    return load_checkpoint((dir_ / name / checkpoint_name(kSteps)).string());
  }
  // `world` ranks (parallel.dp x parallel.ep), each a rank thread, the streams `defer` deferred
  // on each.
  CheckpointState ranks(const std::string& name, const std::string& extra, int world,
                        std::set<int> defer, const char* model = kLlama) {
    return ranks(name, tiny(extra, model), world, std::move(defer));
  }
  CheckpointState ranks(const std::string& name, Config c, int world, std::set<int> defer) {
    c.parallel.dp = world / c.parallel.ep;
    c.train.out_dir = (dir_ / name).string();
    GroupBoard board;
    {
      const emu::DeferStreams deferred(std::move(defer));
      run_rank_threads(world, name, [&](int r) {
        emu::device_slot = one_gpu_ ? 0 : r;  // a GPU per rank, or one for all
        ThreadGroup comm(r, world, board);
        Trainer t(c, RunContext{r, world}, &comm);
        EXPECT_EQ(t.run(RunOptions{}), 0) << name << ": rank " << r;
      });
    }
    return load_checkpoint((dir_ / name / checkpoint_name(kSteps)).string());
  }

  fs::path dir_;
  LogTap log_;
  bool one_gpu_ = false;  // ranks() puts every rank on one emulated GPU (one PCI bus id)
};

// Sections that differ between two checkpoints (their names).
std::string differing(const CheckpointState& a, const CheckpointState& b) {
  if (a.sections.size() != b.sections.size()) return "a different number of sections";
  std::string out;
  for (size_t i = 0; i < a.sections.size(); ++i)
    if (a.sections[i].first != b.sections[i].first ||
        !(a.sections[i].second == b.sections[i].second))
      out += " " + a.sections[i].first;
  return out;
}

TEST_F(EmuTrainerRanks, TwoCudaRanksOverNcclEqualOneRankAccumulating) {
  const CheckpointState ref = one("one", "", 2);
  log_.take();
  struct Case {
    const char* name;
    const char* extra;
    std::set<int> defer;
    const char* says;     // in the log
    const char* overlap;  // summary.json's parallel.overlap
  };
  const Case cases[] = {
      {"after", "", {}, "gradient sums after the backward (parallel.overlap: false)", "off"},
      {"overlap_side_deferred", "parallel: {overlap: true}\n", {2},
       "by NCCL on a second CUDA stream", "side stream"},
      {"overlap_compute_deferred", "parallel: {overlap: true}\n", {1},
       "by NCCL on a second CUDA stream", "side stream"},
      {"zero1_compute_deferred", "parallel: {zero: 1}\n", {1}, "ZeRO-1: each rank updates",
       "off"},
      {"zero1_overlap", "parallel: {zero: 1, overlap: true}\n", {2},
       "by NCCL on a second CUDA stream", "side stream"},
  };
  for (const Case& k : cases) {
    const CheckpointState got = ranks(k.name, k.extra, 2, k.defer);
    EXPECT_EQ(differing(ref, got), "") << k.name << ": sections differ from one rank's";
    const std::string log = log_.take();
    EXPECT_NE(log.find("device collectives: NCCL"), std::string::npos) << k.name << ":\n" << log;
    EXPECT_NE(log.find(k.says), std::string::npos) << k.name << ": the log does not say '"
                                                   << k.says << "':\n" << log;
    std::ifstream summary(dir_ / k.name / "summary.json");
    EXPECT_EQ(nlohmann::json::parse(summary)["parallel"]["overlap"], k.overlap) << k.name;
    if (!HasFailure())
      std::printf("[   emu    ] %s: 2 CUDA ranks over NCCL == 1 rank accumulating 2 (%zu "
                  "sections)\n",
                  k.name, got.sections.size());
  }
}

// Expert parallelism in the trainer: the SMoE at ep 2, the tokens exchanged and the expert
// gradients folded over NCCL, equals one rank accumulating 2; at zero 1 too; and ep 2 x dp 2 at
// zero 1 equals one rank accumulating 4.
TEST_F(EmuTrainerRanks, ExpertParallelOverNcclEqualsOneRankAccumulating) {
  const CheckpointState ref = one("one_smoe", "", 2, kSmoe);
  log_.take();
  for (const char* zero : {"0", "1"}) {
    const std::string name = std::string("ep2_zero") + zero;
    const CheckpointState got =
        ranks(name, std::string("parallel: {ep: 2, zero: ") + zero + "}\n", 2, {1}, kSmoe);
    EXPECT_EQ(differing(ref, got), "") << name << ": sections differ from one rank's";
    const std::string log = log_.take();
    EXPECT_NE(log.find("expert exchange: NCCL"), std::string::npos) << name << ":\n" << log;
    if (!HasFailure())
      std::printf("[   emu    ] %s: ep 2 over NCCL == 1 rank accumulating 2 (%zu sections)\n",
                  name.c_str(), got.sections.size());
  }
  // 4 ranks, ep 2 x dp 2 at zero 1: the expert gradients also broadcast over the
  // expert-data-parallel group's NCCL communicator and folded in world rank order.
  const CheckpointState ref4 = one("one_smoe4", "", 4, kSmoe);
  const CheckpointState got4 =
      ranks("ep2dp2_zero1", "parallel: {ep: 2, zero: 1}\n", 4, {1}, kSmoe);
  EXPECT_EQ(differing(ref4, got4), "") << "ep 2 x dp 2: sections differ from one rank's";
  if (!HasFailure())
    std::printf("[   emu    ] ep2dp2_zero1: ep 2 x dp 2 over NCCL == 1 rank accumulating 4\n");
}

// Ranks sharing one GPU (as e2e data_parallel_cuda runs on a machine with one): NCCL before 2.30
// refuses them, so the trainer sums the gradients, all-gathers ZeRO-1's codes and exchanges the
// tokens through host memory over the host communicator. Both ranks' emulated devices report one
// PCI bus id on this host. The same bits as one rank accumulating.
TEST_F(EmuTrainerRanks, RanksSharingAGpuGoThroughHostMemoryWithTheSameBits) {
  const CheckpointState ref = one("one", "", 2);
  const CheckpointState ref_smoe = one("one_smoe", "", 2, kSmoe);
  log_.take();
  one_gpu_ = true;  // both ranks' devices report one PCI bus id on one host
  const CheckpointState dense = ranks("shared_zero1", "parallel: {zero: 1}\n", 2, {1});
  const std::string dense_log = log_.take();
  const CheckpointState smoe = ranks("shared_ep2", "parallel: {ep: 2}\n", 2, {1}, kSmoe);
  const std::string smoe_log = log_.take();
  one_gpu_ = false;
  EXPECT_EQ(differing(ref, dense), "") << "dp 2 at zero 1 through host memory";
  EXPECT_EQ(differing(ref_smoe, smoe), "") << "ep 2 through host memory";
  EXPECT_NE(dense_log.find("device collectives: through host memory over MPI (ranks share a GPU"),
            std::string::npos)
      << dense_log;
  EXPECT_NE(smoe_log.find("expert exchange: host-staged"), std::string::npos) << smoe_log;
  if (!HasFailure())
    std::printf("[   emu    ] 2 ranks on one GPU, through host memory: dp 2 zero 1 and ep 2 == 1 "
                "rank accumulating 2\n");
}

// World-size-independent checkpoints on CUDA: 2 ranks at ZeRO-1 over NCCL (the moments gathered
// to rank 0 for the checkpoint) save at step 2; one rank accumulating 2 resumes there and ends
// where one rank's uninterrupted run does.
TEST_F(EmuTrainerRanks, ZeroOneCheckpointOfTwoCudaRanksResumesOnOne) {
  const CheckpointState ref = one("one", "", 2);
  Config c = tiny("parallel: {zero: 1}\n");
  c.train.checkpoint_interval = 2;
  c.train.keep_checkpoints = 5;
  ranks("z1_two", c, 2, {1});
  fs::create_directories(dir_ / "resumed");
  fs::copy_file(dir_ / "z1_two" / checkpoint_name(2), dir_ / "resumed" / checkpoint_name(2));
  log_.take();
  const CheckpointState got = one("resumed", "", 2, kLlama, /*resume=*/true);
  const std::string log = log_.take();
  EXPECT_NE(log.find("at step 2"), std::string::npos) << "did not resume at step 2:\n" << log;
  EXPECT_EQ(differing(ref, got), "") << "2 ranks (zero 1) -> 1 rank";
  if (!HasFailure())
    std::printf("[   emu    ] 2 CUDA ranks at zero 1 saved step 2; 1 rank resumed and ended "
                "where 1 rank's run does\n");
}

}  // namespace
}  // namespace eco
