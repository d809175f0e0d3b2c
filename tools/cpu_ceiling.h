// Two references for the CPU sgemm ceiling that do not trust the BLAS under test: the FMA peak
// from the CPU's features and clock, and our own plain AVX2/AVX-512 sgemm (eco-bench, eco-blas-bench).
#pragma once
#include <string>

#include "kernels/cpu/blas_runtime.h"

namespace eco::tools {

struct FmaPeak {
  double gflops_per_thread = 0;  // units x lanes x 2 flops x GHz
  double ghz = 0;
  int units = 0, lanes = 0;      // FMA pipes per core, fp32 lanes per FMA
  std::string how;               // how each figure was derived, one line
};
FmaPeak fma_peak(const eco::cpu::CpuFeatures& cpu);

// C (M, N) = A (M, K) . B (N, K)^T, row-major, with our own packed micro-kernel (6 x 32 on
// AVX-512, 6 x 16 on AVX2+FMA), OpenMP over column blocks. False when the CPU has neither.
bool reference_sgemm_nt(const eco::cpu::CpuFeatures& cpu, int M, int N, int K, const float* A,
                        const float* B, float* C);
std::string reference_sgemm_name(const eco::cpu::CpuFeatures& cpu);

}  // namespace eco::tools
