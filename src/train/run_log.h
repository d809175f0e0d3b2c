// The run's log: console lines and metrics.jsonl, rank-aware. Info and progress lines come from
// the lead rank only, warnings and errors from every rank; with several ranks each line starts
// with "[rank r/w] ". metrics.jsonl is written by the lead rank only.
#pragma once
#include <spdlog/spdlog.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "train/metrics.h"
#include "train/run_context.h"

namespace eco {

// What one optimizer step reports: the progress line and its metrics.jsonl record.
struct StepReport {
  int64_t step = 0;   // steps completed, counting this one
  int64_t total = 0;  // steps of the whole run
  int64_t tokens_per_step = 0;  // B x T x grad_accum: metrics "tokens" is step x this
  double train_loss = 0, lr = 0, grad_norm = 0;
  double ms = 0;      // this step's wall time
  double eta_s = 0;   // estimated seconds to the end of the run
  nlohmann::json moe;  // MoE models: the router figures (run_summary.h, moe_json); else null
  bool record = true;  // also a metrics.jsonl record (else the progress line only)
};

// "42s", "3m07s", "1h05m"; "?" for a negative or non-finite estimate.
std::string format_duration(double seconds);

// The ETA's step time: an exponential average (weight 0.1 for the newest step) of the steps
// after a run's first, which picks GEMM algorithms and grows scratch buffers.
class StepTimeAverage {
 public:
  void add(double ms, bool first_step_of_run);
  // The average, or `this_step_ms` until a step after the first has been timed.
  double ms_per_step(double this_step_ms) const { return timed_ ? avg_ms_ : this_step_ms; }

 private:
  int64_t timed_ = 0;
  double avg_ms_ = 0;
};

class RunLog {
 public:
  explicit RunLog(RunContext ctx) : ctx_(ctx) {}

  template <class... Args>
  void info(fmt::format_string<Args...> f, Args&&... args) {
    if (ctx_.is_lead()) emit(spdlog::level::info, fmt::format(f, std::forward<Args>(args)...));
  }
  template <class... Args>
  void warn(fmt::format_string<Args...> f, Args&&... args) {
    emit(spdlog::level::warn, fmt::format(f, std::forward<Args>(args)...));
  }
  template <class... Args>
  void error(fmt::format_string<Args...> f, Args&&... args) {
    emit(spdlog::level::err, fmt::format(f, std::forward<Args>(args)...));
  }

  // Opens out_dir/metrics.jsonl on the lead rank (MetricsLog says what a resume keeps).
  void open_metrics(const std::string& out_dir, bool resume, int64_t resume_step);
  // The progress line with ETA and its metrics record.
  void train_step(const StepReport& r);
  // The validation line and its metrics record.
  void val_loss(int64_t step, int64_t total, int64_t tokens_per_step, double loss);

 private:
  // Prints `msg` at `level`, the rank prefix before each of its lines.
  void emit(spdlog::level::level_enum level, const std::string& msg) const;

  RunContext ctx_;
  std::optional<MetricsLog> metrics_;  // open on the lead rank once the run has started
};

}  // namespace eco
