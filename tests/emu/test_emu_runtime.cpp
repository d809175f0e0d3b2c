// The emulator's launches themselves (shim/cuda_runtime.h, shim/emu_fibers.h): a block's CUDA
// threads run as fibers on the launching host thread, each with its own indices, barrier count
// and stack across every switch; exited threads drop out of the barriers; a shuffle from an
// exited lane and a barrier the other threads can never reach abort.
#include <thread>
#include <vector>

#include "emu_common.h"

namespace {

// A (32, 4) block over a (2, 3) grid: each thread fills a stack array with its own id, then
// passes block barriers, warp barriers and shuffles (a warp sum) in between, and must find its
// indices and its array as it left them.
void run_block_of_fibers(std::vector<int>* bad, std::vector<int>* sums) {
  emu_launch(dim3(2, 3), dim3(32, 4), [=] {
    const int t = int(threadIdx.x + 32 * threadIdx.y);
    const int b = int(blockIdx.x + 2 * blockIdx.y);
    const uint3 ti = threadIdx, bi = blockIdx;
    volatile int own[2048];  // 8 KiB of this fiber's stack
    for (int i = 0; i < 2048; ++i) own[i] = t * 7 + b;
    int sum = t;
    for (int round = 0; round < 3; ++round) {
      __syncthreads();
      for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      __syncwarp();
    }
    for (int i = 0; i < 2048; ++i)
      if (own[i] != t * 7 + b) ++(*bad)[size_t(b * 128 + t)];
    if (threadIdx.x != ti.x || threadIdx.y != ti.y || blockIdx.x != bi.x || blockIdx.y != bi.y)
      ++(*bad)[size_t(b * 128 + t)];
    (*sums)[size_t(b * 128 + t)] = sum;
  });
}

TEST(EmuRuntime, EachThreadKeepsItsIndicesAndStackAcrossBarriersAndShuffles) {
  std::vector<int> bad(6 * 128, 0), sums(6 * 128, -1);
  run_block_of_fibers(&bad, &sums);
  for (int b = 0; b < 6; ++b)
    for (int t = 0; t < 128; ++t) {
      const int w = t / 32, warp_sum = 32 * 32 * w + 31 * 16;  // of ids 32 w .. 32 w + 31
      const int expect = 32 * 32 * warp_sum;  // each round after the first multiplies by 32
      EXPECT_EQ(bad[size_t(b * 128 + t)], 0) << "block " << b << " thread " << t;
      EXPECT_EQ(sums[size_t(b * 128 + t)], expect) << "block " << b << " thread " << t;
    }
  // The same from another host thread (its own fibers and stacks).
  std::vector<int> bad2(6 * 128, 0), sums2(6 * 128, -1);
  std::thread([&] { run_block_of_fibers(&bad2, &sums2); }).join();
  EXPECT_EQ(bad2, bad);
  EXPECT_EQ(sums2, sums);
}

// A quarter of the block returns at once, the rest pass three __syncthreads: as on the GPU, the
// exited threads no longer count (and the barriers reached after an exit are counted).
TEST(EmuRuntime, ExitedThreadsDropOutOfTheBlockBarrier) {
  const long before = emu::syncs_after_exit;
  std::vector<int> passed(64, 0);
  emu_launch(dim3(1), dim3(64), [&] {
    if (threadIdx.x % 4 == 3) return;
    for (int i = 0; i < 3; ++i) {
      __syncthreads();
      ++passed[threadIdx.x];
    }
  });
  for (int t = 0; t < 64; ++t) EXPECT_EQ(passed[size_t(t)], t % 4 == 3 ? 0 : 3) << t;
  EXPECT_GT(emu::syncs_after_exit - before, 0);
}

TEST(EmuRuntimeDeathTest, AShuffleFromAnExitedLaneAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const auto shuffle_from_exited = [] {
    emu_launch(dim3(1), dim3(32), [] {
      if (threadIdx.x == 31) return;
      (void)__shfl_down_sync(0xffffffffu, 1.0f, 1);
    });
  };
  EXPECT_DEATH(shuffle_from_exited(), "shuffle reads a lane that has exited");
}

// Lane 0 waits in a shuffle for its warp while the other 31 wait at __syncthreads for lane 0:
// a hang on the GPU (and under the emulator's former threads); here an abort naming both.
TEST(EmuRuntimeDeathTest, ABarrierTheOtherThreadsNeverReachAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const auto deadlock = [] {
    emu_launch(dim3(2), dim3(32), [] {
      if (blockIdx.x == 0) return;
      if (threadIdx.x == 0)
        (void)__shfl_sync(0xffffffffu, 1, 0);
      else
        __syncthreads();
    });
  };
  EXPECT_DEATH(deadlock(),
               "deadlock, no thread of the block can go on: 1 waits in __shfl_sync at warp 0's "
               "barrier \\(1 of 32 arrived; thread 0,0,0 first\\); 31 wait in __syncthreads at "
               "the block barrier \\(31 of 32 arrived; thread 1,0,0 first\\) \\(block 1,0,0\\)");
}

}  // namespace
