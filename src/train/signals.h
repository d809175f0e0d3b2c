// SIGINT / SIGTERM during a run: the handler only raises a flag, and the training loop, checking
// it after each step, saves a checkpoint and stops (exit code 130). Handlers live for one scope.
#pragma once

namespace eco {

class StopSignals {
 public:
  // Clears the flag and installs the handlers; the destructor puts the previous ones back.
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // True once SIGINT or SIGTERM has arrived in this scope.
  bool requested() const;

 private:
  void (*previous_int_)(int);
  void (*previous_term_)(int);
};

}  // namespace eco
