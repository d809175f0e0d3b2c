// The busy-core measurement behind train.threads: auto (cpu_share.h).
#include "core/cpu_share.h"

#include <sched.h>
#include <time.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

namespace eco {
namespace {

double seconds(clockid_t clock) {
  timespec t{};
  clock_gettime(clock, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

bool read_proc_stat(const std::vector<int>& cpus, CpuTicks* out) {
  std::ifstream in("/proc/stat");
  if (!in) return false;
  std::stringstream text;
  text << in.rdbuf();
  *out = parse_proc_stat(text.str(), cpus);
  return out->cpus > 0;
}

}  // namespace

CpuTicks parse_proc_stat(std::string_view text, const std::vector<int>& cpus) {
  CpuTicks t;
  std::istringstream in{std::string(text)};
  std::string line;
  while (std::getline(in, line)) {
    // "cpuN user nice system idle iowait irq softirq steal guest guest_nice"; "cpu " is the sum.
    if (line.size() < 4 || line.compare(0, 3, "cpu") != 0 || !std::isdigit(uint8_t(line[3])))
      continue;
    std::istringstream fields(line.substr(3));
    int n = -1;
    uint64_t user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
    if (!(fields >> n >> user >> nice >> system >> idle)) continue;
    fields >> iowait >> irq >> softirq >> steal;  // absent on old kernels: 0
    if (std::find(cpus.begin(), cpus.end(), n) == cpus.end()) continue;
    const uint64_t busy = user + nice + system + irq + softirq + steal;
    t.busy += busy;
    t.total += busy + idle + iowait;
    ++t.cpus;
  }
  return t;
}

std::vector<int> allowed_cpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
  if (cpus.empty()) {
    const int n = std::max(1, int(std::thread::hardware_concurrency()));
    for (int c = 0; c < n; ++c) cpus.push_back(c);
  }
  return cpus;
}

int auto_thread_count(int allowed, double busy_elsewhere) {
  allowed = std::max(1, allowed);
  if (!std::isfinite(busy_elsewhere)) busy_elsewhere = 0;
  const double free_cores = double(allowed) - std::clamp(busy_elsewhere, 0.0, double(allowed));
  return std::clamp(int(std::lround(free_cores)), 1, allowed);
}

void CpuShare::start() {
  cpus_ = allowed_cpus();
  ok_ = read_proc_stat(cpus_, &ticks_);
  own_s_ = seconds(CLOCK_PROCESS_CPUTIME_ID);
  wall_s_ = seconds(CLOCK_MONOTONIC);
}

CpuShare::Result CpuShare::measure(double min_window_s) {
  Result r;
  r.allowed = int(cpus_.size());
  const double waited = seconds(CLOCK_MONOTONIC) - wall_s_;
  if (waited < min_window_s)
    std::this_thread::sleep_for(std::chrono::duration<double>(min_window_s - waited));
  CpuTicks now;
  const bool ok = ok_ && read_proc_stat(cpus_, &now) && now.cpus == ticks_.cpus;
  const double own = seconds(CLOCK_PROCESS_CPUTIME_ID) - own_s_;
  r.window_s = seconds(CLOCK_MONOTONIC) - wall_s_;
  if (!ok || now.total <= ticks_.total || r.window_s <= 0) return r;
  // Ticks to seconds through the ticks' own total: every CPU of the set counts one tick per
  // tick of wall time, busy or idle.
  const double tick_s = r.window_s * double(now.cpus) / double(now.total - ticks_.total);
  const double busy_s = double(now.busy - ticks_.busy) * tick_s;
  r.busy_elsewhere = std::clamp((busy_s - own) / r.window_s, 0.0, double(r.allowed));
  r.measured = true;
  return r;
}

int measure_auto_threads(int local_ranks, double window_s, std::string* why) {
  CpuShare share;
  share.start();
  const CpuShare::Result r = share.measure(window_s);
  local_ranks = std::max(1, local_ranks);
  const int free_threads = auto_thread_count(r.allowed, r.busy_elsewhere);
  const int n = std::clamp(int(std::lround(double(free_threads) / local_ranks)), 1, r.allowed);
  if (why) {
    const std::string cores = std::to_string(n) + " of " + std::to_string(r.allowed) +
                              (r.allowed == 1 ? " core" : " cores");
    if (r.measured) {
      char figures[96];
      std::snprintf(figures, sizeof(figures), "%.1f busy with other processes over %.2f s",
                    r.busy_elsewhere, r.window_s);
      *why = cores + ": " + figures;
      if (local_ranks > 1)
        *why += ", shared by " + std::to_string(local_ranks) + " ranks on this machine";
    } else {
      *why = cores + " (/proc/stat unreadable: no load measured)";
    }
  }
  return n;
}

}  // namespace eco
