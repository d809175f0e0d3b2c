// Stop signals: the first SIGINT / SIGTERM only raises the flag the loops poll; the exit code
// follows the shell's 128 + signal; a second signal ends the process at once.
#include <gtest/gtest.h>

#include <csignal>

#include "train/signals.h"

using eco::StopSignals;

TEST(StopSignals, FirstSignalRaisesTheFlagAndNamesItsExitCode) {
  {
    const StopSignals s;
    EXPECT_FALSE(eco::stop_requested());
    std::raise(SIGTERM);
    EXPECT_TRUE(s.requested());
    EXPECT_TRUE(eco::stop_requested());
    EXPECT_EQ(s.exit_code(), 143);
  }
  EXPECT_FALSE(eco::stop_requested()) << "the flag outlived its scope";
  const StopSignals s;
  std::raise(SIGINT);
  EXPECT_EQ(s.exit_code(), 130);
}

TEST(StopSignalsDeathTest, SecondSignalExitsAtOnce) {
  EXPECT_EXIT(
      {
        const StopSignals s;
        std::raise(SIGINT);
        std::raise(SIGINT);
        std::_Exit(0);  // not reached
      },
      ::testing::ExitedWithCode(130), "second signal");
  EXPECT_EXIT(
      {
        const StopSignals s;
        std::raise(SIGTERM);
        std::raise(SIGTERM);
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(143), "second signal");
}
