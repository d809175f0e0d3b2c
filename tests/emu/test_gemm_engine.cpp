// The emulated cuBLASLt itself (shim/cublasLt.h, emu_cublaslt.cpp) and what GemmEngine
// (kernels/cuda/gemm.cpp) does on it that tests/gpu/test_gemm_gpu.cu (run here as it is, target
// eco_emu_gpu_tests) cannot see on one GPU: which cuBLASLt configuration each entry point asks
// for per architecture (sm_90 OUTER_VEC, sm_89's unit-scaled route into fp32, sm_80 without FP8),
// the BIAS-epilogue fallback, plans keyed by pointer alignment, descriptors released.
//  - The emulated matmul against a float64 loop in the same k order, rounded once: bit for bit
//    (column-major, ld > rows, every transpose, batch strides, alpha / beta, bias).
//  - Its refusals: each documented rule refused with the library's status and logged.
#include <cublasLt.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "base/error.h"
#include "emu_common.h"
#include "base/math/qformat.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cpu/quantize.h"

namespace {

using namespace emuh;
using bf16 = __nv_bfloat16;
using eco::cuda::GemmEngine;

// Sets emu::device_cc for one scope (an engine reads it when constructed).
struct DeviceCc {
  int saved;
  explicit DeviceCc(int cc) : saved(emu::device_cc) { emu::device_cc = cc; }
  ~DeviceCc() { emu::device_cc = saved; }
};

// ---- the emulated cuBLASLt, called directly
// ------------------------------------------------------

// One cublasLtMatmul set up by hand (column-major, cuBLASLt's own terms).
struct Lt {
  cublasLtHandle_t h = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  cublasLtMatmulHeuristicResult_t result{};
  std::vector<unsigned char> ws = std::vector<unsigned char>(size_t(8) << 20);
  Lt() {
    cublasLtCreate(&h);
    cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasLtMatmulPreferenceCreate(&pref);
    const uint64_t bytes = ws.size();
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &bytes,
                                         sizeof bytes);
  }
  ~Lt() {
    for (auto* l : {a, b, c}) cublasLtMatrixLayoutDestroy(l);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatmulDescDestroy(desc);
    cublasLtDestroy(h);
  }
  template <class T>
  cublasStatus_t set(cublasLtMatmulDescAttributes_t attr, T v) {
    return cublasLtMatmulDescSetAttribute(desc, attr, &v, sizeof v);
  }
  void align(uint32_t bytes) {
    for (auto attr :
         {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
      cublasLtMatmulPreferenceSetAttribute(pref, attr, &bytes, sizeof bytes);
  }
  // Layouts of op(A) (m, k), op(B) (k, n), C = D (m, n) with the given ld, batch and strides.
  void layouts(cudaDataType_t ab, cudaDataType_t cd, bool ta, bool tb, int64_t m, int64_t n,
               int64_t k, int64_t lda, int64_t ldb, int64_t ldc, int32_t batch = 1, int64_t sa = 0,
               int64_t sb = 0, int64_t sc = 0) {
    set(CUBLASLT_MATMUL_DESC_TRANSA, int32_t(ta ? CUBLAS_OP_T : CUBLAS_OP_N));
    set(CUBLASLT_MATMUL_DESC_TRANSB, int32_t(tb ? CUBLAS_OP_T : CUBLAS_OP_N));
    cublasLtMatrixLayoutCreate(&a, ab, uint64_t(ta ? k : m), uint64_t(ta ? m : k), lda);
    cublasLtMatrixLayoutCreate(&b, ab, uint64_t(tb ? n : k), uint64_t(tb ? k : n), ldb);
    cublasLtMatrixLayoutCreate(&c, cd, uint64_t(m), uint64_t(n), ldc);
    if (batch > 1) {
      const std::pair<cublasLtMatrixLayout_t, int64_t> ls[] = {{a, sa}, {b, sb}, {c, sc}};
      for (auto [l, s] : ls) {
        cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                                         sizeof batch);
        cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &s,
                                         sizeof s);
      }
    }
  }
  cublasStatus_t heuristic() {
    int found = 0;
    return cublasLtMatmulAlgoGetHeuristic(h, desc, a, b, c, c, pref, 1, &result, &found);
  }
  cublasStatus_t matmul(const void* A, const void* B, void* C, float alpha, float beta,
                        size_t ws_bytes = SIZE_MAX) {
    return cublasLtMatmul(h, desc, &alpha, A, a, B, b, &beta, C, c, C, c, &result.algo, ws.data(),
                          ws_bytes == SIZE_MAX ? ws.size() : ws_bytes, nullptr);
  }
};

// The last refusal's reason contains `needle`.
void expect_refused(cublasStatus_t got, cublasStatus_t want, const std::string& needle) {
  EXPECT_EQ(got, want) << cublasLtGetStatusName(got);
  ASSERT_FALSE(emu::lt::refusals.empty());
  EXPECT_NE(emu::lt::refusals.back().why.find(needle), std::string::npos)
      << emu::lt::refusals.back().why;
}

// v rounded once to the nearest bf16 (ties to even): float(v) rounded to bf16 may be one off
// (two roundings), so its neighbours are compared with v in double.
uint16_t round_bf16(double v) {
  const uint16_t b = eco::float_to_bf16(float(v));
  uint16_t best = b;
  double best_err = std::fabs(double(bf(b)) - v);
  for (int d : {-1, 1}) {
    const uint16_t c = uint16_t(b + d);
    if ((c ^ b) & 0x8000 || (c & 0x7f80) == 0x7f80) continue;  // sign change, inf / NaN
    const double e = std::fabs(double(bf(c)) - v);
    if (e < best_err || (e == best_err && !(c & 1))) {
      best = c;
      best_err = e;
    }
  }
  return best;
}

// D (column-major) = alpha * op(A) op(B) + beta * C (+ bias) in double, summed over k in order,
// rounded once: what the emulator computes, written out independently.
TEST(EmuCublasLt, MatmulIsTheFloat64ProductRoundedOnceInEveryLayout) {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (float beta : {0.0f, 1.5f}) {
        SCOPED_TRACE(std::string("op(A)=") + (ta ? "T" : "N") + " op(B)=" + (tb ? "T" : "N") +
                     " beta=" + std::to_string(beta));
        const int64_t m = 13, n = 9, k = 21, batch = 3;
        const int64_t lda = (ta ? k : m) + 3, ldb = (tb ? n : k) + 1, ldc = m + 2;
        const int64_t sa = lda * (ta ? m : k) + 5, sb = ldb * (tb ? k : n) + 2,
                      sc = ldc * n + 1;  // odd strides: 2-byte aligned batch entries
        const std::vector<uint16_t> A = to_bf16(randn(size_t(sa * batch), 1, 1.0f)),
                                    B = to_bf16(randn(size_t(sb * batch), 2, 1.0f));
        std::vector<uint16_t> C = to_bf16(randn(size_t(sc * batch), 3, 1.0f));
        if (beta == 0.0f) std::fill(C.begin(), C.end(), uint16_t(0xFFFF));  // NaN: not read
        const std::vector<uint16_t> bias = to_bf16(randn(size_t(m), 4, 1.0f));
        Lt lt;
        lt.layouts(CUDA_R_16BF, CUDA_R_16BF, ta, tb, m, n, k, lda, ldb, ldc, int32_t(batch), sa, sb,
                   sc);
        lt.align(2);
        const bool with_bias = batch == 3 && beta == 0.0f;
        if (with_bias) {
          lt.set(CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t(CUBLASLT_EPILOGUE_BIAS));
          lt.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(bias.data()));
        }
        ASSERT_EQ(lt.heuristic(), CUBLAS_STATUS_SUCCESS);
        std::vector<uint16_t> D = C;
        ASSERT_EQ(lt.matmul(A.data(), B.data(), D.data(), 0.75f, beta), CUBLAS_STATUS_SUCCESS);
        long bad = 0, outside = 0;
        for (int64_t i = 0; i < batch; ++i)
          for (int64_t col = 0; col < ldc * n + 1 && i * sc + col < int64_t(D.size()); ++col) {
            const int64_t r = col % ldc, j = col / ldc, idx = i * sc + col;
            if (r >= m || j >= n) {
              outside += D[size_t(idx)] != C[size_t(idx)];
              continue;
            }
            double acc = 0;
            for (int64_t p = 0; p < k; ++p)
              acc += double(bf(A[size_t(i * sa + (ta ? p + r * lda : r + p * lda))])) *
                     double(bf(B[size_t(i * sb + (tb ? j + p * ldb : p + j * ldb))]));
            double v = 0.75 * acc;
            if (beta != 0.0f) v += double(beta) * bf(C[size_t(idx)]);
            if (with_bias) v += bf(bias[size_t(r)]);
            bad += D[size_t(idx)] != round_bf16(v);
          }
        EXPECT_EQ(bad, 0);
        EXPECT_EQ(outside, 0) << "elements outside D's windows were written";
        ASSERT_FALSE(emu::lt::calls.empty());
        EXPECT_EQ(emu::lt::calls.back().bias, with_bias);
      }
}

TEST(EmuCublasLt, Fp8OuterVecScalesRowsAndColumnsOnSm90) {
  DeviceCc cc(90);
  const int64_t m = 32, n = 16, k = 48;
  std::vector<uint8_t> A(size_t(k * m)), B(size_t(k * n));
  const auto ra = randn(A.size(), 5, 100.0f), rb = randn(B.size(), 6, 100.0f);
  for (size_t i = 0; i < A.size(); ++i) A[i] = eco::fp8_e4m3_encode_rtn(ra[i]);
  for (size_t i = 0; i < B.size(); ++i) B[i] = eco::fp8_e4m3_encode_rtn(rb[i]);
  std::vector<float> sa = randn(size_t(m), 7, 1.0f), sb = randn(size_t(n), 8, 1.0f);
  std::vector<float> D(size_t(m * n), NAN);
  Lt lt;
  lt.layouts(CUDA_R_8F_E4M3, CUDA_R_32F, true, false, m, n, k, k, k, m);
  lt.align(16);  // host vectors: 16-byte aligned (the preference's default is 256)
  const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
  lt.set(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, mode);
  lt.set(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, mode);
  lt.set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(sa.data()));
  lt.set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(sb.data()));
  ASSERT_EQ(lt.heuristic(), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(lt.matmul(A.data(), B.data(), D.data(), 1.0f, 0.0f), CUBLAS_STATUS_SUCCESS);
  long bad = 0;
  for (int64_t j = 0; j < n; ++j)
    for (int64_t r = 0; r < m; ++r) {
      double acc = 0;
      for (int64_t p = 0; p < k; ++p)
        acc += double(eco::fp8_e4m3_decode(A[size_t(p + r * k)])) *
               double(eco::fp8_e4m3_decode(B[size_t(p + j * k)]));
      bad += D[size_t(r + j * m)] != float(double(sa[size_t(r)]) * double(sb[size_t(j)]) * acc);
    }
  EXPECT_EQ(bad, 0);
}

// Each documented rule, one configuration that breaks it.
TEST(EmuCublasLt, RefusesWhatTheLibraryRefuses) {
  emu::lt::reset_log();
  const std::vector<uint8_t> codes(size_t(64 * 64 + 64), 0x38);  // 1.0 in E4M3
  std::vector<float> f32(size_t(64 * 64 + 64), 0.0f);
  const float one = 1.0f;
  const auto fp8 = [&](Lt& lt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t lda,
                       int64_t ldb, int64_t ldc, int32_t mode) {
    lt.layouts(CUDA_R_8F_E4M3, CUDA_R_32F, ta, tb, m, n, k, lda, ldb, ldc);
    lt.set(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, mode);
    lt.set(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, mode);
    lt.set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(&one));
    lt.set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(&one));
  };
  const int32_t scalar = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F,
                outer = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
  {
    DeviceCc cc(90);
    Lt ok;  // the accepted form: TN, multiples of 16
    fp8(ok, true, false, 32, 16, 32, 32, 32, 32, outer);
    EXPECT_EQ(ok.heuristic(), CUBLAS_STATUS_SUCCESS);
  }
  {
    DeviceCc cc(90);
    Lt nn, nt, tt;
    fp8(nn, false, false, 32, 16, 32, 32, 32, 32, scalar);
    expect_refused(nn.heuristic(), CUBLAS_STATUS_NOT_SUPPORTED, "\"TN\"");
    fp8(nt, false, true, 32, 16, 32, 32, 16, 32, scalar);
    expect_refused(nt.heuristic(), CUBLAS_STATUS_NOT_SUPPORTED, "\"TN\"");
    fp8(tt, true, true, 32, 16, 32, 32, 16, 32, scalar);
    expect_refused(tt.heuristic(), CUBLAS_STATUS_NOT_SUPPORTED, "\"TN\"");
  }
  {
    DeviceCc cc(90);
    Lt k24, lda40, m4;
    fp8(k24, true, false, 32, 16, 24, 24, 24, 32, scalar);
    expect_refused(k24.heuristic(), CUBLAS_STATUS_NOT_SUPPORTED, "16-byte rules");
    fp8(lda40, true, false, 32, 16, 32, 40, 32, 32, scalar);
    expect_refused(lda40.heuristic(), CUBLAS_STATUS_NOT_SUPPORTED, "16-byte rules");
    fp8(m4, true, false, 4, 16, 32, 32, 32, 4, scalar);  // m * 4 bytes = 16: allowed
    EXPECT_EQ(m4.heuristic(), CUBLAS_STATUS_SUCCESS);
    Lt align8;
    fp8(align8, true, false, 32, 16, 32, 32, 32, 32, scalar);
    align8.align(8);
    expect_refused(align8.heuristic(), CUBLAS_STATUS_NOT_SUPPORTED, "16-byte aligned");
  }
  {
    DeviceCc cc(89);
    Lt ov, sc;
    fp8(ov, true, false, 32, 16, 32, 32, 32, 32, outer);
    expect_refused(ov.heuristic(), CUBLAS_STATUS_NOT_SUPPORTED, "OUTER_VEC_32F scaling needs");
    fp8(sc, true, false, 32, 16, 32, 32, 32, 32, scalar);
    EXPECT_EQ(sc.heuristic(), CUBLAS_STATUS_SUCCESS);
  }
  {
    DeviceCc cc(80);
    Lt sc;
    fp8(sc, true, false, 32, 16, 32, 32, 32, 32, scalar);
    expect_refused(sc.heuristic(), CUBLAS_STATUS_NOT_SUPPORTED, "8.9+");
  }
  {
    Lt ld, types, e5m2, wrong_size, bf16_scales;
    ld.layouts(CUDA_R_16BF, CUDA_R_16BF, false, false, 16, 16, 16, 15, 16, 16);
    expect_refused(ld.heuristic(), CUBLAS_STATUS_INVALID_VALUE, "ld >= rows");
    types.layouts(CUDA_R_32F, CUDA_R_16BF, false, false, 16, 16, 16, 16, 16, 16);
    expect_refused(types.heuristic(), CUBLAS_STATUS_NOT_SUPPORTED, "type combination");
    e5m2.layouts(CUDA_R_8F_E5M2, CUDA_R_16BF, true, false, 16, 16, 16, 16, 16, 16);
    expect_refused(e5m2.heuristic(), CUBLAS_STATUS_NOT_SUPPORTED, "type combination");
    expect_refused(wrong_size.set(CUBLASLT_MATMUL_DESC_FAST_ACCUM, int32_t(1)),
                   CUBLAS_STATUS_INVALID_VALUE, "FAST_ACCUM");
    bf16_scales.layouts(CUDA_R_16BF, CUDA_R_16BF, false, false, 16, 16, 16, 16, 16, 16);
    bf16_scales.set(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, outer);
    expect_refused(bf16_scales.heuristic(), CUBLAS_STATUS_NOT_SUPPORTED, "FP8 operands only");
  }
  {
    // At cublasLtMatmul: a pointer less aligned than the algorithm was picked for (default
    // preference: 256), a workspace smaller than the algorithm's, an algorithm of another shape.
    Lt lt;
    lt.layouts(CUDA_R_32F, CUDA_R_32F, false, false, 16, 16, 16, 16, 16, 16);
    ASSERT_EQ(lt.heuristic(), CUBLAS_STATUS_SUCCESS);
    void* buf = nullptr;
    ASSERT_EQ(cudaMalloc(&buf, 4 * 64 * 64), cudaSuccess);
    float* p = static_cast<float*>(buf);
    EXPECT_EQ(lt.matmul(p, p + 256, p + 512, 1.0f, 0.0f), CUBLAS_STATUS_SUCCESS);
    expect_refused(lt.matmul(p + 1, p + 256, p + 512, 1.0f, 0.0f), CUBLAS_STATUS_INVALID_VALUE,
                   "4-byte aligned");
    expect_refused(lt.matmul(p, p + 256, p + 512, 1.0f, 0.0f, 1024), CUBLAS_STATUS_INVALID_VALUE,
                   "workspace");
    Lt other;
    other.layouts(CUDA_R_32F, CUDA_R_32F, false, false, 16, 16, 32, 16, 32, 16);
    other.result = lt.result;
    expect_refused(other.matmul(p, p + 1024, p + 2048, 1.0f, 0.0f), CUBLAS_STATUS_INVALID_VALUE,
                   "another configuration");
    cudaFree(buf);
  }
  std::printf("[   emu    ] %zu refusals logged\n", emu::lt::refusals.size());
}

// ---- GemmEngine on the emulated architectures
// ----------------------------------------------------

struct Fp8Case {
  int N, C, OC;
  std::vector<uint8_t> x, w;
  std::vector<float> xs, ws, bias;
};
Fp8Case fp8_case(int N, int C, int OC, eco::Granularity g) {
  Fp8Case f{N, C, OC, {}, {}, {}, {}, randn(size_t(OC), 30, 1.0f)};
  const auto quant = [&](int rows, uint64_t seed, std::vector<uint8_t>& codes,
                         std::vector<float>& scales) {
    std::vector<float> v = randn(size_t(rows) * size_t(C), seed, 1.0f);
    for (int r = 0; r < rows; ++r)  // rows of very different magnitudes: scales matter
      for (int c = 0; c < C; ++c)
        v[size_t(r) * size_t(C) + size_t(c)] *= std::exp2(float(r % 7 - 3));
    codes.resize(v.size());
    scales.resize(size_t(eco::num_scales(g, rows, C)));
    eco::QTensor q = eco::qtensor_view(eco::QFormat::E4M3, g, rows, C, codes.data(), scales.data());
    eco::quantize(v.data(), q, eco::Rounding::RTN, seed, 0, 0);
  };
  quant(N, 31, f.x, f.xs);
  quant(OC, 32, f.w, f.ws);
  return f;
}

// out (N, OC) bf16 bits of matmul_forward_fp8 on an engine of the current emulated device.
std::vector<uint16_t> run_fp8(GemmEngine& e, const Fp8Case& f, eco::Granularity g, bool bias) {
  Guarded<uint8_t> x(f.x), w(f.w);
  Guarded<float> xs(f.xs), ws(f.ws), b(f.bias);
  Guarded<uint16_t> out(size_t(f.N) * size_t(f.OC));
  e.matmul_forward_fp8(reinterpret_cast<bf16*>(out.data()), x.data(), xs.data(), w.data(),
                       ws.data(), bias ? b.data() : nullptr, f.N, f.C, f.OC, g);
  EXPECT_TRUE(out.guards_intact());
  return out.host();
}

// The float64 product of the dequantized operands plus bf16(bias), per element.
std::vector<double> fp8_reference(const Fp8Case& f, eco::Granularity g, bool bias) {
  std::vector<double> ref(size_t(f.N) * size_t(f.OC));
  const bool row = g == eco::Granularity::PerRow;
  for (int n = 0; n < f.N; ++n)
    for (int o = 0; o < f.OC; ++o) {
      double acc = 0;
      for (int c = 0; c < f.C; ++c)
        acc += double(eco::fp8_e4m3_decode(f.x[size_t(n) * size_t(f.C) + size_t(c)])) *
               double(eco::fp8_e4m3_decode(f.w[size_t(o) * size_t(f.C) + size_t(c)]));
      acc *= double(f.xs[row ? size_t(n) : 0]) * double(f.ws[row ? size_t(o) : 0]);
      ref[size_t(n) * size_t(f.OC) + size_t(o)] =
          acc + (bias ? double(bf(eco::float_to_bf16(f.bias[size_t(o)]))) : 0.0);
    }
  return ref;
}

// Elements further from the reference than `roundings` bf16 roundings (each at most 2^-8
// relative: half an ulp of 8 significant bits).
long beyond_roundings(const std::vector<uint16_t>& got, const std::vector<double>& ref,
                      double roundings) {
  long bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = bf(got[i]), tol = roundings * std::ldexp(std::fabs(ref[i]), -8) + 1e-30;
    bad += !(std::fabs(g - ref[i]) <= tol);
  }
  return bad;
}

// sm_90: one cublasLtMatmul, E4M3 TN with OUTER_VEC scales, fast accumulation and the BIAS
// epilogue straight into bf16: one rounding of the float64 result. sm_89: the unit-scaled SCALAR
// GEMM into the engine's fp32 accumulator, then scale_outer_to_bf16 (sums rounded to fp32,
// scaled in fp32, rounded to bf16): one bf16 rounding plus a few fp32 ones (1e-4 of it).
TEST(EmuGemmEngine, RowwiseFp8TakesOuterVecOnSm90AndTheUnitScaledRouteOnSm89) {
  const Fp8Case f = fp8_case(48, 64, 32, eco::Granularity::PerRow);
  for (bool bias : {false, true}) {
    const std::vector<double> ref = fp8_reference(f, eco::Granularity::PerRow, bias);
    {
      DeviceCc cc(90);
      GemmEngine e;
      emu::lt::reset_log();
      const auto out = run_fp8(e, f, eco::Granularity::PerRow, bias);
      ASSERT_EQ(emu::lt::calls.size(), 1u);
      const auto& c = emu::lt::calls[0];
      EXPECT_EQ(c.scale_mode, CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F);
      EXPECT_EQ(c.a_type, CUDA_R_8F_E4M3);
      EXPECT_EQ(c.c_type, CUDA_R_16BF);
      EXPECT_TRUE(c.fast_accum);
      EXPECT_EQ(c.bias, bias);
      EXPECT_EQ(c.trans_a, CUBLAS_OP_T);
      EXPECT_EQ(c.trans_b, CUBLAS_OP_N);
      EXPECT_EQ(beyond_roundings(out, ref, 1.0), 0) << "sm_90, bias " << bias;
    }
    {
      DeviceCc cc(89);
      GemmEngine e;
      EXPECT_TRUE(e.rowwise_fp8_epilogue());
      emu::lt::reset_log();
      const auto out = run_fp8(e, f, eco::Granularity::PerRow, bias);
      ASSERT_EQ(emu::lt::calls.size(), 1u);
      const auto& c = emu::lt::calls[0];
      EXPECT_EQ(c.scale_mode, CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F);
      EXPECT_EQ(c.c_type, CUDA_R_32F) << "sm_89 sums into the fp32 accumulator";
      EXPECT_FALSE(c.bias) << "the bias goes through scale_outer_to_bf16";
      EXPECT_EQ(beyond_roundings(out, ref, 1.0 + 1e-4), 0) << "sm_89, bias " << bias;
    }
  }
}

TEST(EmuGemmEngine, PerTensorFp8IsOneScalarScaledGemmOnSm89AndSm90) {
  const Fp8Case f = fp8_case(32, 48, 64, eco::Granularity::PerTensor);
  const std::vector<double> ref = fp8_reference(f, eco::Granularity::PerTensor, true);
  for (int cc_value : {89, 90}) {
    DeviceCc cc(cc_value);
    GemmEngine e;
    emu::lt::reset_log();
    const auto out = run_fp8(e, f, eco::Granularity::PerTensor, true);
    ASSERT_EQ(emu::lt::calls.size(), 1u);
    EXPECT_EQ(emu::lt::calls[0].scale_mode, CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F);
    EXPECT_EQ(emu::lt::calls[0].c_type, CUDA_R_16BF);
    EXPECT_EQ(beyond_roundings(out, ref, 1.0), 0) << "sm_" << cc_value;
  }
}

// A plan outlives its call: the next call of the same key (another layer of the same shape)
// must bring its own scale pointers (set per call, not per plan).
TEST(EmuGemmEngine, Fp8CallsOfOneShapeUseTheirOwnScales) {
  DeviceCc cc(90);
  GemmEngine e;
  Fp8Case f[2] = {fp8_case(32, 48, 16, eco::Granularity::PerRow),
                  fp8_case(32, 48, 16, eco::Granularity::PerRow)};
  for (float& s : f[1].xs) s *= 3.0f;
  for (float& s : f[1].ws) s *= 0.25f;
  // cudaMalloc'd (256-byte aligned) buffers: one plan key for both calls.
  const auto dev = [](const auto& v) {
    eco::cuda::DeviceBuffer b(v.size() * sizeof(v[0]));
    std::memcpy(b.get(), v.data(), b.bytes());
    return b;
  };
  struct Buffers {
    eco::cuda::DeviceBuffer x, w, xs, ws, bias, out;
  };
  std::vector<Buffers> bufs;  // all alive at once: distinct pointers for the two calls
  for (int i = 0; i < 2; ++i)
    bufs.push_back({dev(f[i].x), dev(f[i].w), dev(f[i].xs), dev(f[i].ws), dev(f[i].bias),
                    eco::cuda::DeviceBuffer(size_t(f[i].N) * size_t(f[i].OC) * 2)});
  for (int i = 0; i < 2; ++i) {
    const auto& [x, w, xs, ws, bias, out] = bufs[size_t(i)];
    e.matmul_forward_fp8(out.get<bf16>(), x.get<uint8_t>(), xs.get<float>(), w.get<uint8_t>(),
                         ws.get<float>(), bias.get<float>(), f[i].N, f[i].C, f[i].OC,
                         eco::Granularity::PerRow);
    std::vector<uint16_t> got(size_t(f[i].N) * size_t(f[i].OC));
    std::memcpy(got.data(), out.get(), out.bytes());
    EXPECT_EQ(beyond_roundings(got, fp8_reference(f[i], eco::Granularity::PerRow, true), 1.0), 0)
        << "call " << i;
  }
  EXPECT_EQ(e.heuristic_queries(), 1) << "both calls on one plan";
}

// sm_80: FP8 refused on the host (an eco::Error naming the capability), BF16 runs.
TEST(EmuGemmEngine, Sm80RefusesFp8AndRunsBf16) {
  DeviceCc cc(80);
  GemmEngine e;
  EXPECT_EQ(e.compute_capability(), 80);
  const Fp8Case f = fp8_case(16, 16, 16, eco::Granularity::PerRow);
  try {
    run_fp8(e, f, eco::Granularity::PerRow, false);
    ADD_FAILURE() << "FP8 on sm_80 must throw";
  } catch (const eco::Error& err) {
    EXPECT_NE(std::string(err.what()).find("8.9+"), std::string::npos) << err.what();
  }
  Guarded<uint16_t> x(to_bf16(randn(16 * 32, 40, 1.0f))), w(to_bf16(randn(24 * 32, 41, 1.0f))),
      out(16 * 24);
  e.matmul_forward(reinterpret_cast<bf16*>(out.data()), reinterpret_cast<bf16*>(x.data()),
                   reinterpret_cast<bf16*>(w.data()), nullptr, 16, 32, 24);
  EXPECT_EQ(e.heuristic_queries(), 1);
}

// Where cuBLASLt refuses the BIAS epilogue, the engine broadcasts the bias into out and runs
// with beta = 1: the same bits (both round acc + bf16(bias) once), one fallback counted, and the
// refusal remembered (no second heuristic for that key).
TEST(EmuGemmEngine, BiasFallbackGivesTheEpiloguesBits) {
  const int N = 17, C = 40, OC = 50;
  const auto x = to_bf16(randn(size_t(N * C), 50, 1.0f)),
             w = to_bf16(randn(size_t(OC * C), 51, 0.2f));
  const auto bias = randn(size_t(OC), 52, 1.0f);
  std::vector<uint16_t> outs[2];
  for (int refuse = 0; refuse < 2; ++refuse) {
    emu::lt::refuse_bias_epilogue = refuse == 1;
    GemmEngine e;
    Guarded<uint16_t> dx(x), dw(w), out(size_t(N * OC));
    Guarded<float> db(bias);
    for (int rep = 0; rep < 2; ++rep)
      e.matmul_forward(reinterpret_cast<bf16*>(out.data()), reinterpret_cast<bf16*>(dx.data()),
                       reinterpret_cast<bf16*>(dw.data()), db.data(), N, C, OC);
    emu::lt::refuse_bias_epilogue = false;
    outs[refuse] = out.host();
    EXPECT_EQ(e.bias_epilogue_fallbacks(), refuse ? 2 : 0);
    EXPECT_EQ(e.heuristic_queries(), refuse ? 2 : 1) << "refused key queried once, then cached";
    EXPECT_TRUE(out.guards_intact());
  }
  EXPECT_EQ(differ(outs[0], outs[1]), 0);
}

// The plan key holds the pointers' alignments: the same shape at a 2-byte offset is a new plan
// (with an algorithm picked for that alignment; the emulated cublasLtMatmul refuses an algorithm
// picked for more), and gives the same values.
TEST(EmuGemmEngine, PlansAreKeyedByPointerAlignment) {
  const int N = 8, C = 24, OC = 16;
  const auto x = to_bf16(randn(size_t(N * C), 60, 1.0f)),
             w = to_bf16(randn(size_t(OC * C), 61, 1.0f));
  GemmEngine e;
  std::vector<uint16_t> outs[2];
  for (size_t mis : {size_t(0), size_t(2)}) {
    Guarded<uint16_t> dx(x, mis), dw(w, mis), out(size_t(N * OC), mis);
    e.matmul_forward(reinterpret_cast<bf16*>(out.data()), reinterpret_cast<bf16*>(dx.data()),
                     reinterpret_cast<bf16*>(dw.data()), nullptr, N, C, OC);
    outs[mis ? 1 : 0] = out.host();
  }
  EXPECT_EQ(e.heuristic_queries(), 2);
  EXPECT_EQ(differ(outs[0], outs[1]), 0);
}

// Handles, descriptors, layouts and preferences are all released with the engine.
TEST(EmuGemmEngine, ReleasesEveryCublasLtObject) {
  const long h = emu::lt::handles_alive, d = emu::lt::descs_alive, l = emu::lt::layouts_alive,
             p = emu::lt::prefs_alive;
  {
    GemmEngine e;
    Guarded<uint16_t> x(to_bf16(randn(64, 70, 1.0f))), out(64);
    Guarded<float> acc(std::vector<float>(64, 0.0f));
    e.gemm<bf16, bf16>(false, true, 8, 8, 8, 1.0f, reinterpret_cast<bf16*>(x.data()), 8,
                       reinterpret_cast<bf16*>(x.data()), 8, 0.0f,
                       reinterpret_cast<bf16*>(out.data()), 8);
    e.gemm<bf16, float>(true, false, 8, 8, 8, 1.0f, reinterpret_cast<bf16*>(x.data()), 8,
                        reinterpret_cast<bf16*>(x.data()), 8, 1.0f, acc.data(), 8);
    EXPECT_EQ(emu::lt::handles_alive, h + 1);
    EXPECT_EQ(emu::lt::descs_alive, d + 2);
    EXPECT_EQ(emu::lt::layouts_alive, l + 6);
    EXPECT_EQ(emu::lt::prefs_alive, p) << "a preference lives only through its heuristic query";
  }
  EXPECT_EQ(emu::lt::handles_alive, h);
  EXPECT_EQ(emu::lt::descs_alive, d);
  EXPECT_EQ(emu::lt::layouts_alive, l);
}

}  // namespace
