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
#include "dist/communicator.h"
#include "dist/parallel_plan.h"
#include "base/backend.h"
#include "model/transformer.h"
#include "optim/optimizer.h"
#include "train/checkpoint.h"
#include "train/loss_spike.h"
#include "train/plan_report.h"  // eco-train --plan, which callers of the trainer also use
#include "train/run_context.h"
#include "train/run_dir.h"
#include "train/run_log.h"
#include "train/run_summary.h"
#include "train/sampler.h"

namespace eco {

class StepProfile;
class StopSignals;

// How a run starts (eco-train's flags; docs/errors.md).
struct RunOptions {
  // --resume: from the newest valid checkpoint in train.out_dir (newer corrupt ones are set
  // aside as *.corrupt and named); an error when there is none.
  bool resume = false;
  // --resume-if-present: as --resume when train.out_dir holds a checkpoint, else from scratch.
  bool resume_if_present = false;
  std::string resume_path;  // --resume=PATH: this checkpoint (implies resume)
  // --overwrite: a fresh run (or --resume=PATH) in an out_dir holding an earlier run's
  // checkpoints deletes them (and its metrics, samples, summary) instead of refusing.
  bool overwrite = false;
  // --resume-diverged: resume a run whose summary.json says it diverged after the checkpoint
  // resumed from (without it such a resume is refused).
  bool resume_diverged = false;
};

class Trainer {
 public:
  // ctx: which process of the run this is (rank 0 of 1 for a single process); comm: the
  // processes' collectives (null: one process), which the run's parallel plan
  // (dist/parallel_plan.h) issues. comm's world must be cfg.parallel.world().
  explicit Trainer(const Config& cfg, RunContext ctx = {}, Communicator* comm = nullptr);
  ~Trainer();
  // Train to the configured number of steps. Returns the process exit code: 0, 1 when training
  // diverged, 130 / 143 when stopped by SIGINT / SIGTERM (after saving a checkpoint). Resuming a
  // finished run keeps its summary.json (or rebuilds it from metrics.jsonl) and returns 0.
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
    int64_t saved = -1;  // the step of the newest checkpoint of this run (written or resumed)
    bool resumed = false;
    double train_loss = std::nan(""), val_loss = std::nan("");
    // model.init_from: the imported weights' val loss, evaluated before step 1 (metrics.jsonl
    // step 0); NaN for a random start or without val data.
    double initial_val_loss = std::nan("");
    bool diverged = false;
    std::string divergence;  // what diverged, when it did (summary.json)
    nlohmann::json moe;  // the MoE router figures of the step last logged (moe_json), null for dense
  };
  struct StepResult {
    double loss = 0, lr = 0, grad_norm = 0;
    // Non-empty when the loss or grad norm is not finite, or a loss spike (LossSpikeDetector):
    // what diverged; the update was not applied.
    std::string divergence;
    bool interrupted = false;  // a stop signal between micro-batches: the step was abandoned
    MoeStepFigures moe;        // this rank's micro-batches' router figures (MoE models)
  };

  // Sets p.start, p.step, p.saved and p.resumed.
  void start_or_resume(const RunOptions& opts, Progress& p);
  // A fresh start's weights: random (train.seed), or model.init_from's checkpoint.
  void init_weights();
  // Refuses (unless `allowed`) to resume from the checkpoint of `step` at `path` when the run's
  // summary.json says it diverged at or after that step.
  void check_divergence_record(int64_t step, const std::string& path, bool allowed);
  // Restores a loaded checkpoint (the loss-spike detector's state too); returns its step.
  int64_t restore(const CheckpointState& st, const std::string& path);
  // Resuming at the last step: true when summary.json of the finished run is intact (nothing
  // to do); otherwise takes the final losses from metrics.jsonl (or evaluates) for finish().
  bool finished_run_intact(Progress& p);
  void log_run_header();
  // model.init_from: evaluates the imported weights before step 1 (metrics.jsonl step 0) on a
  // fresh run, or reads that value back from metrics.jsonl on resume.
  void evaluate_imported(Progress& p);
  // One optimizer step (0-based `step`) over grad_accum micro-batches on every rank.
  StepResult train_step(int64_t step);
  // The gradient of the step's micro-batches and ranks in grads(), summed in one fixed order:
  // ((0 + g_0) + g_1) + ..., micro-batches in order on each rank, then the ranks' sums in rank
  // order (ParallelPlan::sum_gradients). One micro-batch a rank on N ranks gives one rank's N
  // micro-batches bit for bit.
  void reduce_gradients();
  // parallel.overlap, the step's last micro-batch: [begin, end) of grads() is final on this rank
  // (Transformer::set_grad_ready): folds in the earlier micro-batches' sum as reduce_gradients()
  // does and posts the range's sum over the ranks (ParallelPlan::post_gradient_range).
  void on_grads_ready(int64_t begin, int64_t end);
  // A step's MoE figures summed over the ranks (in rank order), for the log and summary.json.
  nlohmann::json step_moe_json(MoeStepFigures moe);
  // A stop signal seen by any rank (every rank must leave the loop at the same step).
  bool stop_agreed(const StopSignals& stop);
  // What falls due after `done` steps: progress line, eval, sample, checkpoint.
  void after_step(int64_t done, const StepResult& r, double ms, double eta_s, Progress& p);
  // Steps until the end, divergence or a stop signal; then, if a signal stopped it, the
  // checkpoint of the last completed step.
  void train_loop(Progress& p, StepProfile& profile, const StopSignals& stop);
  // Writes the checkpoint of `step` unless the state holds a non-finite value: then the run is
  // marked diverged and nothing is written (the previous checkpoints stay).
  void save(int64_t step, Progress& p);
  // The final sample (unless stopped), summary.json and the closing line.
  void finish(const Progress& p, double wall_s, StepProfile& profile, bool stopped);

  Config cfg_;
  RunContext ctx_;
  std::unique_ptr<Communicator> own_comm_;  // when the caller gave none
  Communicator* comm_ = nullptr;
  RunLog log_;
  RunDir run_dir_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Transformer> model_;
  std::unique_ptr<Optimizer> opt_;
  // The groups, transports and collectives of the run (made before the model, whose MoE layers
  // exchange through it; destroyed before the model and the backend: its worker thread writes
  // the gradients, its device communicators live on the backend's GPU).
  std::unique_ptr<ParallelPlan> plan_;
  std::optional<DataLoader> train_data_, val_data_;
  std::optional<TextSampler> sampler_;
  LossSpikeDetector spikes_;
  std::vector<int32_t> inputs_, targets_;  // one micro-batch, (B, T) each
  Tensor grad_acc_;  // the micro-batches' gradient sum (grad_accum > 1; grads()' shape)
};

}  // namespace eco
