// eco-blas-bench: sgemm GFLOP/s of a BLAS at the shapes the CPU backend runs (row-major
// C = A . B^T, as matmul_forward calls it), to compare libraries and core types side by side.
//   eco-blas-bench [--lib linked|reference|PATH.so] [--threads N] [--reps N] [--fix-core]
//                  [--shape MxNxK]...
// linked: the OpenBLAS eco-train links, as loaded (OPENBLAS_CORETYPE honoured; --fix-core applies
// eco-train's start-up correction first); reference: our own packed kernel (tools/cpu_ceiling.h);
// PATH: any CBLAS (OpenBLAS, BLIS, scipy-openblas's prefixed build) opened with dlopen.
#include <dlfcn.h>
#include <omp.h>
#include <time.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <cblas.h>

#include "kernels/cpu/blas_runtime.h"
#include "tools/cpu_ceiling.h"

namespace {

using SgemmFn = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int,
                         float, float*, int);
using SetThreadsFn = void (*)(int);
using StringFn = char* (*)();

struct Lib {
  std::string name;   // what it says about itself
  SgemmFn sgemm = nullptr;
  bool reference = false;
};

void* find(void* h, const std::vector<std::string>& names) {
  for (const auto& n : names)
    if (void* p = dlsym(h, n.c_str())) return p;
  return nullptr;
}

// Opens PATH with its own symbols first (RTLD_DEEPBIND), so a BLIS or OpenBLAS loaded beside the
// linked OpenBLAS calls its own sgemm_ rather than ours. Knows plain and scipy_-prefixed names.
Lib open_lib(const std::string& path, int threads) {
  Lib lib;
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  if (!h) {
    std::fprintf(stderr, "eco-blas-bench: cannot open %s: %s\n", path.c_str(), dlerror());
    std::exit(2);
  }
  lib.sgemm = reinterpret_cast<SgemmFn>(find(h, {"cblas_sgemm", "scipy_cblas_sgemm"}));
  if (!lib.sgemm) {
    std::fprintf(stderr, "eco-blas-bench: no cblas_sgemm in %s\n", path.c_str());
    std::exit(2);
  }
  if (auto set = reinterpret_cast<SetThreadsFn>(
          find(h, {"openblas_set_num_threads", "scipy_openblas_set_num_threads",
                   "bli_thread_set_num_threads"})))
    set(threads);
  if (auto cfg = reinterpret_cast<StringFn>(find(h, {"openblas_get_config", "scipy_openblas_get_config"}))) {
    auto core = reinterpret_cast<StringFn>(find(h, {"openblas_get_corename", "scipy_openblas_get_corename"}));
    lib.name = std::string(cfg()) + ", core " + (core ? core() : "?");
  } else if (auto ver = reinterpret_cast<const char* (*)()>(find(h, {"bli_info_get_version_str"}))) {
    auto arch_id = reinterpret_cast<int (*)()>(find(h, {"bli_arch_query_id"}));
    auto arch_str = reinterpret_cast<const char* (*)(int)>(find(h, {"bli_arch_string"}));
    lib.name = std::string("BLIS ") + ver() + ", config " +
               (arch_id && arch_str ? arch_str(arch_id()) : "?");
  } else {
    lib.name = path;
  }
  return lib;
}

double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

void linked_sgemm(int, int, int, int M, int N, int K, float alpha, const float* A, int lda,
                  const float* B, int ldb, float beta, float* C, int ldc) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace

int main(int argc, char** argv) {
  std::string which = "linked";
  int threads = omp_get_max_threads(), reps = 7;
  bool fix_core = false;
  std::vector<std::array<int, 3>> shapes;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--lib" && i + 1 < argc) which = argv[++i];
    else if (a == "--threads" && i + 1 < argc) threads = std::atoi(argv[++i]);
    else if (a == "--reps" && i + 1 < argc) reps = std::atoi(argv[++i]);
    else if (a == "--fix-core") fix_core = true;
    else if (a == "--shape" && i + 1 < argc) {
      std::array<int, 3> s{};
      if (std::sscanf(argv[++i], "%dx%dx%d", &s[0], &s[1], &s[2]) != 3) return 2;
      shapes.push_back(s);
    } else {
      std::fprintf(stderr, "usage: eco-blas-bench [--lib linked|reference|PATH.so] [--threads N] "
                           "[--reps N] [--fix-core] [--shape MxNxK]...\n");
      return 2;
    }
  }
  if (fix_core) eco::cpu::ensure_cpu_runtime(argv);
  // 2048^3, then GPT-2 124M at 256 rows (B 4 x T 64): qkv, MLP down projection, LM head.
  if (shapes.empty()) shapes = {{2048, 2048, 2048}, {256, 2304, 768}, {256, 768, 3072}, {256, 50304, 768}};
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
  const eco::cpu::CpuFeatures cpu = eco::cpu::detect_cpu_features();

  Lib lib;
  if (which == "linked") {
    lib.name = eco::cpu::blas_summary_line();
    lib.sgemm = linked_sgemm;
  } else if (which == "reference") {
    lib.name = eco::tools::reference_sgemm_name(cpu);
    lib.reference = true;
  } else {
    lib = open_lib(which, threads);
  }
  const eco::tools::FmaPeak peak = eco::tools::fma_peak(cpu);
  std::printf("# %s; %d threads; FMA peak %.1f GFLOP/s (%s)\n", lib.name.c_str(), threads,
              peak.gflops_per_thread * threads, peak.how.c_str());
  // GFLOP/s from wall time, and from process CPU time x threads: the second is what the library
  // would reach with the cores to itself, so it stays comparable on a machine others load.
  std::printf("%-18s %10s %10s %8s %12s\n", "M x N x K", "ms", "GFLOP/s", "of peak", "cpu-GFLOP/s");
  for (const auto& [M, N, K] : shapes) {
    std::vector<float> a(size_t(M) * K), b(size_t(N) * K), c(size_t(M) * N);
    for (size_t i = 0; i < a.size(); i++) a[i] = float(i % 13) * 0.01f - 0.06f;
    for (size_t i = 0; i < b.size(); i++) b[i] = float(i % 7) * 0.02f - 0.06f;
    std::vector<double> ms, cpu_ms;
    for (int r = 0; r < reps + 1; ++r) {  // the first run warms caches and thread pools
      const auto t0 = std::chrono::steady_clock::now();
      const double c0 = cpu_seconds();
      if (lib.reference) eco::tools::reference_sgemm_nt(cpu, M, N, K, a.data(), b.data(), c.data());
      else lib.sgemm(101, 111, 112, M, N, K, 1.0f, a.data(), K, b.data(), K, 0.0f, c.data(), N);
      const double dt = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (r > 0) ms.push_back(dt), cpu_ms.push_back((cpu_seconds() - c0) * 1e3 / threads);
    }
    std::sort(ms.begin(), ms.end());
    std::sort(cpu_ms.begin(), cpu_ms.end());
    const double med = ms[ms.size() / 2];
    const double gf = 2.0 * M * N * K / (med / 1e3) / 1e9;
    const double gf_cpu = 2.0 * M * N * K / (cpu_ms[cpu_ms.size() / 2] / 1e3) / 1e9;
    char shape[32];
    std::snprintf(shape, sizeof shape, "%dx%dx%d", M, N, K);
    std::printf("%-18s %10.2f %10.1f %8.2f %12.1f\n", shape, med, gf,
                gf / (peak.gflops_per_thread * threads), gf_cpu);
  }
  return 0;
}
