// The NCCL communicator on one GPU (kernels/cuda/nccl_communicator.cpp through
// make_nccl_communicator, over a LocalCommunicator: world 1) and the rank-order fold kernel
// (collectives.cu) on the device. World 1 is every call's identity but for the sum's 0 + x (a -0
// becomes +0, as LocalCommunicator's), with 0 bytes sent; the calls run through NCCL itself
// (ncclCommInitRank, the group calls, ncclBroadcast) on the backend's stream; all_to_all_v's
// one block (to itself) is a device copy, a broadcast leaves the bytes as they were. Several ranks:
// tests/mpi/test_nccl_communicator.cpp (2 GPUs) and tests/emu (an emulated NCCL).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "dist/communicator.h"
#include "dist/device_communicator.h"
#include "gpu_test.h"
#include "kernels/cuda/collectives.cuh"
#include "base/backend.h"

namespace eco {
namespace {

using gputest::poison;
using gputest::same_bits;
using gputest::to_device;
using gputest::to_host;

#define ECO_REQUIRE_NCCL()                                                                \
  do {                                                                                    \
    ECO_REQUIRE_GPU();                                                                    \
    if (!have_nccl()) GTEST_SKIP() << "this build has no NCCL: skipped";                  \
  } while (0)

// n values with a -0 first, an inf and a NaN (when n allows), normals elsewhere.
std::vector<float> values(size_t n, uint64_t seed) {
  std::vector<float> x = gputest::randn(n, seed, 3.0f);
  x[0] = -0.0f;
  if (n > 2) {
    x[1] = INFINITY;
    x[2] = NAN;
  }
  return x;
}

TEST(GpuNccl, OneRankAllReduceIsZeroPlusXAndSendsNothing) {
  ECO_REQUIRE_NCCL();
  std::unique_ptr<Backend> be = make_cuda_backend();
  std::unique_ptr<Communicator> host = make_local_communicator();
  std::unique_ptr<DeviceCommunicator> comm = make_nccl_communicator(*host, *be);
  EXPECT_EQ(comm->name(), "nccl");
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->world(), 1);
  for (size_t n : {size_t(1), size_t(1000), size_t(1) << 20}) {
    const std::vector<float> x = values(n, 100 + n);
    cuda::DeviceBuffer d = to_device(x);
    comm->all_reduce_sum(d.get<float>(), int64_t(n));
    be->synchronize();
    std::vector<float> want = x;
    host->all_reduce_sum(want.data(), int64_t(n));  // LocalCommunicator: 0 + x
    EXPECT_TRUE(same_bits(to_host<float>(d, n), want)) << "n " << n;
  }
  EXPECT_EQ(comm->bytes_sent().total(), 0);
  bool recorded = false;
  for (const auto& e : be->ledger().entries()) recorded |= e.name == "nccl receive buffer";
  EXPECT_TRUE(recorded) << "the receive buffer is not in the backend's ledger";
}

TEST(GpuNccl, OneRankReduceScatterAndAllGatherAreTheIdentity) {
  ECO_REQUIRE_NCCL();
  std::unique_ptr<Backend> be = make_cuda_backend();
  std::unique_ptr<Communicator> host = make_local_communicator();
  std::unique_ptr<DeviceCommunicator> comm = make_nccl_communicator(*host, *be);
  const size_t n = 4099;
  const std::vector<float> x = values(n, 7);
  cuda::DeviceBuffer d = to_device(x);
  comm->reduce_scatter_sum(d.get<float>(), {0, int64_t(n)});
  be->synchronize();
  std::vector<float> want = x;
  want[0] = 0.0f;  // 0 + -0
  EXPECT_TRUE(same_bits(to_host<float>(d, n), want));

  std::vector<unsigned char> bytes(1001);
  for (size_t j = 0; j < bytes.size(); ++j) bytes[j] = static_cast<unsigned char>(j * 37 + 5);
  cuda::DeviceBuffer b = to_device(bytes);
  comm->all_gather(b.get(), {0, int64_t(bytes.size())});
  be->synchronize();
  EXPECT_EQ(to_host<unsigned char>(b, bytes.size()), bytes);
  comm->all_gather(b.get(), {0, 0});  // nothing to move
  be->synchronize();
  EXPECT_EQ(comm->bytes_sent().total(), 0);
}

TEST(GpuNccl, OneRankAllToAllVIsADeviceCopyAndBroadcastTheIdentity) {
  ECO_REQUIRE_NCCL();
  std::unique_ptr<Backend> be = make_cuda_backend();
  std::unique_ptr<Communicator> host = make_local_communicator();
  std::unique_ptr<DeviceCommunicator> comm = make_nccl_communicator(*host, *be);
  for (size_t n : {size_t(1), size_t(4099), size_t(3) << 20}) {
    std::vector<unsigned char> bytes(n);
    for (size_t j = 0; j < n; ++j) bytes[j] = static_cast<unsigned char>(j * 37 + n);
    cuda::DeviceBuffer send = to_device(bytes);
    cuda::DeviceBuffer recv(n + 64);
    poison(recv);  // the 64 bytes past the block must stay poisoned
    const std::vector<unsigned char> poisoned = to_host<unsigned char>(recv, n + 64);
    comm->all_to_all_v(send.get(), {int64_t(n)}, recv.get(), {int64_t(n)});
    be->synchronize();
    std::vector<unsigned char> want(bytes);
    want.insert(want.end(), poisoned.end() - 64, poisoned.end());
    EXPECT_EQ(to_host<unsigned char>(recv, n + 64), want) << "n " << n;
    comm->broadcast(send.get(), int64_t(n), 0);
    be->synchronize();
    EXPECT_EQ(to_host<unsigned char>(send, n), bytes) << "n " << n;
  }
  comm->all_to_all_v(nullptr, {0}, nullptr, {0});  // an empty block needs no buffers
  EXPECT_THROW(comm->all_to_all_v(nullptr, {4}, nullptr, {3}), Error);  // refused, nothing sent
  be->synchronize();
  EXPECT_EQ(comm->bytes_sent().total(), 0);  // nothing left the process
}

TEST(GpuNccl, FoldOnTheDeviceIsTheCpusRankOrderSum) {
  ECO_REQUIRE_GPU();
  for (int w : {1, 2, 3, 4, 8})
    for (int64_t n : {int64_t(1), int64_t(257), int64_t(100003)}) {
      const int64_t stride = n + 5;
      std::vector<float> recv = gputest::randn(size_t(w * stride), uint64_t(w * 1000 + n), 1e4f);
      for (int r = 0; r < w; ++r) recv[size_t(r * stride)] = -0.0f;  // sums to +0
      cuda::DeviceBuffer d_recv = to_device(recv);
      cuda::DeviceBuffer d_out(size_t(n) * sizeof(float));
      poison(d_out);
      ECO_CHECK_CUDA(cuda::fold_rank_order(d_out.get<float>(), d_recv.get<float>(), w, n, stride));
      ECO_CHECK_CUDA(cudaDeviceSynchronize());
      std::vector<float> want(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        float acc = 0.0f;
        for (int r = 0; r < w; ++r) acc += recv[size_t(r * stride + i)];
        want[size_t(i)] = acc;
      }
      EXPECT_TRUE(same_bits(to_host<float>(d_out, size_t(n)), want)) << "world " << w << " n " << n;
    }
}

}  // namespace
}  // namespace eco
