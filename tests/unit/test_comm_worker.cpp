// dist/comm_worker.h: jobs run in posting order on one thread other than the poster's, wait()
// returns when all have run, and a job's exception reaches wait() with the later jobs dropped.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "dist/comm_worker.h"

namespace eco {
namespace {

TEST(CommWorker, RunsJobsInOrderOnAnotherThread) {
  CommWorker w;
  std::vector<int> order;  // written by the worker only, read after wait()
  std::vector<std::thread::id> ids;
  for (int i = 0; i < 100; ++i)
    w.post([&order, &ids, i] {
      if (i % 10 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
      order.push_back(i);
      ids.push_back(std::this_thread::get_id());
    });
  w.wait();
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[size_t(i)], i);
  for (const auto& id : ids) EXPECT_EQ(id, ids[0]);
  EXPECT_NE(ids[0], std::this_thread::get_id());
  EXPECT_EQ(w.jobs_run(), 100);
}

TEST(CommWorker, WaitBlocksUntilTheRunningJobEnds) {
  CommWorker w;
  std::atomic<bool> done{false};
  w.post([&done] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    done = true;
  });
  w.wait();
  EXPECT_TRUE(done.load());
  w.wait();  // nothing posted: returns at once
}

TEST(CommWorker, AJobsExceptionReachesWaitAndDropsTheRest) {
  CommWorker w;
  int after = 0;
  w.post([] { throw std::runtime_error("collective failed"); });
  w.post([&after] { ++after; });
  try {
    w.wait();
    FAIL() << "wait() did not rethrow";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "collective failed");
  }
  EXPECT_EQ(after, 0);
  // The worker serves again after the error was reported.
  w.post([&after] { ++after; });
  w.wait();
  EXPECT_EQ(after, 1);
}

TEST(CommWorker, DestroyedWithJobsPendingDoesNotHang) {
  std::atomic<int> ran{0};
  {
    CommWorker w;
    for (int i = 0; i < 5; ++i)
      w.post([&ran] {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        ++ran;
      });
  }
  EXPECT_LE(ran.load(), 5);
}

}  // namespace
}  // namespace eco
