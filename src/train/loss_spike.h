// The loss-spike detector (train.spike_factor, train.spike_window): divergence that stays finite
// (the loss climbing 1e4 -> 1e13) is caught before a checkpoint of it is written. A step's loss
// is a spike when it exceeds both spike_factor x and 1 nat above the lowest median of
// spike_window consecutive losses seen so far (of the fewer there are in a run's first steps),
// so it reacts to a sudden jump and to a slow climb alike, and not to noise at a low loss. A
// run's first loss (about ln V at initialisation, or the resumed model's) is never a spike.
#pragma once
#include <cstdint>
#include <deque>
#include <limits>
#include <optional>
#include <string>

namespace eco {

class LossSpikeDetector {
 public:
  // factor 0 disables the detector.
  LossSpikeDetector(double factor, int window) : factor_(factor), window_(size_t(window)) {}

  // Takes one step's (finite) loss: a one-line description when it is a spike, else nothing. A
  // spike is not added to the window.
  std::optional<std::string> add(double loss);

 private:
  double factor_;
  size_t window_;
  std::deque<double> recent_;  // the last window_ losses, oldest first
  double lowest_median_ = std::numeric_limits<double>::infinity();
};

}  // namespace eco
