// The FMA peak and a plain packed sgemm, as independent references (cpu_ceiling.h).
#include "tools/cpu_ceiling.h"

#include <immintrin.h>
#include <omp.h>
#include <time.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace eco::tools {
namespace {

// The clock the kernel reports: cpufreq's maximum where the driver exposes it, else
// /proc/cpuinfo's "cpu MHz" (in a VM the nominal clock; boost may run well above it). 0 if none.
double reported_clock_ghz(std::string* source) {
  std::ifstream maxf("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq");
  double khz = 0;
  if (maxf >> khz && khz > 0) {
    *source = "cpufreq max";
    return khz / 1e6;
  }
  std::ifstream info("/proc/cpuinfo");
  std::string line;
  while (std::getline(info, line)) {
    if (line.rfind("cpu MHz", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        *source = "/proc/cpuinfo";
        return std::stod(line.substr(colon + 1)) / 1e3;
      }
    }
  }
  *source = "no clock reported";
  return 0;
}

// The clock measured while every thread is busy: a chain of dependent integer adds retires one
// add per cycle on every x86-64 core, so adds / seconds is the clock, boost included. Best of 5
// ~20 ms trials per thread, timed in the thread's own CPU time (a busy machine's preemptions do
// not count), averaged over the threads. Scalar code may clock higher than wide FMAs do, so a
// peak from this clock errs high: a ceiling, as it should be.
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

double measured_clock_ghz() {
  constexpr long kIters = 2'000'000;  // x 10 adds
  double sum = 0;
  int threads = 0;
#pragma omp parallel reduction(+ : sum, threads)
  {
    double best = 1e30;
    for (int trial = 0; trial < 5; trial++) {
      uint64_t x = 0;
      const double t0 = thread_cpu_seconds();
      for (long i = 0; i < kIters; i++) {
        asm volatile(
            "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
            "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0"
            : "+r"(x));
      }
      best = std::min(best, thread_cpu_seconds() - t0);
    }
    sum += 10.0 * kIters / best / 1e9;
    threads += 1;
  }
  return threads ? sum / threads : 0;
}

constexpr int kMr = 6, kKc = 256, kMc = 96, kNc = 128;

// One kMr x NR tile of A-panel (kc x kMr) . B-panel (kc x NR) into `tile` (row-major, NR wide).
__attribute__((target("avx2,fma"))) void tile_avx2(int kc, const float* a, const float* b,
                                                   float* tile) {
  __m256 acc[kMr][2];
  for (int i = 0; i < kMr; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  for (int k = 0; k < kc; k++, a += kMr, b += 16) {
    const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
    for (int i = 0; i < kMr; i++) {
      const __m256 ai = _mm256_broadcast_ss(a + i);
      acc[i][0] = _mm256_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(ai, b1, acc[i][1]);
    }
  }
  for (int i = 0; i < kMr; i++) {
    _mm256_storeu_ps(tile + i * 16, acc[i][0]);
    _mm256_storeu_ps(tile + i * 16 + 8, acc[i][1]);
  }
}

__attribute__((target("avx512f"))) void tile_avx512(int kc, const float* a, const float* b,
                                                    float* tile) {
  __m512 acc[kMr][2];
  for (int i = 0; i < kMr; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (int k = 0; k < kc; k++, a += kMr, b += 32) {
    const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
    for (int i = 0; i < kMr; i++) {
      const __m512 ai = _mm512_set1_ps(a[i]);
      acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
    }
  }
  for (int i = 0; i < kMr; i++) {
    _mm512_storeu_ps(tile + i * 32, acc[i][0]);
    _mm512_storeu_ps(tile + i * 32 + 16, acc[i][1]);
  }
}

}  // namespace

FmaPeak fma_peak(const eco::cpu::CpuFeatures& cpu) {
  FmaPeak p;
  std::string reported_src;
  const double reported = reported_clock_ghz(&reported_src);
  p.ghz = measured_clock_ghz();
  char clock_buf[128];
  std::snprintf(clock_buf, sizeof clock_buf, "measured by a dependent-add chain; %s says %.2f GHz",
                reported_src.c_str(), reported);
  const std::string clock_src = clock_buf;
  std::string units_src;
  if (cpu.avx512f && cpu.amd && cpu.family == 0x19) {
    p.units = 2, p.lanes = 8;  // Zen 4 runs 512-bit FMAs on its two 256-bit pipes
    units_src = "Zen 4: AVX-512 on 2 x 256-bit FMA pipes";
  } else if (cpu.avx512f) {
    p.units = 2, p.lanes = 16;
    units_src = "AVX-512F: 2 x 512-bit FMA pipes assumed (some Xeon Silver/Bronze have 1)";
  } else if (cpu.avx2 && cpu.fma && cpu.amd && cpu.family == 0x17 && cpu.model < 0x30) {
    p.units = 2, p.lanes = 4;  // Zen 1 / Zen+ split 256-bit ops into 128-bit halves
    units_src = "Zen 1: 2 x 128-bit FMA pipes";
  } else if (cpu.avx2 && cpu.fma) {
    p.units = 2, p.lanes = 8;
    units_src = "AVX2+FMA: 2 x 256-bit FMA pipes";
  } else {
    p.units = 1, p.lanes = 4;  // SSE: one 4-wide multiply and one add a cycle, no FMA
    units_src = "no FMA: SSE mul+add";
  }
  p.gflops_per_thread = p.units * p.lanes * 2.0 * p.ghz;
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s x %d fp32 lanes x 2 flops x %.2f GHz (%s)", units_src.c_str(),
                p.lanes, p.ghz, clock_src.c_str());
  p.how = buf;
  return p;
}

std::string reference_sgemm_name(const eco::cpu::CpuFeatures& cpu) {
  if (cpu.avx512f) return "own AVX-512 6x32 packed kernel";
  if (cpu.avx2 && cpu.fma) return "own AVX2 6x16 packed kernel";
  return "none (no AVX2+FMA)";
}

bool reference_sgemm_nt(const eco::cpu::CpuFeatures& cpu, int M, int N, int K, const float* A,
                        const float* B, float* C) {
  const bool wide = cpu.avx512f;
  if (!wide && !(cpu.avx2 && cpu.fma)) return false;
  const int nr = wide ? 32 : 16;
  const int nblocks = (N + kNc - 1) / kNc;
#pragma omp parallel
  {
    std::vector<float> bp(size_t(kKc) * kNc), ap(size_t(kKc) * kMc), tile(size_t(kMr) * nr);
#pragma omp for schedule(dynamic)
    for (int blk = 0; blk < nblocks; blk++) {
      const int j0 = blk * kNc, nc = std::min(kNc, N - j0);
      for (int p0 = 0; p0 < K; p0 += kKc) {
        const int kc = std::min(kKc, K - p0);
        // B block -> panels of nr columns, k-major; columns past N are zero.
        for (int jp = 0; jp < nc; jp += nr)
          for (int k = 0; k < kc; k++)
            for (int j = 0; j < nr; j++)
              bp[size_t(jp) * kc + size_t(k) * nr + j] =
                  jp + j < nc ? B[size_t(j0 + jp + j) * K + p0 + k] : 0.0f;
        for (int i0 = 0; i0 < M; i0 += kMc) {
          const int mc = std::min(kMc, M - i0);
          for (int ip = 0; ip < mc; ip += kMr)
            for (int k = 0; k < kc; k++)
              for (int i = 0; i < kMr; i++)
                ap[size_t(ip) * kc + size_t(k) * kMr + i] =
                    ip + i < mc ? A[size_t(i0 + ip + i) * K + p0 + k] : 0.0f;
          for (int jp = 0; jp < nc; jp += nr) {
            for (int ip = 0; ip < mc; ip += kMr) {
              const float* a = &ap[size_t(ip) * kc];
              const float* b = &bp[size_t(jp) * kc];
              if (wide) tile_avx512(kc, a, b, tile.data());
              else tile_avx2(kc, a, b, tile.data());
              const int rows = std::min(kMr, mc - ip), cols = std::min(nr, nc - jp);
              for (int i = 0; i < rows; i++) {
                float* c = C + size_t(i0 + ip + i) * N + j0 + jp;
                const float* t = &tile[size_t(i) * nr];
                if (p0 == 0) std::copy(t, t + cols, c);
                else for (int j = 0; j < cols; j++) c[j] += t[j];
              }
            }
          }
        }
      }
    }
  }
  return true;
}

}  // namespace eco::tools
