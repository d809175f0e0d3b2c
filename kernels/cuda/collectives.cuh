// The device half of the deterministic collectives (kernels/cuda/nccl_communicator.cpp): NCCL
// moves each rank's chunk into a receive buffer, one row per rank, and this kernel adds the rows
// in rank order, so the sum's bits do not depend on NCCL's algorithm.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace eco::cuda {

// out (n) = ((0 + recv[0][i]) + recv[1][i]) + ... + recv[world - 1][i], for the world rows of
// recv (row r at recv + r * stride): fp32 adds in rank order from +0.0f (a -0 sum gives +0), the
// element math of the host communicators' sums (dist/communicator.h), bit for bit.
// world >= 1, n >= 0, stride >= n; out must not overlap recv; no alignment assumed.
cudaError_t fold_rank_order(float* out, const float* recv, int world, int64_t n, int64_t stride,
                            cudaStream_t s = nullptr);

}  // namespace eco::cuda
