// The NCCL DeviceCommunicator (dist/device_communicator.h) on a given stream: what
// eco::make_nccl_communicator builds on the CUDA backend's stream (cuda_backend.cpp), and what
// the tests build directly (tests/emu: over an emulated NCCL, with small rounds).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "base/memory_ledger.h"
#include "dist/device_communicator.h"

namespace eco::cuda {

// Elements of the receive buffer (world x per-rank chunk) of one round of a reduce-scatter:
// 2^26 floats, 256 MiB. A larger sum runs in rounds of at most kNcclRoundElems / world elements
// per rank chunk (at least 1).
constexpr int64_t kNcclRoundElems = int64_t(1) << 26;

// NCCL over `host`'s ranks on the current device; collectives on `stream`, or on `side` while
// the lane is Side (DeviceCommunicator::set_lane; null: no side lane); the receive buffer is
// recorded in `ledger` as it grows. round_elems bounds that buffer (kNcclRoundElems; tests pass
// a few elements to run many rounds). `ledger` and the streams must outlive the communicator.
std::unique_ptr<DeviceCommunicator> make_nccl_communicator(Communicator& host, cudaStream_t stream,
                                                           MemoryLedger& ledger,
                                                           int64_t round_elems = kNcclRoundElems,
                                                           cudaStream_t side = nullptr);

}  // namespace eco::cuda
