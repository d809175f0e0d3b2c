// Test-only faults (see test_faults.h).
#include "core/test_faults.h"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <unistd.h>

namespace eco {

void stall_for_test(const char* where, int rank) {
  const char* at = std::getenv("ECO_TEST_STALL_AT");
  if (!at || rank < 0 || std::string(at) != std::string(where) + ":" + std::to_string(rank))
    return;
  // The pid lets the test end this process should the launcher not.
  std::fprintf(stderr, "eco-train: test: rank %d (pid %d) stops at %s\n", rank, int(getpid()),
               where);
  std::fflush(stderr);
  std::raise(SIGSTOP);
}

void slow_checkpoint_for_test() {
  const char* s = std::getenv("ECO_TEST_SLOW_CHECKPOINT_S");
  if (!s) return;
  std::this_thread::sleep_for(std::chrono::duration<double>(std::atof(s)));
}

}  // namespace eco
