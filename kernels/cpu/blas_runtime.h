// Which BLAS the CPU kernels run on, and the start-up fixes applied before it loads: OpenBLAS
// builds that mis-identify a newer CPU (Debian's 0.3.21 takes some Intel cores for "Prescott" and
// runs sgemm ~8x slow), and the OpenMP wait default (thread_runtime.h).
#pragma once
#include <string>
#include <string_view>

namespace eco::cpu {

// The x86-64 features that decide which OpenBLAS kernel family fits this CPU.
struct CpuFeatures {
  bool intel = false, amd = false;
  bool avx2 = false, fma = false;
  bool avx512f = false;      // usable: the CPU has it and the OS saves the zmm state
  bool avx512_bf16 = false;  // Cooper Lake, Sapphire Rapids, Zen 4 and later
  int family = 0;            // cpuid display family (0x19 Zen 3/4, 0x1a Zen 5, 6 Intel Core)
  int model = 0;             // cpuid display model
};
CpuFeatures detect_cpu_features();

// The OpenBLAS core type to force when `reported` (openblas_get_corename()) uses narrower
// vectors than the CPU has, or "" when it already fits (or the CPU has no AVX2+FMA to offer).
// AVX-512F -> Cooperlake (with AVX512-BF16) or SkylakeX; AVX2+FMA -> Haswell (Intel) or Zen.
std::string corrected_openblas_core(const CpuFeatures& cpu, std::string_view reported);

// What the linked BLAS says about itself.
struct BlasInfo {
  std::string library;         // "OpenBLAS"
  std::string version;         // "0.3.21"
  std::string threading;       // "OpenMP", "pthreads" or "sequential"
  std::string core;            // kernel family in use, e.g. "Haswell"
  std::string config;          // openblas_get_config(), whole
  std::string corrected_from;  // the mis-detected core we replaced, or ""
  bool core_from_user = false; // OPENBLAS_CORETYPE was set by the user
  int threads = 0;
};
BlasInfo blas_info();

// Call first thing in main(). Sets what the loaded libraries read only while loading, then
// re-executes /proc/self/exe with the same argv, at most once: OPENBLAS_CORETYPE when OpenBLAS
// picked a core that corrected_openblas_core replaces and the user did not set it, and the OpenMP
// wait default (thread_runtime.h's set_default_omp_wait). Each is skipped once set, so the new
// image runs on; if exec fails the program goes on with what the libraries picked, and says so
// when that is the slow BLAS core.
void ensure_cpu_runtime(char** argv);

// One line for start-up logs: "OpenBLAS 0.3.21 (OpenMP), core Haswell (corrected from
// Prescott: OPENBLAS_CORETYPE=Haswell), 2 threads".
std::string blas_summary_line();

}  // namespace eco::cpu
