// The loss-spike detector (train.spike_factor, train.spike_window): divergence that stays finite
// (the loss climbing 1e4 -> 1e13) is caught before a checkpoint of it is written. A step's loss
// is a spike when it exceeds both spike_factor x and 1 nat above the lowest median of
// spike_window consecutive losses seen so far (of the fewer there are in a run's first steps),
// so it reacts to a sudden jump and to a slow climb alike, and not to noise at a low loss. A
// run's first loss (about ln V at initialisation) is never a spike; a resumed run takes the
// detector's state from its checkpoint, so its first loss is judged as in the run it continues.
#pragma once
#include <cstdint>
#include <deque>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace eco {

class LossSpikeDetector {
 public:
  // factor 0 disables the detector.
  LossSpikeDetector(double factor, int window) : factor_(factor), window_(size_t(window)) {}

  // Takes one step's (finite) loss: a one-line description when it is a spike, else nothing. A
  // spike is not added to the window.
  std::optional<std::string> add(double loss);

  // What the detector has seen: the window's losses, oldest first, and the lowest running median
  // (infinite before the first loss). Checkpoints carry it.
  struct State {
    std::vector<double> recent;
    double lowest_median = std::numeric_limits<double>::infinity();
  };
  State state() const;
  // Continues from `s` (a resumed run); of a window longer than this detector's, the newest
  // losses are kept.
  void restore(const State& s);

 private:
  double factor_;
  size_t window_;
  std::deque<double> recent_;  // the last window_ losses, oldest first
  double lowest_median_ = std::numeric_limits<double>::infinity();
};

}  // namespace eco
