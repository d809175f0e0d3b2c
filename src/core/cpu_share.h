// How many of this process's cores other processes keep busy, from /proc/stat, and the thread
// count train.threads: auto takes from it.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace eco {

// Busy and total time of a set of CPUs, in clock ticks, from /proc/stat's per-CPU lines.
struct CpuTicks {
  uint64_t busy = 0;   // user, nice, system, irq, softirq, steal
  uint64_t total = 0;  // busy + idle + iowait
  int cpus = 0;        // CPUs of the set found in the text
};
// `text` is /proc/stat's content; `cpus` the CPU numbers to count (lines "cpuN").
CpuTicks parse_proc_stat(std::string_view text, const std::vector<int>& cpus);

// The CPUs this process may run on (sched_getaffinity), at least one entry.
std::vector<int> allowed_cpus();

// The thread count auto picks: the allowed cores less those other processes keep busy, rounded
// to nearest, at least 1 and at most `allowed`.
int auto_thread_count(int allowed, double busy_elsewhere);

// The thread count for train.threads: auto, measured now over `window_s` (the call sleeps that
// long): auto_thread_count of the cores other processes leave free, shared out among the
// `local_ranks` processes of one run on this machine (dist/communicator.h's local_ranks(); a
// run's own ranks measure at the same time, so none sees the others busy yet). `why` gets the
// figures for the log: "1 of 2 cores: 1.9 busy with other processes over 0.20 s".
int measure_auto_threads(int local_ranks, double window_s, std::string* why);

// How many of this process's allowed cores other processes keep busy: the machine's busy time on
// those CPUs less this process's own CPU time, between start() and measure().
class CpuShare {
 public:
  void start();
  struct Result {
    int allowed = 0;              // cores this process may run on
    double busy_elsewhere = 0;    // of those, kept busy by other processes (cores)
    double window_s = 0;          // the wall time measured over
    bool measured = false;        // false: /proc/stat unreadable; busy_elsewhere is 0
  };
  // Waits until at least `min_window_s` has passed since start(), then measures.
  Result measure(double min_window_s);

 private:
  std::vector<int> cpus_;
  CpuTicks ticks_;
  double own_s_ = 0, wall_s_ = 0;
  bool ok_ = false;
};

}  // namespace eco
