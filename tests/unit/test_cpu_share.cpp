// The busy-core measurement behind train.threads: auto: /proc/stat parsing on fixed text, the
// thread count it picks, and a measurement with another process spinning beside it.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <limits>
#include <string>
#include <vector>

#include "core/cpu_share.h"

namespace {

// Two CPUs: user nice system idle iowait irq softirq steal guest guest_nice.
constexpr const char* kStat =
    "cpu  300 0 60 900 10 0 5 0 0 0\n"
    "cpu0 100 0 20 500 5 0 2 0 0 0\n"
    "cpu1 200 0 40 400 5 0 3 7 0 0\n"
    "intr 12345 0 0\n"
    "ctxt 999\n"
    "cpu12 1 2 3 4\n";  // an old kernel's short line

TEST(CpuShare, ProcStatSumsTheListedCpusOnly) {
  const eco::CpuTicks both = eco::parse_proc_stat(kStat, {0, 1});
  EXPECT_EQ(both.cpus, 2);
  EXPECT_EQ(both.busy, uint64_t(100 + 20 + 2 + 200 + 40 + 3 + 7));
  EXPECT_EQ(both.total, both.busy + 500 + 5 + 400 + 5);
  const eco::CpuTicks one = eco::parse_proc_stat(kStat, {1});
  EXPECT_EQ(one.cpus, 1);
  EXPECT_EQ(one.busy, uint64_t(200 + 40 + 3 + 7));
  const eco::CpuTicks old = eco::parse_proc_stat(kStat, {12});
  EXPECT_EQ(old.cpus, 1);
  EXPECT_EQ(old.busy, uint64_t(1 + 2 + 3));
  EXPECT_EQ(old.total, uint64_t(1 + 2 + 3 + 4));
  EXPECT_EQ(eco::parse_proc_stat(kStat, {5}).cpus, 0);
  EXPECT_EQ(eco::parse_proc_stat("garbage\ncpu\ncpuX 1 2\n", {0}).cpus, 0);
}

TEST(CpuShare, AutoTakesTheCoresLeftFreeRoundedAndAtLeastOne) {
  struct Case {
    int allowed;
    double busy, want;
  };
  const Case cases[] = {{2, 0.0, 2}, {2, 0.4, 2}, {2, 0.6, 1}, {2, 1.0, 1},  // 1.0: lround(1.0)
                        {2, 2.0, 1}, {2, 5.0, 1}, {8, 2.6, 5}, {8, -1.0, 8},
                        {1, 0.0, 1}, {0, 0.0, 1}, {4, std::numeric_limits<double>::infinity(), 4}};
  for (const Case& c : cases)
    EXPECT_EQ(eco::auto_thread_count(c.allowed, c.busy), c.want)
        << c.allowed << " cores, " << c.busy << " busy";
}

TEST(CpuShare, AllowedCpusAreThisProcessesAffinity) {
  const std::vector<int> cpus = eco::allowed_cpus();
  ASSERT_FALSE(cpus.empty());
  for (int c : cpus) EXPECT_GE(c, 0);
}

// A child process spins through the window: at least half a core counts as busy elsewhere (the
// window is 0.3 s; /proc/stat counts in 10 ms ticks). Our own spinning thread does not count.
TEST(CpuShare, AnotherProcessSpinningCountsAsBusy) {
  eco::CpuShare share;
  share.start();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    volatile unsigned long x = 0;
    for (;;) x = x + 1;
  }
  const eco::CpuShare::Result r = share.measure(0.3);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  if (!r.measured) GTEST_SKIP() << "/proc/stat unreadable here";
  EXPECT_GE(r.window_s, 0.3);
  EXPECT_GE(r.busy_elsewhere, 0.5) << "of " << r.allowed << " cores";
  EXPECT_LE(r.busy_elsewhere, double(r.allowed));
}

TEST(CpuShare, AutoSharesTheFreeCoresAmongTheRunsRanks) {
  std::string why;
  const int one = eco::measure_auto_threads(1, 0.05, &why);
  EXPECT_GE(one, 1);
  EXPECT_NE(why.find("core"), std::string::npos) << why;
  const int many = eco::measure_auto_threads(1000, 0.05, &why);
  EXPECT_EQ(many, 1);
  EXPECT_NE(why.find("shared by 1000 ranks"), std::string::npos) << why;
}

}  // namespace
