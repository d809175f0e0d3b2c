// CPU feature detection, the OpenBLAS core correction and the BLAS description (blas_runtime.h).
#include "kernels/cpu/blas_runtime.h"

#include <cblas.h>
#include <cpuid.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kernels/cpu/thread_runtime.h"

namespace eco::cpu {
namespace {

// Set (with the mis-detected name) when we re-executed with our own OPENBLAS_CORETYPE: tells the
// new image that the variable is ours, not the user's, and keeps the re-exec from looping.
constexpr const char* kMarker = "ECO_BLAS_CORRECTED_FROM";

enum class Simd { kOther = 0, kAvx = 1, kAvx2 = 2, kAvx512 = 3 };

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The vector width of each OpenBLAS x86-64 core type's sgemm kernels (names as
// openblas_get_corename() spells them, compared without case). A name missing here (a core
// newer than this table) is never replaced: we only correct cores we know to be narrower.
bool core_simd(std::string_view name, Simd* simd) {
  struct Entry { const char* name; Simd simd; };
  static constexpr Entry kCores[] = {
      {"unknown", Simd::kOther},     {"katmai", Simd::kOther},      {"coppermine", Simd::kOther},
      {"northwood", Simd::kOther},   {"prescott", Simd::kOther},    {"banias", Simd::kOther},
      {"atom", Simd::kOther},        {"core2", Simd::kOther},       {"penryn", Simd::kOther},
      {"dunnington", Simd::kOther},  {"nehalem", Simd::kOther},     {"athlon", Simd::kOther},
      {"opteron", Simd::kOther},     {"opteron_sse3", Simd::kOther}, {"barcelona", Simd::kOther},
      {"nano", Simd::kOther},        {"bobcat", Simd::kOther},      {"sandybridge", Simd::kAvx},
      {"bulldozer", Simd::kAvx},     {"piledriver", Simd::kAvx},    {"steamroller", Simd::kAvx},
      {"excavator", Simd::kAvx},     {"haswell", Simd::kAvx2},      {"zen", Simd::kAvx2},
      {"skylakex", Simd::kAvx512},   {"cooperlake", Simd::kAvx512}, {"sapphirerapids", Simd::kAvx512},
  };
  const std::string key = lower(name);
  for (const Entry& e : kCores) {
    if (key == e.name) {
      *simd = e.simd;
      return true;
    }
  }
  return false;
}

uint64_t xgetbv0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t(hi) << 32) | lo;
}

}  // namespace

CpuFeatures detect_cpu_features() {
  CpuFeatures f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return f;
  const unsigned max_leaf = a;
  char vendor[13] = {};
  std::memcpy(vendor, &b, 4);
  std::memcpy(vendor + 4, &d, 4);
  std::memcpy(vendor + 8, &c, 4);
  f.intel = std::strcmp(vendor, "GenuineIntel") == 0;
  f.amd = std::strcmp(vendor, "AuthenticAMD") == 0;
  __get_cpuid(1, &a, &b, &c, &d);
  const int base_family = int((a >> 8) & 0xf);
  f.family = base_family == 0xf ? base_family + int((a >> 20) & 0xff) : base_family;
  f.model = int((a >> 4) & 0xf);
  if (base_family == 0x6 || base_family == 0xf) f.model += int((a >> 16) & 0xf) << 4;
  const bool osxsave = (c >> 27) & 1, avx = (c >> 28) & 1;
  const bool fma = (c >> 12) & 1;
  // The OS must save the ymm (bits 1-2) and zmm/opmask (bits 5-7) state for us to use them.
  const uint64_t xcr0 = osxsave ? xgetbv0() : 0;
  const bool ymm_ok = avx && (xcr0 & 0x6) == 0x6;
  const bool zmm_ok = ymm_ok && (xcr0 & 0xe0) == 0xe0;
  if (max_leaf >= 7) {
    __cpuid_count(7, 0, a, b, c, d);
    f.avx2 = ymm_ok && ((b >> 5) & 1);
    f.avx512f = zmm_ok && ((b >> 16) & 1);
    const unsigned max_sub = a;
    if (max_sub >= 1) {
      __cpuid_count(7, 1, a, b, c, d);
      f.avx512_bf16 = f.avx512f && ((a >> 5) & 1);
    }
  }
  f.fma = ymm_ok && fma;
  return f;
}

std::string corrected_openblas_core(const CpuFeatures& cpu, std::string_view reported) {
  Simd have = Simd::kOther;
  std::string target;
  if (cpu.avx512f) {
    have = Simd::kAvx512;
    target = cpu.avx512_bf16 ? "Cooperlake" : "SkylakeX";
  } else if (cpu.avx2 && cpu.fma) {
    have = Simd::kAvx2;
    target = cpu.amd ? "Zen" : "Haswell";
  } else {
    return "";  // nothing wider to offer than the SSE/AVX kernels OpenBLAS picks itself
  }
  Simd used = Simd::kOther;
  if (!core_simd(reported, &used)) return "";  // a core newer than our table: trust it
  return used < have ? target : "";
}

BlasInfo blas_info() {
  BlasInfo info;
  info.library = "OpenBLAS";
  info.config = openblas_get_config();
  // The config string opens with "OpenBLAS <version> ...".
  const std::string& cfg = info.config;
  const size_t v0 = cfg.find(' ');
  if (v0 != std::string::npos) info.version = cfg.substr(v0 + 1, cfg.find(' ', v0 + 1) - v0 - 1);
  switch (openblas_get_parallel()) {
    case 0: info.threading = "sequential"; break;
    case 1: info.threading = "pthreads"; break;
    default: info.threading = "OpenMP"; break;
  }
  info.core = openblas_get_corename();
  info.threads = openblas_get_num_threads();
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  const char* marker = std::getenv(kMarker);
  if (coretype && marker) info.corrected_from = marker;
  else if (coretype) info.core_from_user = true;
  return info;
}

void ensure_cpu_runtime(char** argv) {
  // ECO_BLAS_PRETEND_CORE stands in for the core OpenBLAS reports, so that a test can walk the
  // re-exec path on a machine OpenBLAS identifies correctly (tests/e2e/blas_line.sh).
  std::string fix, reported;
  if (!std::getenv("OPENBLAS_CORETYPE") && !std::getenv(kMarker)) {  // not the user's, not done
    const char* pretend = std::getenv("ECO_BLAS_PRETEND_CORE");
    reported = pretend ? pretend : openblas_get_corename();
    fix = corrected_openblas_core(detect_cpu_features(), reported);
  }
  if (!fix.empty()) {
    setenv("OPENBLAS_CORETYPE", fix.c_str(), 1);
    setenv(kMarker, reported.c_str(), 1);
  }
  const bool wait = set_default_omp_wait();
  if (fix.empty() && !wait) return;
  std::fflush(nullptr);
  execv("/proc/self/exe", argv);
  // Still here: exec failed. Run on with what the loaded libraries picked, and say how to fix it
  // by hand.
  unset_default_omp_wait();
  if (fix.empty()) return;
  unsetenv("OPENBLAS_CORETYPE");  // the marker stays: no child process tries again
  std::fprintf(stderr,
               "warning: OpenBLAS runs the %s kernels on a CPU that has wider ones and the "
               "re-exec to correct it failed; set OPENBLAS_CORETYPE=%s for full speed\n",
               reported.c_str(), fix.c_str());
}

std::string blas_summary_line() {
  const BlasInfo b = blas_info();
  std::string line = b.library + " " + b.version + " (" + b.threading + "), core " + b.core;
  if (!b.corrected_from.empty()) {
    line += " (corrected from " + b.corrected_from + ": OPENBLAS_CORETYPE=" +
            std::getenv("OPENBLAS_CORETYPE") + ")";
  } else if (b.core_from_user) {
    line += std::string(" (OPENBLAS_CORETYPE=") + std::getenv("OPENBLAS_CORETYPE") + " set by the user)";
  }
  return line;
}

}  // namespace eco::cpu
