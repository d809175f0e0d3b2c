// The OpenMP wait default (thread_runtime.h).
#include "kernels/cpu/thread_runtime.h"

#include <cstdlib>
#include <string>

namespace eco::cpu {
namespace {

// Set beside our own GOMP_SPINCOUNT, so that the re-executed image can tell it from the user's.
constexpr const char* kWaitMarker = "ECO_OMP_WAIT_DEFAULT";

}  // namespace

bool set_default_omp_wait() {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return false;
  setenv("GOMP_SPINCOUNT", std::to_string(kDefaultOmpSpinCount).c_str(), 1);
  setenv(kWaitMarker, "1", 1);
  return true;
}

void unset_default_omp_wait() {
  if (!std::getenv(kWaitMarker)) return;
  unsetenv("GOMP_SPINCOUNT");
  unsetenv(kWaitMarker);
}

std::string omp_wait_summary_line() {
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  const char* spin = std::getenv("GOMP_SPINCOUNT");
  if (spin && std::getenv(kWaitMarker)) return std::string("spin ") + spin + " then sleep (default)";
  std::string line;
  if (policy) line += std::string("OMP_WAIT_POLICY=") + policy;
  if (spin) line += std::string(line.empty() ? "" : ", ") + "GOMP_SPINCOUNT=" + spin;
  if (!line.empty()) return line + " (set by the user)";
  return "the OpenMP runtime's own default";
}

}  // namespace eco::cpu
