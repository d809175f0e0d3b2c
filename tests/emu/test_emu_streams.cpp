// Deferred streams (shim/emu_streams.h): a deferred stream's work waits in its queue until CUDA's
// ordering makes it due (a synchronization, an event wait, legacy-stream work), so that work on
// another stream that reads its results without cudaStreamWaitEvent reads them stale, as it may
// on a GPU. Launches, copies, cuBLASLt and NCCL take what they read at the call.
#include <cublasLt.h>
#include <nccl.h>

#include <cstring>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "emu_common.h"

namespace {

constexpr uint32_t kPoison = 0xFFFFFFFFu;  // cudaMalloc's fill: never written

uint32_t bits(const float* p) {
  uint32_t u;
  std::memcpy(&u, p, 4);
  return u;
}

// n floats of device memory (0xFF until written).
struct DeviceFloats {
  float* p = nullptr;
  explicit DeviceFloats(size_t n) { cudaMalloc(reinterpret_cast<void**>(&p), n * sizeof(float)); }
  ~DeviceFloats() { cudaFree(p); }
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;
};

struct Stream {
  cudaStream_t s = nullptr;
  explicit Stream(bool deferred = false) {
    cudaStreamCreate(&s);
    if (deferred) emu::defer_stream(s, true);
  }
  ~Stream() { cudaStreamDestroy(s); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
};

struct Event {
  cudaEvent_t e = nullptr;
  Event() { cudaEventCreate(&e); }
  ~Event() { cudaEventDestroy(e); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
};

// x[0 .. n) = v, a kernel on stream s.
void fill(cudaStream_t s, float* x, unsigned n, float v) {
  emu_launch_on(s, dim3(1), dim3(n), [](float* x, float v) { x[threadIdx.x] = v; }, x, v);
}
// dst[0 .. n) = src[0 .. n), a kernel on stream s.
void copy(cudaStream_t s, float* dst, const float* src, unsigned n) {
  emu_launch_on(
      s, dim3(1), dim3(n), [](float* d, const float* x) { d[threadIdx.x] = x[threadIdx.x]; },
      dst, src);
}

TEST(EmuStreams, ADeferredStreamRunsNothingUntilSynchronized) {
  Stream s(true);
  DeviceFloats x(4);
  float host[4] = {-1, -1, -1, -1};
  cudaMemsetAsync(x.p, 0, 4 * sizeof(float), s.s);
  fill(s.s, x.p, 2, 2.0f);
  cudaMemcpyAsync(host, x.p, sizeof host, cudaMemcpyDeviceToHost, s.s);
  EXPECT_EQ(s.s->queue.size(), 3u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(bits(&x.p[i]), kPoison) << i;
    EXPECT_EQ(host[i], -1.0f) << i;
  }
  cudaStreamSynchronize(s.s);
  EXPECT_TRUE(s.s->queue.empty());
  const float want[4] = {2, 2, 0, 0};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(x.p[i], want[i]) << i;
    EXPECT_EQ(host[i], want[i]) << i;
  }
}

TEST(EmuStreams, AWaitFromAnImmediateStreamRunsTheDeferredOneThroughTheRecordAndNoFurther) {
  Stream producer(true), consumer;
  Event e;
  DeviceFloats x(1), y(1);
  fill(producer.s, x.p, 1, 1.0f);
  cudaEventRecord(e.e, producer.s);
  fill(producer.s, y.p, 1, 2.0f);
  EXPECT_EQ(bits(x.p), kPoison);
  EXPECT_EQ(cudaStreamWaitEvent(consumer.s, e.e, 0), cudaSuccess);
  EXPECT_EQ(x.p[0], 1.0f);
  EXPECT_EQ(bits(y.p), kPoison) << "ran past the record";
  cudaStreamSynchronize(producer.s);
  EXPECT_EQ(y.p[0], 2.0f);
}

// The consumer's wait is queued: it runs when the consumer's queue gets there, and takes the
// producer through the record as of the wait's call, not a later re-record of the event.
TEST(EmuStreams, AWaitOnADeferredStreamRunsWhenThatStreamGetsThereOnTheRecordItCaptured) {
  Stream producer(true), consumer(true);
  Event e;
  DeviceFloats x(1), z(1);
  fill(producer.s, x.p, 1, 1.0f);
  cudaEventRecord(e.e, producer.s);
  cudaStreamWaitEvent(consumer.s, e.e, 0);
  copy(consumer.s, z.p, x.p, 1);
  fill(producer.s, x.p, 1, 5.0f);
  cudaEventRecord(e.e, producer.s);
  EXPECT_EQ(bits(x.p), kPoison);
  EXPECT_EQ(bits(z.p), kPoison);
  cudaStreamSynchronize(consumer.s);
  EXPECT_EQ(z.p[0], 1.0f);
  EXPECT_EQ(x.p[0], 1.0f) << "the producer ran past the captured record";
  cudaStreamSynchronize(producer.s);
  EXPECT_EQ(x.p[0], 5.0f);
}

TEST(EmuStreams, EventAndDeviceSynchronizeAndStreamDestroyRunTheQueues) {
  DeviceFloats x(1), y(1), w(1);
  Event e, never;
  {
    Stream s(true);
    fill(s.s, x.p, 1, 1.0f);
    cudaEventRecord(e.e, s.s);
    fill(s.s, y.p, 1, 2.0f);
    EXPECT_EQ(cudaStreamWaitEvent(s.s, never.e, 0), cudaSuccess);  // never recorded: nothing
    EXPECT_EQ(cudaEventSynchronize(never.e), cudaSuccess);
    EXPECT_EQ(bits(x.p), kPoison);
    cudaEventSynchronize(e.e);
    EXPECT_EQ(x.p[0], 1.0f);
    EXPECT_EQ(bits(y.p), kPoison);
    cudaDeviceSynchronize();
    EXPECT_EQ(y.p[0], 2.0f);
    fill(s.s, w.p, 1, 3.0f);
    EXPECT_EQ(bits(w.p), kPoison);
  }
  EXPECT_EQ(w.p[0], 3.0f) << "cudaStreamDestroy runs the queue first";
}

TEST(EmuStreams, ElapsedTimeCompletesBothEvents) {
  Stream s(true);
  Event a, b;
  DeviceFloats x(1);
  cudaEventRecord(a.e, s.s);
  fill(s.s, x.p, 1, 1.0f);
  cudaEventRecord(b.e, s.s);
  float ms = -1.0f;
  EXPECT_EQ(cudaEventElapsedTime(&ms, a.e, b.e), cudaSuccess);
  EXPECT_GE(ms, 0.0f);
  EXPECT_EQ(x.p[0], 1.0f);
}

// Legacy-stream work and the synchronous calls wait for every blocking stream: each of them runs
// every deferred queue of the thread first.
TEST(EmuStreams, LegacyStreamWorkAndSynchronousCallsRunEveryDeferredQueueFirst) {
  DeviceFloats x(1), y(1), scratch(1);
  float host = 0.0f;
  const std::vector<std::pair<std::string, std::function<void()>>> calls = {
      {"cudaMemcpy", [&] { cudaMemcpy(&host, scratch.p, 4, cudaMemcpyDeviceToHost); }},
      {"cudaMemset", [&] { cudaMemset(scratch.p, 0, 4); }},
      {"cudaMemcpyAsync on nullptr",
       [&] { cudaMemcpyAsync(&host, scratch.p, 4, cudaMemcpyDeviceToHost, nullptr); }},
      {"cudaFree", [&] { cudaFree(nullptr); }},
      {"emu_launch", [&] { emu_launch(dim3(1), dim3(1), [] {}); }},
      {"cudaEventRecord on nullptr",
       [&] {
         Event e;
         cudaEventRecord(e.e, nullptr);
       }},
      {"cudaStreamSynchronize(nullptr)", [&] { cudaStreamSynchronize(nullptr); }},
  };
  for (const auto& [name, call] : calls) {
    SCOPED_TRACE(name);
    Stream a(true), b(true);
    fill(a.s, x.p, 1, 1.0f);
    fill(b.s, y.p, 1, 2.0f);
    call();
    EXPECT_EQ(x.p[0], 1.0f);
    EXPECT_EQ(y.p[0], 2.0f);
    cudaMemset(x.p, 0xFF, 4);
    cudaMemset(y.p, 0xFF, 4);
  }
}

// Each host thread is a device of its own: its legacy work runs its own deferred queues only.
TEST(EmuStreams, LegacyStreamWorkRunsOnlyTheCallingThreadsQueues) {
  DeviceFloats x(1);
  cudaStream_t theirs = nullptr;
  std::thread([&] {
    cudaStreamCreate(&theirs);
    emu::defer_stream(theirs, true);
    fill(theirs, x.p, 1, 1.0f);
  }).join();
  cudaDeviceSynchronize();
  EXPECT_EQ(bits(x.p), kPoison);
  cudaStreamSynchronize(theirs);
  EXPECT_EQ(x.p[0], 1.0f);
  cudaStreamDestroy(theirs);
}

// The arguments are copied and emu::sequential / emu::reverse_blocks read when the launch is
// made, not when the queue runs it.
TEST(EmuStreams, ALaunchTakesItsArgumentsAndSettingsWhenMade) {
  Stream s(true);
  std::vector<int> value(6, -1), sequential(6, -1), order;
  int v = 7;
  const auto record = [](int* value, int* sequential, std::vector<int>* order, int v) {
    const int t = int(blockIdx.x * 2 + threadIdx.x);
    value[t] = v;
    sequential[t] = emu::self->sequential;
    if (threadIdx.x == 0) order->push_back(int(blockIdx.x));
  };
  emu::sequential = emu::reverse_blocks = true;
  emu_launch_on(s.s, dim3(3), dim3(2), record, value.data(), sequential.data(), &order, v);
  emu::sequential = emu::reverse_blocks = false;
  v = 9;
  EXPECT_TRUE(order.empty());
  cudaStreamSynchronize(s.s);
  EXPECT_EQ(value, std::vector<int>(6, 7));
  EXPECT_EQ(sequential, std::vector<int>(6, 1));
  EXPECT_EQ(order, (std::vector<int>{2, 1, 0}));
  order.clear();
  emu_launch_on(s.s, dim3(3), dim3(2), record, value.data(), sequential.data(), &order, v);
  cudaStreamSynchronize(s.s);
  EXPECT_EQ(value, std::vector<int>(6, 9));
  EXPECT_EQ(sequential, std::vector<int>(6, 0));
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
}

// D (m, n) = alpha * A (m, k) B (k, n), fp32, column-major, set up by hand.
struct Gemm {
  static constexpr int64_t m = 5, n = 4, k = 3;
  cublasLtHandle_t h = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  cublasLtMatmulHeuristicResult_t result{};
  DeviceFloats A{m * k}, B{k * n}, workspace{1 << 20};
  Gemm() {
    cublasLtCreate(&h);
    cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasLtMatrixLayoutCreate(&a, CUDA_R_32F, m, k, m);
    cublasLtMatrixLayoutCreate(&b, CUDA_R_32F, k, n, k);
    cublasLtMatrixLayoutCreate(&c, CUDA_R_32F, m, n, m);
    cublasLtMatmulPreferenceCreate(&pref);
    const uint64_t bytes = 4 << 20;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &bytes,
                                         sizeof bytes);
    int found = 0;
    cublasLtMatmulAlgoGetHeuristic(h, desc, a, b, c, c, pref, 1, &result, &found);
    const std::vector<float> ha = emuh::randn(m * k, 1, 1.0f), hb = emuh::randn(k * n, 2, 1.0f);
    cudaMemcpy(A.p, ha.data(), sizeof(float) * ha.size(), cudaMemcpyHostToDevice);
    cudaMemcpy(B.p, hb.data(), sizeof(float) * hb.size(), cudaMemcpyHostToDevice);
  }
  ~Gemm() {
    for (auto* l : {a, b, c}) cublasLtMatrixLayoutDestroy(l);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatmulDescDestroy(desc);
    cublasLtDestroy(h);
  }
  cublasStatus_t run(float* D, const float* alpha, cudaStream_t s) {
    const float beta = 0.0f;
    return cublasLtMatmul(h, desc, alpha, A.p, a, B.p, b, &beta, D, c, D, c, &result.algo,
                          workspace.p, 4 << 20, s);
  }
};

// Queued, the matmul computes from the descriptor, layouts and alpha of the call: changes made
// after it are not seen; a call refused for them is refused at the call and queues nothing.
TEST(EmuStreams, ADeferredMatmulComputesWhatTheImmediateOneDoesFromWhatTheCallRead) {
  Gemm g;
  Stream s(true);
  DeviceFloats now(Gemm::m * Gemm::n), later(Gemm::m * Gemm::n);
  float alpha = 1.5f;
  ASSERT_EQ(g.run(now.p, &alpha, nullptr), CUBLAS_STATUS_SUCCESS);
  const size_t calls = emu::lt::calls.size();
  ASSERT_EQ(g.run(later.p, &alpha, s.s), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(emu::lt::calls.size(), calls + 1) << "logged at the call";
  alpha = 100.0f;
  const int32_t trans = CUBLAS_OP_T;
  cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans, sizeof trans);
  const int64_t ld = 2 * Gemm::m;
  cublasLtMatrixLayoutSetAttribute(g.c, CUBLASLT_MATRIX_LAYOUT_LD, &ld, sizeof ld);
  EXPECT_EQ(g.run(later.p, &alpha, s.s), CUBLAS_STATUS_INVALID_VALUE) << "refused at the call";
  EXPECT_EQ(s.s->queue.size(), 1u);
  EXPECT_EQ(bits(later.p), kPoison);
  cudaStreamSynchronize(s.s);
  EXPECT_EQ(emuh::differ(now.p, later.p, size_t(Gemm::m * Gemm::n)), 0);
}

// Two ranks exchange buffers in one group on their first (deferred) streams: nothing moves until
// a rank synchronizes; then the group runs, waiting for its peer, and delivers the bytes the
// stream's earlier kernel wrote. Each rank's second stream is not deferred.
TEST(EmuStreams, AnNcclExchangeOnDeferredStreamsCompletesAndDeliversTheBytes) {
  constexpr unsigned n = 33;
  const emu::DeferStreams defer({1});
  ncclUniqueId id;
  ncclGetUniqueId(&id);
  std::vector<std::vector<float>> got(2);
  std::vector<int> untouched(2, 0);
  emu::nccl::run_ranks(2, [&](int r) {
    ncclComm_t comm = nullptr;
    ASSERT_EQ(ncclCommInitRank(&comm, 2, id, r), ncclSuccess);
    cudaStream_t s = nullptr, other = nullptr;
    cudaStreamCreate(&s);
    cudaStreamCreate(&other);
    EXPECT_TRUE(s->deferred);
    EXPECT_FALSE(other->deferred);
    DeviceFloats send(n), recv(n);
    fill(s, send.p, n, float(10 * r + 1));
    ncclGroupStart();
    ncclSend(send.p, n, ncclFloat, 1 - r, comm, s);
    ncclRecv(recv.p, n, ncclFloat, 1 - r, comm, s);
    ncclGroupEnd();
    for (unsigned i = 0; i < n; ++i) untouched[size_t(r)] += bits(&recv.p[i]) == kPoison;
    cudaStreamSynchronize(s);
    got[size_t(r)].assign(recv.p, recv.p + n);
    cudaStreamDestroy(other);
    cudaStreamDestroy(s);
    ncclCommDestroy(comm);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(untouched[size_t(r)], int(n)) << "rank " << r << " received before its sync";
    EXPECT_EQ(got[size_t(r)], std::vector<float>(n, float(10 * (1 - r) + 1))) << "rank " << r;
  }
}

// A group over two streams runs at its ncclGroupEnd, after the deferred stream's queue.
TEST(EmuStreams, AnNcclGroupOverTwoStreamsRunsAfterTheirQueues) {
  const emu::DeferStreams defer({1});
  ncclUniqueId id;
  ncclGetUniqueId(&id);
  std::vector<float> got;
  emu::nccl::run_ranks(1, [&](int) {
    ncclComm_t comm = nullptr;
    ncclCommInitRank(&comm, 1, id, 0);
    Stream deferred, immediate;
    DeviceFloats send(4), recv(4);
    fill(deferred.s, send.p, 4, 3.0f);
    ncclGroupStart();
    ncclSend(send.p, 4, ncclFloat, 0, comm, deferred.s);
    ncclRecv(recv.p, 4, ncclFloat, 0, comm, immediate.s);
    ncclGroupEnd();
    got.assign(recv.p, recv.p + 4);
    ncclCommDestroy(comm);
  });
  EXPECT_EQ(got, std::vector<float>(4, 3.0f));
}

// Producer stream A writes a buffer; consumer stream B copies it out. Without
// cudaStreamWaitEvent(B, A's event) that is a race on a GPU, invisible when every stream runs at
// once (B reads A's value by luck of the order); with A deferred, B reads the stale value, and
// the wait makes it right.
float consumer_reads(bool defer_producer, bool wait) {
  const emu::DeferStreams defer(defer_producer ? std::set<int>{1} : std::set<int>{});
  Stream producer, consumer;  // ordinals 1 and 2
  Event written;
  DeviceFloats buf(1), out(1);
  const float stale = 1.0f;
  cudaMemcpy(buf.p, &stale, 4, cudaMemcpyHostToDevice);
  fill(producer.s, buf.p, 1, 2.0f);
  cudaEventRecord(written.e, producer.s);
  if (wait) cudaStreamWaitEvent(consumer.s, written.e, 0);
  copy(consumer.s, out.p, buf.p, 1);
  float got = 0.0f;
  cudaStreamSynchronize(consumer.s);
  std::memcpy(&got, out.p, 4);  // consumer's result, after the consumer's synchronize
  return got;
}

TEST(EmuStreams, AConsumerWithoutTheWaitReadsStaleDataWhenTheProducerIsDeferred) {
  EXPECT_EQ(consumer_reads(false, false), 2.0f) << "immediate streams hide the race";
  EXPECT_EQ(consumer_reads(true, false), 1.0f) << "the missing wait shows";
  EXPECT_EQ(consumer_reads(true, true), 2.0f);
  EXPECT_EQ(consumer_reads(false, true), 2.0f);
}

// Ordinals count each thread's cudaStreamCreate calls from the DeferStreams' construction.
TEST(EmuStreams, DeferStreamsPicksStreamsByTheirCreationOrdinalOnEachThread) {
  cudaStream_t before = nullptr;
  cudaStreamCreate(&before);
  {
    const emu::DeferStreams defer({2});
    Stream a, b, c;
    EXPECT_FALSE(a.s->deferred);
    EXPECT_TRUE(b.s->deferred);
    EXPECT_FALSE(c.s->deferred);
    std::vector<bool> other;
    std::thread([&] {
      Stream x, y;
      other = {x.s->deferred, y.s->deferred};
    }).join();
    EXPECT_EQ(other, (std::vector<bool>{false, true}));
  }
  Stream after_first, after_second;
  EXPECT_FALSE(after_second.s->deferred) << "deferred after the DeferStreams went";
  {
    const emu::DeferStreams defer({1});
    Stream first;
    EXPECT_TRUE(first.s->deferred) << "ordinals restart with each DeferStreams";
  }
  EXPECT_FALSE(before->deferred);
  cudaStreamDestroy(before);
}

}  // namespace
