// The per-operation breakdown of train.profile. "other" is the step's wall time not covered by
// device work of backend operations: host work, synchronisation and launch gaps.
#include "train/step_profile.h"

#include <algorithm>
#include <vector>

namespace eco {

StepProfile::StepProfile(bool requested, Backend& backend, int64_t start, int64_t total,
                         RunLog& log)
    : backend_(backend), enabled_(requested && backend.supports_profiling()), start_(start) {
  if (requested && !enabled_)
    log.warn("train.profile: the {} backend has no per-operation timing; ignored", backend.name());
  if (enabled_ && total - start <= kSkipSteps)
    log.warn("train.profile: only {} steps to run; the first {} are not profiled", total - start,
             kSkipSteps);
}

void StepProfile::begin_step(int64_t step) {
  step_profiled_ = enabled_ && step >= start_ + kSkipSteps;
  if (!step_profiled_) return;
  if (step == start_ + kSkipSteps) backend_.set_profiling(true);
  backend_.take_profile();
}

void StepProfile::end_step() {
  if (!step_profiled_) return;
  for (const auto& op : backend_.take_profile()) {
    auto& [calls, op_ms] = ops_[op.name];
    calls += op.calls;
    op_ms += op.ms;
  }
}

void StepProfile::add_step_ms(double ms) {
  if (!step_profiled_) return;
  ++steps_;
  wall_ms_ += ms;
}

nlohmann::json StepProfile::finish(RunLog& log) {
  if (steps_ == 0) return nullptr;
  std::vector<std::pair<std::string, std::pair<int64_t, double>>> rows(ops_.begin(), ops_.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
  const double step_ms = wall_ms_ / double(steps_);
  double covered = 0;
  std::string table =
      fmt::format("per-operation time over {} steps ({:.2f} ms/step):\n", steps_, step_ms);
  table += fmt::format("  {:<32} {:>10} {:>10} {:>7}\n", "operation", "calls/step", "ms/step",
                       "share");
  nlohmann::json by_op = nlohmann::json::object();
  for (const auto& [name, cm] : rows) {
    const double ms = cm.second / double(steps_);
    covered += ms;
    table += fmt::format("  {:<32} {:>10.1f} {:>10.3f} {:>6.1f}%\n", name,
                         double(cm.first) / double(steps_), ms, 100.0 * ms / step_ms);
    by_op[name] = {{"calls_per_step", double(cm.first) / double(steps_)}, {"ms_per_step", ms}};
  }
  const double other = std::max(0.0, step_ms - covered);
  table += fmt::format("  {:<32} {:>10} {:>10.3f} {:>6.1f}%", "other (host, sync, gaps)", "",
                       other, 100.0 * other / step_ms);
  log.info("{}", table);
  backend_.set_profiling(false);
  return {{"steps", steps_}, {"ms_per_step", step_ms}, {"other_ms_per_step", other},
          {"operations", by_op}};
}

}  // namespace eco
