// The trainer's rank awareness: only rank 0 writes the run directory and prints progress; with
// several ranks every console line starts with "[rank r/w] "; one process prints no prefix.
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/config.h"
#include "base/error.h"
#include "train/run_context.h"
#include "train/signals.h"
#include "train/trainer.h"

namespace eco {
namespace {
namespace fs = std::filesystem;

// Captures spdlog's default logger (message only, one line per record) for a scope.
class CapturedLog {
 public:
  CapturedLog() : previous_(spdlog::default_logger()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_);
    auto logger = std::make_shared<spdlog::logger>("captured", sink);
    logger->set_pattern("%v");
    spdlog::set_default_logger(logger);
  }
  ~CapturedLog() { spdlog::set_default_logger(previous_); }
  std::vector<std::string> lines() const {
    std::vector<std::string> out;
    std::istringstream in(out_.str());
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::logger> previous_;
};

// A tiny run that logs, evaluates, samples (mid-run and at the end) and checkpoints.
Config tiny_run(const fs::path& out_dir) {
  Config c = parse_config(
      "model: {family: gpt2, n_layer: 1, n_head: 2, d_model: 16, vocab_size: 32, seq_len: 8}\n"
      "data: {source: synthetic}\n"
      "train: {batch_size: 2, max_steps: 4, log_interval: 1, eval_interval: 2, eval_batches: 1,"
      " sample_interval: 2, sample_tokens: 4, checkpoint_interval: 2}\n",
      "test_trainer_ranks");
  c.train.out_dir = out_dir.string();
  return c;
}

struct TempDir {
  fs::path path = fs::temp_directory_path() /
                  ("eco-trainer-ranks-" + std::to_string(getpid()) + "-" +
                   ::testing::UnitTest::GetInstance()->current_test_info()->name());
  TempDir() { fs::remove_all(path); }
  ~TempDir() { fs::remove_all(path); }
};

bool contains(const std::vector<std::string>& lines, const std::string& needle) {
  for (const auto& l : lines)
    if (l.find(needle) != std::string::npos) return true;
  return false;
}

TEST(RunContext, PrefixesLogLinesOnlyWhenThereAreSeveralRanks) {
  EXPECT_EQ(RunContext{}.log_prefix(), "");
  EXPECT_EQ((RunContext{.rank = 1, .world = 4}).log_prefix(), "[rank 1/4] ");
  EXPECT_TRUE(RunContext{}.is_lead());
  EXPECT_FALSE((RunContext{.rank = 1, .world = 2}).is_lead());
}

// Rank 1 of 2 trains like any rank but writes nothing, prints no progress, and its warnings
// (here: --resume-if-present with nothing to resume) carry its rank.
TEST(TrainerRanks, NonLeadRankWritesNoFilesAndItsLinesCarryTheRank) {
  TempDir dir;
  std::vector<std::string> lines;
  {
    const CapturedLog log;
    Trainer t(tiny_run(dir.path / "run"), RunContext{.rank = 1, .world = 2});
    RunOptions resume;
    resume.resume_if_present = true;
    EXPECT_EQ(t.run(resume), 0);
    lines = log.lines();
  }
  EXPECT_FALSE(fs::exists(dir.path / "run")) << "rank 1 created the run directory";
  ASSERT_FALSE(lines.empty()) << "the --resume-if-present warning was not printed";
  EXPECT_TRUE(contains(lines, "no checkpoint in")) << lines[0];
  for (const auto& l : lines) {
    EXPECT_EQ(l.rfind("[rank 1/2] ", 0), 0u) << "line without the rank: " << l;
    EXPECT_EQ(l.find("step "), std::string::npos) << "rank 1 printed progress: " << l;
  }
}

// Rank 0 of 2 writes the run directory and prints everything, each line (the lines of a
// multi-line sample too) prefixed with its rank.
TEST(TrainerRanks, LeadRankOfSeveralWritesTheRunAndPrefixesEveryLine) {
  TempDir dir;
  std::vector<std::string> lines;
  {
    const CapturedLog log;
    Trainer t(tiny_run(dir.path / "run"), RunContext{.rank = 0, .world = 2});
    EXPECT_EQ(t.run(RunOptions{}), 0);
    lines = log.lines();
  }
  for (const char* f : {"config.resolved.yaml", "metrics.jsonl", "samples.txt", "summary.json",
                        "ckpt_00000002.bin", "ckpt_00000004.bin"})
    EXPECT_TRUE(fs::exists(dir.path / "run" / f)) << f;
  EXPECT_TRUE(contains(lines, "[rank 0/2] step      4/4 | loss"));
  EXPECT_TRUE(contains(lines, "[rank 0/2] sample at step 2:"));
  for (const auto& l : lines) EXPECT_EQ(l.rfind("[rank 0/2] ", 0), 0u) << l;
}

// One process: the same files, and lines exactly as before ranks existed (no prefix).
TEST(TrainerRanks, SingleProcessWritesTheRunWithoutARankPrefix) {
  TempDir dir;
  std::vector<std::string> lines;
  {
    const CapturedLog log;
    Trainer t(tiny_run(dir.path / "run"));
    EXPECT_EQ(t.run(RunOptions{}), 0);
    lines = log.lines();
  }
  for (const char* f : {"config.resolved.yaml", "metrics.jsonl", "samples.txt", "summary.json",
                        "ckpt_00000004.bin"})
    EXPECT_TRUE(fs::exists(dir.path / "run" / f)) << f;
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines[0].rfind("model: gpt2 family", 0), 0u) << lines[0];
  EXPECT_FALSE(contains(lines, "[rank"));
}

TEST(TrainerRanks, RefusesARankOutsideTheRun) {
  TempDir dir;
  EXPECT_THROW(Trainer(tiny_run(dir.path / "run"), RunContext{.rank = 2, .world = 2}), Error);
}

// A stop signal raised in a run's scope is seen by the loop; the next run starts unstopped.
TEST(StopSignals, SeeSigintInTheirScopeAndStartCleared) {
  {
    const StopSignals stop;
    EXPECT_FALSE(stop.requested());
    std::raise(SIGINT);
    EXPECT_TRUE(stop.requested());
  }
  const StopSignals next;
  EXPECT_FALSE(next.requested());
  std::raise(SIGTERM);
  EXPECT_TRUE(next.requested());
}

}  // namespace
}  // namespace eco
