// The NCCL communicator against the MPI communicator under mpirun -np 2 and -np 4 (ctest
// mpi.np2 / mpi.np4.NcclCommunicator; CUDA builds with NCCL and MPI): every rank on its GPU
// (make_cuda_backend: local rank modulo the GPUs), the same data summed through both:
//  - all_reduce_sum's bits equal MpiCommunicator's on every rank (ragged sizes, and one past a
//    million elements), and so do the bytes counted;
//  - reduce_scatter_sum with ragged bounds leaves each rank its chunk of the MPI sum;
//  - all_gather with ragged byte ranges delivers every rank's bytes;
//  - broadcast from every root delivers the root's bytes;
//  - all_to_all_v over uneven and empty blocks receives what MpiCommunicator's receives, and
//    counts the same bytes.
// (Two terms add the same in either order: the order itself shows at 4 ranks.) It runs only
// where NCCL can: a GPU per rank, or NCCL >= 2.30 with NCCL_MULTI_RANK_GPU_ENABLE=1 (earlier
// NCCL refuses two ranks on one GPU: "Duplicate GPU detected"); otherwise every rank exits 77,
// each rank that cannot run saying why. A failure on any rank fails the job.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "dist/device_communicator.h"
#include "dist/mpi_communicator.h"
#include "kernels/cuda/device_buffer.h"
#include "base/backend.h"

namespace {

eco::Communicator* host = nullptr;
eco::Backend* be = nullptr;
eco::DeviceCommunicator* nccl = nullptr;

// Rank r's element i: large and small magnitudes of both signs (as test_communicator.cpp).
float value(int r, int64_t i) {
  const double big = (r + i) % 3 == 0 ? 1e8 : (r + i) % 3 == 1 ? -1e8 : 1.0;
  return float(big * (1 + 0.001 * r) + 0.37 * double(i % 11) + 1e-3 * r);
}

std::vector<float> rank_input(int64_t n) {
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[size_t(i)] = value(host->rank(), i);
  return x;
}

template <class T>
eco::cuda::DeviceBuffer to_device(const std::vector<T>& h) {
  eco::cuda::DeviceBuffer d(h.size() * sizeof(T));
  ECO_CHECK_CUDA(cudaMemcpy(d.get(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}
template <class T>
std::vector<T> to_host(const eco::cuda::DeviceBuffer& d, size_t n) {
  be->synchronize();  // the collectives run on the backend's stream
  std::vector<T> h(n);
  ECO_CHECK_CUDA(cudaMemcpy(h.data(), d.get(), n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

// The first element whose bits differ, or -1.
int64_t first_difference(const std::vector<float>& a, const std::vector<float>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return int64_t(i);
  return a.size() == b.size() ? -1 : int64_t(a.size());
}

TEST(NcclCommunicator, AllReduceSumEqualsMpiCommunicatorsBitForBit) {
  for (int64_t n : {int64_t(1), int64_t(5), int64_t(1001), (int64_t(1) << 20) + 3}) {
    std::vector<float> mpi = rank_input(n);
    const int64_t mpi_before = host->bytes_sent().all_reduce;
    host->all_reduce_sum(mpi.data(), n);
    eco::cuda::DeviceBuffer d = to_device(rank_input(n));
    const int64_t nccl_before = nccl->bytes_sent().all_reduce;
    nccl->all_reduce_sum(d.get<float>(), n);
    const std::vector<float> got = to_host<float>(d, size_t(n));
    const int64_t at = first_difference(got, mpi);
    ASSERT_EQ(at, -1) << "n " << n << ": element " << at << " " << got[size_t(at)]
                      << " vs MPI's " << mpi[size_t(at)];
    EXPECT_EQ(nccl->bytes_sent().all_reduce - nccl_before,
              host->bytes_sent().all_reduce - mpi_before)
        << "n " << n;
  }
}

TEST(NcclCommunicator, ReduceScatterSumLeavesEachRankItsChunkOfTheMpiSum) {
  const int w = host->world(), r = host->rank();
  const int64_t n = 5003;
  std::vector<int64_t> bounds(size_t(w) + 1);
  for (int c = 0; c <= w; ++c) bounds[size_t(c)] = c == w ? n : (n / (w + 1)) * c + (c % 2) * 7;
  bounds[1] = bounds[0];  // rank 0 gets nothing
  std::vector<float> mpi = rank_input(n);
  host->all_reduce_sum(mpi.data(), n);
  eco::cuda::DeviceBuffer d = to_device(rank_input(n));
  nccl->reduce_scatter_sum(d.get<float>(), bounds);
  const std::vector<float> got = to_host<float>(d, size_t(n));
  const long b = long(bounds[size_t(r)]), e = long(bounds[size_t(r) + 1]);
  const int64_t at = first_difference(std::vector<float>(got.begin() + b, got.begin() + e),
                                      std::vector<float>(mpi.begin() + b, mpi.begin() + e));
  EXPECT_EQ(at, -1) << "rank " << r << " chunk [" << b << ", " << e << "): element " << at;
  EXPECT_EQ(nccl->bytes_sent().reduce_scatter, int64_t(sizeof(float)) * (n - int64_t(e - b)));
}

TEST(NcclCommunicator, AllGatherDeliversEveryRanksBytesInPlace) {
  const int w = host->world(), r = host->rank();
  std::vector<int64_t> bounds(size_t(w) + 1);
  for (int c = 0; c <= w; ++c) bounds[size_t(c)] = int64_t(c) * 1001 + (c == w ? 0 : c % 2);
  const size_t n = size_t(bounds.back());
  const auto pattern = [](size_t j) { return static_cast<unsigned char>(j * 37 + 11); };
  std::vector<unsigned char> h(n, 0xEE);
  for (size_t j = size_t(bounds[size_t(r)]); j < size_t(bounds[size_t(r) + 1]); ++j)
    h[j] = pattern(j);
  eco::cuda::DeviceBuffer d = to_device(h);
  const int64_t before = nccl->bytes_sent().all_gather;
  nccl->all_gather(d.get(), bounds);
  const std::vector<unsigned char> got = to_host<unsigned char>(d, n);
  for (size_t j = 0; j < n; ++j) ASSERT_EQ(got[j], pattern(j)) << "rank " << r << " byte " << j;
  EXPECT_EQ(nccl->bytes_sent().all_gather - before,
            (bounds[size_t(r) + 1] - bounds[size_t(r)]) * (w - 1));
}

TEST(NcclCommunicator, BroadcastDeliversTheRootsBytes) {
  const int w = host->world(), r = host->rank();
  const size_t n = 1001;
  for (int root = 0; root < w; ++root) {
    std::vector<unsigned char> h(n, 0xEE);
    if (r == root)
      for (size_t j = 0; j < n; ++j) h[j] = static_cast<unsigned char>(j * 37 + root);
    eco::cuda::DeviceBuffer d = to_device(h);
    nccl->broadcast(d.get(), int64_t(n), root);
    const std::vector<unsigned char> got = to_host<unsigned char>(d, n);
    for (size_t j = 0; j < n; ++j)
      ASSERT_EQ(got[j], static_cast<unsigned char>(j * 37 + root))
          << "root " << root << " byte " << j;
  }
}

TEST(NcclCommunicator, AllToAllVReceivesWhatMpiCommunicatorReceives) {
  const int w = host->world(), r = host->rank();
  // Block s -> d: (s + 2 d + 1) % 5 x 1001 bytes (uneven, some empty), distinct bytes.
  const auto block = [](int s, int d) { return int64_t((s + 2 * d + 1) % 5) * 1001; };
  const size_t ws = static_cast<size_t>(w);
  std::vector<int64_t> send_bytes(ws), recv_bytes(ws);
  std::vector<unsigned char> send;
  for (int q = 0; q < w; ++q) {
    send_bytes[size_t(q)] = block(r, q);
    recv_bytes[size_t(q)] = block(q, r);
    for (int64_t j = 0; j < block(r, q); ++j)
      send.push_back(static_cast<unsigned char>(50 * r + 10 * q + j * 7));
  }
  int64_t total = 0;
  for (int64_t b : recv_bytes) total += b;
  std::vector<unsigned char> mpi(size_t(total) + 1, 0xEE);
  send.push_back(0);  // never empty (cudaMalloc)
  const int64_t mpi_before = host->bytes_sent().all_to_all;
  host->all_to_all_v(send.data(), send_bytes, mpi.data(), recv_bytes);
  eco::cuda::DeviceBuffer d_send = to_device(send);
  eco::cuda::DeviceBuffer d_recv = to_device(std::vector<unsigned char>(size_t(total) + 1, 0xEE));
  const int64_t nccl_before = nccl->bytes_sent().all_to_all;
  nccl->all_to_all_v(d_send.get(), send_bytes, d_recv.get(), recv_bytes);
  EXPECT_EQ(to_host<unsigned char>(d_recv, size_t(total) + 1), mpi) << "rank " << r;
  EXPECT_EQ(nccl->bytes_sent().all_to_all - nccl_before,
            host->bytes_sent().all_to_all - mpi_before);
}

// Why NCCL cannot run this world here, or "" when it can.
std::string skip_reason(int world) {
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus == 0) {
    cudaGetLastError();
    return "no CUDA GPU is visible";
  }
  if (gpus >= world) return "";
  int version = 0;
  ncclGetVersion(&version);
  const char* multi = std::getenv("NCCL_MULTI_RANK_GPU_ENABLE");
  if (version >= NCCL_VERSION(2, 30, 0) && multi && std::string(multi) == "1") return "";
  return std::to_string(gpus) + " GPU(s) for " + std::to_string(world) +
         " ranks: NCCL " + std::to_string(version) +
         " refuses two ranks on one GPU (NCCL >= 2.30 allows it with "
         "NCCL_MULTI_RANK_GPU_ENABLE=1)";
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  std::unique_ptr<eco::Communicator> c = eco::make_mpi_communicator(&argc, &argv);
  host = c.get();
  // Every rank skips when any must (a rank alone in a collective would wait forever).
  const std::string why = skip_reason(host->world());
  int64_t skips = why.empty() ? 0 : 1;
  host->all_reduce_sum(&skips, 1);
  if (skips) {
    if (!why.empty()) std::printf("SKIP: rank %d: %s\n", host->rank(), why.c_str());
    return 77;
  }
  std::unique_ptr<eco::Backend> backend = eco::make_cuda_backend();
  be = backend.get();
  std::unique_ptr<eco::DeviceCommunicator> d = eco::make_nccl_communicator(*host, *be);
  nccl = d.get();
  // Only rank 0 prints GoogleTest's report; every rank's failures reach the exit code.
  if (host->rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int failed = RUN_ALL_TESTS();
  int64_t any = failed ? 1 : 0;
  host->all_reduce_sum(&any, 1);
  d.reset();  // before the backend whose stream it uses
  backend.reset();
  return any ? 1 : 0;
}
