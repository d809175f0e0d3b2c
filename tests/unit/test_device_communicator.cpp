// The device communicator's factory in every build (dist/device_communicator.h): have_nccl()
// says whether the build has NCCL, and make_nccl_communicator refuses, naming the reason, a
// build without NCCL or a backend that is not CUDA's; CommBytes' total counts every collective.
// (The communicator itself: tests/emu/test_collectives.cpp over an emulated NCCL, tests/gpu and
// tests/mpi on GPUs.)
#include <gtest/gtest.h>

#include <memory>

#include "dist/communicator.h"
#include "dist/device_communicator.h"
#include "expect_usage_error.h"
#include "base/backend.h"

namespace eco {
namespace {

TEST(DeviceCommunicator, HaveNcclSaysWhetherThisBuildHasNccl) {
#if defined(ECO_HAVE_NCCL)
  EXPECT_TRUE(have_nccl());
#else
  EXPECT_FALSE(have_nccl());
#endif
}

TEST(DeviceCommunicator, NcclRefusesTheCpuBackendOrABuildWithoutNcclNamingWhy) {
  std::unique_ptr<Communicator> host = make_local_communicator();
  std::unique_ptr<Backend> cpu = make_cpu_backend();
  expect_usage_error([&] { make_nccl_communicator(*host, *cpu); },
#if defined(ECO_HAVE_NCCL)
                     {"NCCL", "the backend is 'cpu'", "device: cuda"});
#elif defined(ECO_HAVE_CUDA)
                     {"NCCL", "this build has no NCCL"});
#else
                     {"NCCL", "this build has no CUDA backend and no NCCL"});
#endif
}

TEST(CommBytes, TotalCountsEveryCollective) {
  CommBytes b;
  b.all_reduce = 1;
  b.all_gather = 20;
  b.broadcast = 300;
  b.reduce_scatter = 4000;
  EXPECT_EQ(b.total(), 4321);
}

}  // namespace
}  // namespace eco
