// The loss-spike detector (see loss_spike.h).
#include "train/loss_spike.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace eco {

std::optional<std::string> LossSpikeDetector::add(double loss) {
  if (factor_ == 0) return std::nullopt;
  constexpr double kMinRiseNats = 1.0;  // noise at a low loss (0.05 -> 0.2) is no divergence
  if (std::isfinite(lowest_median_) && loss > factor_ * lowest_median_ &&
      loss > lowest_median_ + kMinRiseNats)
    return fmt::format(
        "loss {:.6g} is {:.1f} x the lowest running median {:.4f} (train.spike_factor {:g}, "
        "train.spike_window {})",
        loss, loss / lowest_median_, lowest_median_, factor_, window_);
  recent_.push_back(loss);
  if (recent_.size() > window_) recent_.pop_front();
  std::vector<double> sorted(recent_.begin(), recent_.end());
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  const double median = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  lowest_median_ = std::min(lowest_median_, median);
  return std::nullopt;
}

LossSpikeDetector::State LossSpikeDetector::state() const {
  return {std::vector<double>(recent_.begin(), recent_.end()), lowest_median_};
}

void LossSpikeDetector::restore(const State& s) {
  const size_t skip = s.recent.size() > window_ ? s.recent.size() - window_ : 0;
  recent_.assign(s.recent.begin() + std::ptrdiff_t(skip), s.recent.end());
  lowest_median_ = s.lowest_median;
}

}  // namespace eco
