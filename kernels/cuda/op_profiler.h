// OpProfiler: the CUDA backend's per-operation timing and NVTX ranges (host code).
//
// Every backend operation opens a Scope with its name. The scope always pushes an NVTX range
// (what Nsight Systems shows; free when no tool is attached). When profiling is on, it also
// records a CUDA event before and after the operation's launches on the backend's stream; the
// elapsed times are folded into per-name totals whenever enough pairs are pending (the events are
// then reused) and when the totals are read, which synchronizes the stream. Only the outermost
// scope is timed, so an operation implemented through others is not counted twice.
//
// Overhead when on: two cudaEventRecord calls per operation (a few microseconds of host time; the
// GPU timeline is barely touched). Off: one branch and the NVTX push/pop.
#pragma once
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>


namespace eco::cuda {

class OpProfiler {
 public:
  struct Total {
    int64_t calls = 0;
    double ms = 0;
  };

  OpProfiler() = default;
  OpProfiler(const OpProfiler&) = delete;
  OpProfiler& operator=(const OpProfiler&) = delete;
  ~OpProfiler() {
    for (auto& p : pending_) free_.push_back(p.start), free_.push_back(p.stop);
    for (cudaEvent_t e : free_) cudaEventDestroy(e);
  }

  class Scope {
   public:
    Scope(OpProfiler& p, const char* name, cudaStream_t s) : p_(p), s_(s) {
      nvtxRangePushA(name);
      timed_ = p_.on_ && p_.depth_++ == 0;
      if (timed_) {
        name_ = name;
        start_ = p_.event();
        timed_ = start_ && cudaEventRecord(start_, s_) == cudaSuccess;
      }
    }
    // Does not throw (it may run during unwinding): a failed record surfaces at the next
    // checked CUDA call, and an unrecorded pair is dropped.
    ~Scope() {
      if (timed_) {
        cudaEvent_t stop = p_.event();
        if (stop && cudaEventRecord(stop, s_) == cudaSuccess)
          p_.pending_.push_back({name_, start_, stop});
        if (p_.pending_.size() >= kFoldAt) p_.fold();
      }
      if (p_.on_) --p_.depth_;
      nvtxRangePop();
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    OpProfiler& p_;
    cudaStream_t s_;
    bool timed_ = false;
    const char* name_ = nullptr;
    cudaEvent_t start_ = nullptr;
  };

  // Starts (or stops) timing; either way the totals so far are dropped.
  void set_enabled(bool on) {
    fold();
    totals_.clear();
    on_ = on;
    depth_ = 0;
  }
  bool enabled() const { return on_; }

  // The per-operation totals since set_enabled / the last take(), largest first; resets them.
  // Synchronizes with the recorded events.
  std::vector<std::pair<std::string, Total>> take() {
    fold();
    std::vector<std::pair<std::string, Total>> out(totals_.begin(), totals_.end());
    totals_.clear();
    std::sort(out.begin(), out.end(),
              [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
    return out;
  }

 private:
  static constexpr size_t kFoldAt = 4096;  // pending pairs before they are folded into totals
  struct Pending {
    const char* name;
    cudaEvent_t start, stop;
  };

  // Timing never fails the run: an event that cannot be created or read is a dropped sample
  // (a real device error surfaces at the backend's next checked call).
  cudaEvent_t event() noexcept {
    if (!free_.empty()) {
      cudaEvent_t e = free_.back();
      free_.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    return cudaEventCreate(&e) == cudaSuccess ? e : nullptr;
  }
  // Waits for the pending stops, adds their elapsed times, recycles the events.
  void fold() noexcept {
    for (const Pending& p : pending_) {
      float ms = 0;
      if (cudaEventSynchronize(p.stop) == cudaSuccess &&
          cudaEventElapsedTime(&ms, p.start, p.stop) == cudaSuccess) {
        Total& t = totals_[p.name];
        t.calls += 1;
        t.ms += ms;
      }
      free_.push_back(p.start);
      free_.push_back(p.stop);
    }
    pending_.clear();
  }

  bool on_ = false;
  int depth_ = 0;
  std::vector<Pending> pending_;
  std::vector<cudaEvent_t> free_;
  std::map<std::string, Total> totals_;
};

}  // namespace eco::cuda
