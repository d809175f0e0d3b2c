#include "dist/comm_worker.h"

#include <utility>

namespace eco {

CommWorker::CommWorker() : thread_([this] { loop(); }) {}

CommWorker::~CommWorker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
    jobs_.clear();
  }
  cv_.notify_all();
  thread_.join();
}

void CommWorker::post(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_) return;  // the queue stopped at a failed job: wait() reports it
    jobs_.push_back(std::move(job));
  }
  cv_.notify_one();
}

void CommWorker::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  // A failed job sets error_ after clearing running_ (loop()), so either way nothing runs now.
  idle_cv_.wait(lock, [this] { return (jobs_.empty() && !running_) || error_; });
  if (error_) {
    std::exception_ptr e = std::exchange(error_, nullptr);
    jobs_.clear();
    std::rethrow_exception(e);
  }
}

int64_t CommWorker::jobs_run() const {
  std::lock_guard<std::mutex> lock(mu_);
  return jobs_run_;
}

void CommWorker::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return quit_ || !jobs_.empty(); });
    if (quit_) return;
    std::function<void()> job = std::move(jobs_.front());
    jobs_.pop_front();
    running_ = true;
    lock.unlock();
    std::exception_ptr e;
    try {
      job();
    } catch (...) {
      e = std::current_exception();
    }
    lock.lock();
    running_ = false;
    ++jobs_run_;
    if (e) {
      error_ = e;
      jobs_.clear();
    }
    idle_cv_.notify_all();
  }
}

}  // namespace eco
