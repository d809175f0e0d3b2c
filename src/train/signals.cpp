// The stop flag of SIGINT / SIGTERM (async-signal-safe: the handler writes one sig_atomic_t).
#include "train/signals.h"

#include <csignal>

namespace eco {
namespace {

volatile std::sig_atomic_t g_stop_requested = 0;
void on_stop_signal(int) { g_stop_requested = 1; }

}  // namespace

StopSignals::StopSignals() {
  g_stop_requested = 0;
  previous_int_ = std::signal(SIGINT, on_stop_signal);
  previous_term_ = std::signal(SIGTERM, on_stop_signal);
}

StopSignals::~StopSignals() {
  std::signal(SIGINT, previous_int_ == SIG_ERR ? SIG_DFL : previous_int_);
  std::signal(SIGTERM, previous_term_ == SIG_ERR ? SIG_DFL : previous_term_);
}

bool StopSignals::requested() const { return g_stop_requested != 0; }

}  // namespace eco
