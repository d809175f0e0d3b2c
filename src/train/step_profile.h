// train.profile: the per-operation device time of the profiled steps (those after a run's first
// kSkipSteps, which pick GEMM algorithms and grow scratch buffers), as a table in the log and as
// figures for summary.json.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "base/backend.h"
#include "train/run_log.h"

namespace eco {

class StepProfile {
 public:
  static constexpr int64_t kSkipSteps = 5;

  // Steps start..total-1 will run. `requested` is train.profile; a backend without per-operation
  // timing ignores it with a warning.
  StepProfile(bool requested, Backend& backend, int64_t start, int64_t total, RunLog& log);

  // Around each training step: begin_step discards what ran since the last profiled step (eval,
  // samples, checkpoints); end_step collects the step's operations (after its optimizer step);
  // add_step_ms adds the step's wall time, measured after end_step.
  void begin_step(int64_t step);
  void end_step();
  void add_step_ms(double ms);

  // When steps were profiled: logs the table, turns profiling off and returns summary.json's
  // "profile" object; otherwise returns null.
  nlohmann::json finish(RunLog& log);

 private:
  Backend& backend_;
  bool enabled_ = false;
  int64_t start_ = 0;
  bool step_profiled_ = false;  // the current step is one of the profiled ones
  std::map<std::string, std::pair<int64_t, double>> ops_;  // name -> calls, ms
  int64_t steps_ = 0;
  double wall_ms_ = 0;
};

}  // namespace eco
