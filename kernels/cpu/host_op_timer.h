// HostOpTimer: per-operation wall-clock timing for a synchronous backend (the CPU), the host
// twin of kernels/cuda/op_profiler.h. Each operation opens a Scope with its name; when enabled,
// the outermost scope's duration is added to that name's total (an operation implemented through
// others is not counted twice). Off: one branch per operation.
#pragma once
#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "base/backend.h"

namespace eco {

class HostOpTimer {
 public:
  class Scope {
   public:
    Scope(HostOpTimer& t, const char* name) : t_(t) {
      if (t_.on_ && t_.depth_++ == 0) {
        timed_ = true;
        name_ = name;
        start_ = std::chrono::steady_clock::now();
      }
    }
    ~Scope() {
      if (!t_.on_) return;
      --t_.depth_;
      if (!timed_) return;
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_)
              .count();
      auto& [calls, total] = t_.totals_[name_];
      calls += 1;
      total += ms;
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    HostOpTimer& t_;
    bool timed_ = false;
    const char* name_ = nullptr;
    std::chrono::steady_clock::time_point start_;
  };

  // Starts (or stops) timing; either way the totals so far are dropped.
  void set_enabled(bool on) {
    on_ = on;
    depth_ = 0;
    totals_.clear();
  }
  // The totals since enabling or the last take, largest first; resets them.
  std::vector<Backend::OpTime> take() {
    std::vector<Backend::OpTime> out;
    for (const auto& [name, ct] : totals_) out.push_back({name, ct.first, ct.second});
    totals_.clear();
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.ms > b.ms; });
    return out;
  }

 private:
  bool on_ = false;
  int depth_ = 0;
  std::map<std::string, std::pair<int64_t, double>> totals_;  // name -> calls, ms
};

}  // namespace eco
