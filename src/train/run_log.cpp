// Console lines and metrics.jsonl records of a run.
#include "train/run_log.h"

#include <cmath>

namespace eco {

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const int64_t t = int64_t(s + 0.5);
  if (t >= 3600) return fmt::format("{}h{:02d}m", t / 3600, (t % 3600) / 60);
  if (t >= 60) return fmt::format("{}m{:02d}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

void StepTimeAverage::add(double ms, bool first_step_of_run) {
  if (first_step_of_run) return;
  avg_ms_ = timed_++ == 0 ? ms : 0.9 * avg_ms_ + 0.1 * ms;
}

void RunLog::emit(spdlog::level::level_enum level, const std::string& msg) const {
  const std::string prefix = ctx_.log_prefix();
  if (prefix.empty()) {
    spdlog::log(level, "{}", msg);
    return;
  }
  // Multi-line messages (samples, the profile table): every line carries the rank.
  std::string out = prefix;
  for (const char c : msg) {
    out += c;
    if (c == '\n') out += prefix;
  }
  spdlog::log(level, "{}", out);
}

void RunLog::open_metrics(const std::string& out_dir, bool resume, int64_t resume_step) {
  if (ctx_.is_lead()) metrics_.emplace(out_dir, resume, resume_step);
}

void RunLog::train_step(const StepReport& r) {
  const double tokens_per_s = r.tokens_per_step / (r.ms / 1000.0);
  info("step {:>6}/{} | loss {:.4f} | lr {:.2e} | grad norm {:.3f} | {:.1f} ms/step | "
       "{:.0f} tok/s | ETA {}",
       r.step, r.total, r.train_loss, r.lr, r.grad_norm, r.ms, tokens_per_s,
       format_duration(r.eta_s));
  if (!r.moe.is_null())
    info("step {:>6}/{} | moe aux {:.4f} | z {:.4f} | load min/mean/max {}/{:.0f}/{} | "
         "entropy {:.3f} | dropped {}",
         r.step, r.total, r.moe["aux_loss"].get<double>(), r.moe["z_loss"].get<double>(),
         r.moe["load_min"].get<int64_t>(), r.moe["load_mean"].get<double>(),
         r.moe["load_max"].get<int64_t>(), r.moe["router_entropy"].get<double>(),
         r.moe["dropped"].get<int64_t>());
  if (metrics_ && r.record) {
    nlohmann::json rec = {{"step", r.step},
                          {"tokens", r.step * r.tokens_per_step},
                          {"train_loss", r.train_loss},
                          {"lr", r.lr},
                          {"grad_norm", r.grad_norm},
                          {"ms_per_step", r.ms},
                          {"tokens_per_s", tokens_per_s}};
    if (!r.moe.is_null()) rec["moe"] = r.moe;
    metrics_->write(rec);
  }
}

void RunLog::val_loss(int64_t step, int64_t total, int64_t tokens_per_step, double loss) {
  info("step {:>6}/{} | val loss {:.4f}", step, total, loss);
  if (metrics_) metrics_->write({{"step", step}, {"tokens", step * tokens_per_step}, {"val_loss", loss}});
}

}  // namespace eco
