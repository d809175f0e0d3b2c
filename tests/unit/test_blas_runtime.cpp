// The OpenBLAS core correction (features + reported core -> forced core) over a table of CPUs,
// the live BLAS description, and our reference sgemm (tools/cpu_ceiling) against a double loop.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/blas_runtime.h"
#include "kernels/cpu/gemm.h"
#include "tools/cpu_ceiling.h"

extern "C" void openblas_set_num_threads(int);

namespace {

using eco::cpu::CpuFeatures;
using eco::cpu::corrected_openblas_core;

CpuFeatures cpu(bool intel, bool avx2_fma, bool avx512f, bool bf16, int family = 6) {
  CpuFeatures f;
  f.intel = intel;
  f.amd = !intel;
  f.avx2 = f.fma = avx2_fma;
  f.avx512f = avx512f;
  f.avx512_bf16 = bf16;
  f.family = family;
  return f;
}

struct Case {
  const char* what;
  CpuFeatures cpu;
  const char* reported;
  const char* expected;  // "" = leave the core alone
};

TEST(BlasRuntime, CorrectsOnlyCoresNarrowerThanTheCpu) {
  const CpuFeatures spr = cpu(true, true, true, true);     // Sapphire/Emerald Rapids
  const CpuFeatures skx = cpu(true, true, true, false);    // Skylake-SP / Cascade Lake
  const CpuFeatures hsw = cpu(true, true, false, false);   // Haswell .. Alder Lake (no AVX-512)
  const CpuFeatures zen3 = cpu(false, true, false, false, 0x19);
  const CpuFeatures zen4 = cpu(false, true, true, true, 0x19);
  const CpuFeatures sse = cpu(true, false, false, false);  // no AVX2: nothing wider to offer
  const std::vector<Case> cases = {
      {"SPR taken for Prescott (Debian 0.3.21)", spr, "Prescott", "Cooperlake"},
      {"SPR on the Haswell kernels", spr, "Haswell", "Cooperlake"},
      {"SPR already on Cooperlake", spr, "Cooperlake", ""},
      {"SPR on SkylakeX: already AVX-512", spr, "SkylakeX", ""},
      {"SPR on a newer OpenBLAS's own core", spr, "SapphireRapids", ""},
      {"Cascade Lake taken for Prescott", skx, "Prescott", "SkylakeX"},
      {"Cascade Lake on Haswell", skx, "Haswell", "SkylakeX"},
      {"Cascade Lake on SkylakeX", skx, "SkylakeX", ""},
      {"Haswell-class Intel taken for Prescott", hsw, "Prescott", "Haswell"},
      {"Haswell-class Intel taken for Sandybridge (AVX only)", hsw, "Sandybridge", "Haswell"},
      {"Haswell-class Intel on Haswell", hsw, "Haswell", ""},
      {"Zen 3 on Zen (this machine)", zen3, "Zen", ""},
      {"Zen 3 taken for Barcelona", zen3, "Barcelona", "Zen"},
      {"Zen 3 taken for Prescott", zen3, "Prescott", "Zen"},
      {"Zen 3 on Haswell: same width", zen3, "Haswell", ""},
      {"Zen 4 on Zen: AVX-512 with BF16", zen4, "Zen", "Cooperlake"},
      {"case does not matter (static builds say HASWELL)", spr, "HASWELL", "Cooperlake"},
      {"unknown future core name is trusted", spr, "GraniteRapids", ""},
      {"no AVX2: never forced", sse, "Prescott", ""},
      {"Unknown core on an AVX2 Intel", hsw, "Unknown", "Haswell"},
  };
  for (const Case& c : cases)
    EXPECT_EQ(corrected_openblas_core(c.cpu, c.reported), c.expected) << c.what;
}

TEST(BlasRuntime, NoCorrectionWithoutAvx2EvenWithFmaAlone) {
  CpuFeatures f = cpu(false, false, false, false, 0x15);  // Piledriver: AVX + FMA3, no AVX2
  f.fma = true;
  EXPECT_EQ(corrected_openblas_core(f, "Piledriver"), "");
}

// The live library describes itself, and the start-up line says what it reports.
TEST(BlasRuntime, DescribesTheLinkedOpenBlas) {
  const eco::cpu::BlasInfo b = eco::cpu::blas_info();
  EXPECT_EQ(b.library, "OpenBLAS");
  EXPECT_FALSE(b.version.empty());
  EXPECT_FALSE(b.core.empty());
  EXPECT_GE(b.threads, 1);
  const std::string line = eco::cpu::blas_summary_line();
  EXPECT_EQ(line.rfind("OpenBLAS " + b.version + " (", 0), 0u) << line;
  EXPECT_NE(line.find("core " + b.core), std::string::npos) << line;
}

TEST(BlasRuntime, FeatureDetectionIsConsistent) {
  const CpuFeatures f = eco::cpu::detect_cpu_features();
  if (f.avx512f) {
    EXPECT_TRUE(f.avx2);  // every AVX-512 CPU has AVX2
  }
  if (f.avx512_bf16) {
    EXPECT_TRUE(f.avx512f);
  }
  EXPECT_EQ(f.avx2, __builtin_cpu_supports("avx2") != 0);
}

// Our packed reference sgemm against a double-precision triple loop, on shapes that exercise
// every edge (rows not a multiple of 6, columns not of 16/32 or the 128 block, K past 256).
TEST(CpuCeiling, ReferenceSgemmMatchesADoubleLoop) {
  const CpuFeatures f = eco::cpu::detect_cpu_features();
  if (!f.avx2 || !f.fma) GTEST_SKIP() << "no AVX2+FMA";
  for (const auto& [M, N, K] : std::vector<std::array<int, 3>>{{1, 1, 1}, {7, 33, 300}, {97, 161, 513}}) {
    std::vector<float> a(size_t(M) * K), b(size_t(N) * K), c(size_t(M) * N, -99.0f);
    for (size_t i = 0; i < a.size(); i++) a[i] = std::sin(0.37f * float(i));
    for (size_t i = 0; i < b.size(); i++) b[i] = std::cos(0.11f * float(i));
    ASSERT_TRUE(eco::tools::reference_sgemm_nt(f, M, N, K, a.data(), b.data(), c.data()));
    for (int i = 0; i < M; i++)
      for (int j = 0; j < N; j++) {
        double ref = 0, mag = 0;
        for (int k = 0; k < K; k++) {
          ref += double(a[size_t(i) * K + k]) * b[size_t(j) * K + k];
          mag += std::fabs(double(a[size_t(i) * K + k]) * b[size_t(j) * K + k]);
        }
        // fp32 accumulation over K terms: |error| <= K * 2^-24 * sum|a b| (loose bound / 4).
        ASSERT_NEAR(c[size_t(i) * N + j], ref, 0.25 * K * 6e-8 * mag + 1e-7)
            << M << "x" << N << "x" << K << " at " << i << "," << j;
      }
  }
}

TEST(CpuCeiling, FmaPeakFromFeatures) {
  eco::tools::FmaPeak p = eco::tools::fma_peak(cpu(true, true, true, false));
  EXPECT_EQ(p.units * p.lanes, 32);
  p = eco::tools::fma_peak(cpu(false, true, false, false, 0x19));
  EXPECT_EQ(p.units * p.lanes, 16);
  p = eco::tools::fma_peak(cpu(false, true, true, true, 0x19));  // Zen 4: double-pumped
  EXPECT_EQ(p.units * p.lanes, 16);
  EXPECT_NEAR(p.gflops_per_thread, p.units * p.lanes * 2 * p.ghz, 1e-9);
}

}  // namespace

namespace {

// op(X) (rows, cols) element (i, k) of a row-major X with leading dimension ld.
float at(const std::vector<float>& x, bool trans, int ld, int i, int k) {
  return trans ? x[size_t(k) * size_t(ld) + size_t(i)] : x[size_t(i) * size_t(ld) + size_t(k)];
}

}  // namespace

// cpu::gemm cuts a K above 320 that is not a multiple of 32 into its largest multiple and the
// rest (kernels/cpu/gemm.h): every transpose, padded leading dimensions, beta 1 onto a C, against
// a double loop, within 1e-5 of sum |a||b| (two float sums of up to 1000 products and one add).
TEST(CpuGemm, LongReductionsCutInTwoMatchADoubleLoop) {
  std::mt19937 g(7);
  std::normal_distribution<float> d;
  const int M = 33, N = 47;
  for (const int K : {200, 321, 370, 1000, 1024})
    for (const bool ta : {false, true})
      for (const bool tb : {false, true}) {
        const int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 2;
        std::vector<float> A(size_t(ta ? K : M) * size_t(lda)), B(size_t(tb ? N : K) * size_t(ldb));
        std::vector<float> C(size_t(M) * size_t(ldc));
        for (float& x : A) x = d(g);
        for (float& x : B) x = d(g);
        for (float& x : C) x = d(g);
        const std::vector<float> C0 = C;
        const float alpha = 0.75f;
        eco::cpu::gemm(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, 1.0f, C.data(), ldc);
        double worst = 0;
        for (int i = 0; i < M; ++i)
          for (int j = 0; j < N; ++j) {
            double ref = 0, scale = 0;
            for (int k = 0; k < K; ++k) {
              const double p = double(at(A, ta, lda, i, k)) * double(at(B, tb, ldb, k, j));
              ref += p;
              scale += std::fabs(p);
            }
            const size_t c = size_t(i) * size_t(ldc) + size_t(j);
            ref = double(alpha) * ref + double(C0[c]);
            worst = std::max(worst, std::fabs(double(C[c]) - ref) / (scale + std::fabs(C0[c])));
          }
        EXPECT_LT(worst, 1e-5) << "K " << K << " trans_a " << ta << " trans_b " << tb;
        // The padding past each row of C is left alone.
        for (int i = 0; i < M; ++i)
          for (int j = N; j < ldc; ++j)
            EXPECT_EQ(C[size_t(i) * size_t(ldc) + size_t(j)], C0[size_t(i) * size_t(ldc) + size_t(j)]);
      }
}

// With OpenBLAS's AVX-512 kernels the cut makes every K give the same bits on 1 and 2 threads
// (a K of 370 did not before: its reduction was blocked differently). Other kernels partition
// M and N by the threads as well: skipped, saying which core.
TEST(CpuGemm, Avx512SgemmBitsDoNotDependOnTheThreads) {
  const std::string core = eco::cpu::blas_info().core;
  if (core != "SkylakeX" && core != "Cooperlake")
    GTEST_SKIP() << "OpenBLAS core " << core
                 << ": its sgemm's bits depend on the threads' partition whatever the K";
  std::mt19937 g(11);
  std::normal_distribution<float> d;
  const int M = 256, N = 128;
  for (const int K : {370, 1000, 2047}) {
    std::vector<float> A(size_t(K) * M), B(size_t(K) * N), C1(size_t(M) * N), C2(C1.size());
    for (float& x : A) x = d(g);
    for (float& x : B) x = d(g);
    openblas_set_num_threads(1);
    eco::cpu::gemm(true, false, M, N, K, 1.0f, A.data(), M, B.data(), N, 0.0f, C1.data(), N);
    openblas_set_num_threads(2);
    eco::cpu::gemm(true, false, M, N, K, 1.0f, A.data(), M, B.data(), N, 0.0f, C2.data(), N);
    EXPECT_EQ(std::memcmp(C1.data(), C2.data(), C1.size() * sizeof(float)), 0) << "K " << K;
  }
}
