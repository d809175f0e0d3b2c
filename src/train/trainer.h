// The training run: builds backend, model, optimizer and data from a Config, then runs the loop
// (lr schedule, gradient accumulation, clipping) and what falls due after each step: progress
// lines, evaluation, samples, checkpoints, the stop signal. Files are written by rank 0 only.
#pragma once
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/config.h"
#include "data/loader.h"
#include "model/backend.h"
#include "model/transformer.h"
#include "optim/optimizer.h"
#include "train/plan_report.h"  // eco-train --plan, which callers of the trainer also use
#include "train/run_context.h"
#include "train/run_dir.h"
#include "train/run_log.h"
#include "train/sampler.h"

namespace eco {

class StepProfile;

struct RunOptions {
  bool resume = false;
  std::string resume_path;  // empty: the latest checkpoint in train.out_dir
};

class Trainer {
 public:
  // ctx: which process of the run this is (rank 0 of 1 for a single process).
  explicit Trainer(const Config& cfg, RunContext ctx = {});
  ~Trainer();
  // Train to the configured number of steps. Returns the process exit code: 0, 1 when training
  // diverged, 130 when stopped by SIGINT / SIGTERM (after saving a checkpoint).
  int run(const RunOptions& opts);

  // Pieces usable on their own (tests, tools).
  Transformer& model() { return *model_; }
  Optimizer& optimizer() { return *opt_; }
  double evaluate();  // mean val loss over eval_batches (NaN when no val data)
  std::string sample(int n_tokens, uint64_t seed);

 private:
  // What the loop carries from step to step, and what the summary reports.
  struct Progress {
    int64_t start = 0;  // the step the run started (or resumed) from
    int64_t step = 0;   // steps completed
    double train_loss = std::nan(""), val_loss = std::nan("");
    bool diverged = false;
    nlohmann::json moe;  // the MoE router figures last logged (moe_json), null for dense
  };
  struct StepResult {
    double loss = 0, lr = 0, grad_norm = 0;
    bool diverged = false;  // loss or grad norm not finite: the update was not applied
  };

  int64_t start_or_resume(const RunOptions& opts);  // returns the step to continue from
  void log_run_header();
  // One optimizer step (0-based `step`) over grad_accum micro-batches.
  StepResult train_step(int64_t step);
  // What falls due after `done` steps: progress line, eval, sample, checkpoint.
  void after_step(int64_t done, const StepResult& r, double ms, double eta_s, Progress& p);
  // Steps until the end, divergence or a stop signal; returns whether a signal stopped it.
  bool train_loop(Progress& p, StepProfile& profile);
  void save(int64_t step);
  // The final sample, summary.json and the closing line.
  void finish(const Progress& p, double wall_s, StepProfile& profile);

  Config cfg_;
  RunContext ctx_;
  RunLog log_;
  RunDir run_dir_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Transformer> model_;
  std::unique_ptr<Optimizer> opt_;
  std::optional<DataLoader> train_data_, val_data_;
  std::optional<TextSampler> sampler_;
  std::vector<int32_t> inputs_, targets_;  // one micro-batch, (B, T) each
};

}  // namespace eco
