// The stop flag of SIGINT / SIGTERM (async-signal-safe: the handler writes one sig_atomic_t, or,
// on a second signal, write(2)s one line and _exit(2)s).
#include "train/signals.h"

#include <unistd.h>

#include <csignal>

namespace eco {
namespace {

volatile std::sig_atomic_t g_stop_signal = 0;  // the first signal's number, 0 before

void on_stop_signal(int sig) {
  if (g_stop_signal != 0) {
    constexpr char kMsg[] = "eco-train: second signal: exiting now, without a checkpoint\n";
    [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, kMsg, sizeof kMsg - 1);
    ::_exit(128 + sig);
  }
  g_stop_signal = sig;
}

}  // namespace

StopSignals::StopSignals() {
  g_stop_signal = 0;
  previous_int_ = std::signal(SIGINT, on_stop_signal);
  previous_term_ = std::signal(SIGTERM, on_stop_signal);
}

StopSignals::~StopSignals() {
  std::signal(SIGINT, previous_int_ == SIG_ERR ? SIG_DFL : previous_int_);
  std::signal(SIGTERM, previous_term_ == SIG_ERR ? SIG_DFL : previous_term_);
  g_stop_signal = 0;
}

bool StopSignals::requested() const { return g_stop_signal != 0; }

int StopSignals::exit_code() const { return g_stop_signal != 0 ? 128 + g_stop_signal : 0; }

bool stop_requested() { return g_stop_signal != 0; }

}  // namespace eco
