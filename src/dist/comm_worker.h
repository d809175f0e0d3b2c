// One thread that runs collectives in the order they are posted, while the thread that posts
// them goes on computing: the data-parallel gradient sum of a layer overlaps the backward of the
// layers below it (dist/parallel_plan.h). Only one thread calls the communicator at a time: the
// poster calls none between its first post() and wait(). A job that throws stops the worker's
// queue; wait() rethrows its exception on the posting thread.
#pragma once
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace eco {

class CommWorker {
 public:
  CommWorker();
  ~CommWorker();  // jobs not started are dropped; a running one is waited for
  CommWorker(const CommWorker&) = delete;
  CommWorker& operator=(const CommWorker&) = delete;

  void post(std::function<void()> job);
  // Returns when every posted job has run; rethrows the first job's exception, if one threw
  // (the jobs posted after it are dropped).
  void wait();
  // Jobs run by this worker since it started (for tests and the run log).
  int64_t jobs_run() const;

 private:
  void loop();

  mutable std::mutex mu_;
  std::condition_variable cv_;       // to the worker: a job or quit
  std::condition_variable idle_cv_;  // to wait(): the queue ran empty
  std::deque<std::function<void()>> jobs_;
  bool running_ = false, quit_ = false;
  std::exception_ptr error_;
  int64_t jobs_run_ = 0;
  std::thread thread_;  // last: started after the state above exists
};

}  // namespace eco
