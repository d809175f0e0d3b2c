// SIGINT / SIGTERM during a run: the first one only raises a flag. The training loop checks it
// after each step, and the micro-batch, evaluation and sampling loops between their batches, so
// a run stops within one step or one eval batch: it saves a checkpoint and exits 130 (SIGINT) or
// 143 (SIGTERM), the shell's 128 + signal. A second signal exits at once, without a checkpoint,
// with the same convention. Handlers live for one scope.
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
  // 128 + the signal that arrived (130 SIGINT, 143 SIGTERM); 0 when none did.
  int exit_code() const;

 private:
  void (*previous_int_)(int);
  void (*previous_term_)(int);
};

// Whether a stop signal has arrived in the current StopSignals scope (false outside one): what
// the inner loops poll.
bool stop_requested();

}  // namespace eco
