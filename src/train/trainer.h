// The training run: builds backend, model, optimizer and data from a Config, then trains with
// gradient accumulation, clipping, the lr schedule, periodic eval / samples / checkpoints, and
// writes the run directory (config.resolved.yaml, metrics.jsonl, samples.txt, summary.json).
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "core/config.h"
#include "data/decode_table.h"
#include "data/loader.h"
#include "model/backend.h"
#include "model/transformer.h"
#include "optim/optimizer.h"

namespace eco {

struct RunOptions {
  bool resume = false;
  std::string resume_path;  // empty: the latest checkpoint in train.out_dir
};

class Trainer {
 public:
  explicit Trainer(const Config& cfg);
  ~Trainer();
  // Train to the configured number of steps. Returns the process exit code.
  int run(const RunOptions& opts);

  // Pieces usable on their own (tests, tools).
  Transformer& model() { return *model_; }
  Optimizer& optimizer() { return *opt_; }
  double evaluate();  // mean val loss over eval_batches (NaN when no val data)
  std::string sample(int n_tokens, uint64_t seed);

 private:
  void save(int64_t step);
  int64_t restore(const std::string& path);  // returns the step to continue from
  // Every persistent tensor of the run (parameters in their stored form, optimizer state).
  std::vector<std::pair<std::string, Tensor>> state() const;
  std::string decode(const int32_t* tokens, size_t n) const;

  Config cfg_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Transformer> model_;
  std::unique_ptr<Optimizer> opt_;
  std::optional<DataLoader> train_data_, val_data_;
  std::optional<DecodeTable> decode_table_;
};

// `eco-train --plan`: the parameter table and memory ledger, without allocating or training.
std::string plan_report(const Config& cfg);

}  // namespace eco
