// Whether ranks share a GPU (dist/gpu_sharing.h), judged by each rank's (host, PCI bus id) and,
// for a rank that does not know its device, by the launcher's count. The multi-rank gathering is
// checked under mpirun (tests/mpi/test_communicator.cpp, GpuSharing.*).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "dist/gpu_sharing.h"

namespace {

using eco::any_gpu_shared;
using eco::gpu_record;

// Sets an environment variable for a scope (restoring its absence).
struct ScopedEnv {
  const char* name;
  ScopedEnv(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
  ~ScopedEnv() { unsetenv(name); }
};

TEST(GpuSharing, TwoRanksOnOneBusIdOfOneHostShare) {
  EXPECT_TRUE(any_gpu_shared({gpu_record("a", "0000:41:00.0"), gpu_record("a", "0000:41:00.0")}));
  EXPECT_TRUE(any_gpu_shared({gpu_record("a", "0000:01:00.0"), gpu_record("b", "0000:01:00.0"),
                              gpu_record("a", "0000:02:00.0"), gpu_record("a", "0000:01:00.0")}));
}

TEST(GpuSharing, OneGpuPerTaskDoesNotShareAlthoughEachSeesOneDevice) {
  // Slurm's common layout: 4 tasks a node, each seeing its own GPU as device 0; the same bus ids
  // on another node are other GPUs.
  std::vector<std::string> records;
  for (const char* host : {"node1", "node2"})
    for (const char* bus : {"0000:01:00.0", "0000:41:00.0", "0000:81:00.0", "0000:c1:00.0"})
      records.push_back(gpu_record(host, bus));
  EXPECT_FALSE(any_gpu_shared(records));
}

TEST(GpuSharing, ARankThatKnowsItsDeviceIsNotJudgedByTheLaunchersCount) {
  ASSERT_EQ(std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE"), nullptr) << "run this test alone";
  const ScopedEnv tasks("SLURM_NTASKS_PER_NODE", "4");
  ASSERT_EQ(eco::local_ranks(), 4);
  auto world = eco::make_local_communicator();
  // 4 tasks on this node and 1 visible GPU: the count alone would say shared.
  EXPECT_FALSE(eco::ranks_share_a_gpu(*world, "0000:41:00.0", 1));
  // Without a bus id the count is all there is.
  EXPECT_TRUE(eco::ranks_share_a_gpu(*world, "", 1));
  EXPECT_FALSE(eco::ranks_share_a_gpu(*world, "", 4));
}

}  // namespace
