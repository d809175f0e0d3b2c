// GPU tests of GemmEngine (kernels/cuda/gemm.h): the BF16 linear forward/backward against the CPU
// twins, the strided batched GEMM in every layout, the FP8 forward against the fp32 product of the
// dequantized operands, the heuristic cache, determinism and the FP8 argument checks.
//
// Tolerances, with rel_err = ||gpu - ref|| / ||ref|| (NaN or inf anywhere never passes):
//  - bf16 outputs vs the fp32 CPU twin on the same bf16-rounded inputs, the reference rounded to
//    bf16 like the GPU's output: products of bf16 values are exact in fp32, so the two differ only
//    by fp32 summation order (~1e-6 relative), which flips a bf16 rounding (one ulp, <= 2^-8
//    relative) in rare elements. Even a tiny 16-element output with two flips stays below 1.4e-3:
//    tolerance 2e-3. (Against the unrounded fp32 reference the output rounding alone gives
//    ~1.5e-3 on average and up to 2^-8 = 3.9e-3 on small outputs: too close to test.)
//  - fp32 outputs from bf16 inputs (dweight, dbias, batched -> f32): only summation order and the
//    tensor cores' fp32 accumulation differ, expected ~1e-6: tolerance 1e-4.
//  - fp32 x fp32 (no TF32): tolerance 1e-5.
//  - FP8: same codes and scales on both sides, so quantization error cancels; left are the bf16
//    output rounding (~1.5e-3) and Hopper's FP8 fast accumulation, whose accumulator keeps fewer
//    bits than fp32 (DeepSeek-V3 reports ~14 bits; its error grows with K, ~1e-3 at K <= 768):
//    tolerance 1e-2. Wrong or swapped scales give errors of order 1 (the rows are given very
//    different magnitudes on purpose).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "gpu_test.h"
#include "base/math/bf16.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cpu/quantize.h"

namespace eco {
namespace {

using cuda::DeviceBuffer;
using cuda::GemmEngine;
using gputest::poison;
using gputest::randn;
using gputest::rel_err;
using gputest::to_device;
using gputest::to_host;

constexpr double kTolBf16Out = 2e-3;
// With the BIAS epilogue the H200 measured up to 2.7e-3 (N=17, C=33, OC=50): cuBLASLt evidently
// rounds the product to bf16 before adding the bias and rounds again, two bf16 roundings instead
// of one. Still inside the bf16 band [1e-3, 1e-2] of CUDA-NOTES.
constexpr double kTolBf16OutWithBias = 5e-3;
constexpr double kTolF32OutBf16In = 1e-4;
constexpr double kTolF32 = 1e-5;
constexpr double kTolFp8 = 1e-2;

// A fresh seed for every random tensor of every check.
uint64_t next_seed() {
  static uint64_t seed = 1000;
  return ++seed;
}

std::vector<float> bf16_round(std::vector<float> x) {
  for (float& v : x) v = bf16_to_float(float_to_bf16(v));
  return x;
}
std::vector<uint16_t> bf16_bits(const std::vector<float>& x) {
  std::vector<uint16_t> b(x.size());
  for (size_t i = 0; i < x.size(); ++i) b[i] = float_to_bf16(x[i]);
  return b;
}
std::vector<float> from_bf16_bits(const std::vector<uint16_t>& b) {
  std::vector<float> x(b.size());
  for (size_t i = 0; i < b.size(); ++i) x[i] = bf16_to_float(b[i]);
  return x;
}

// A bf16 tensor: random normals rounded to bf16 (host floats, exactly the device's values).
struct Bf16Tensor {
  std::vector<float> host;
  DeviceBuffer dev;
  __nv_bfloat16* ptr() const { return dev.get<__nv_bfloat16>(); }
};
Bf16Tensor random_bf16(size_t n, float std = 1.0f) {
  Bf16Tensor t;
  t.host = bf16_round(randn(n, next_seed(), std));
  t.dev = to_device(bf16_bits(t.host));
  return t;
}
std::vector<float> download_bf16(const DeviceBuffer& d, size_t n) {
  return from_bf16_bits(to_host<uint16_t>(d, n));
}

// Not a failure (the fallback gives the same result) but worth knowing on a new GPU / cuBLASLt.
void note_bias_fallbacks(const GemmEngine& engine, const char* what) {
  if (engine.bias_epilogue_fallbacks() > 0)
    std::printf(
        "[   NOTE   ] %s: cuBLASLt refused the BIAS epilogue in %lld calls; the bias "
        "went through the broadcast + beta = 1 fallback\n",
        what, static_cast<long long>(engine.bias_epilogue_fallbacks()));
}

void sync() {
  ECO_CHECK_CUDA(cudaGetLastError());
  ECO_CHECK_CUDA(cudaDeviceSynchronize());
}

struct LinearShape {
  int N, C, OC;
};
std::string str(const LinearShape& s) {
  return "N=" + std::to_string(s.N) + " C=" + std::to_string(s.C) + " OC=" + std::to_string(s.OC);
}

// Ragged on purpose: N = 1, odd C and OC (2-byte aligned rows), multiples of 256 rows plus more.
const LinearShape kBf16Shapes[] = {
    {1, 16, 16}, {17, 33, 50}, {64, 768, 2304}, {255, 200, 771}, {600, 96, 130}};

// ---- BF16 linear layer -------------------------------------------------------------------------

TEST(GpuGemm, Bf16ForwardMatchesCpuTwin) {
  ECO_REQUIRE_GPU();
  GemmEngine engine;
  for (const LinearShape& s : kBf16Shapes) {
    for (bool with_bias : {false, true}) {
      const auto inp = random_bf16(size_t(s.N) * s.C);
      const auto w = random_bf16(size_t(s.OC) * s.C, 1.0f / std::sqrt(float(s.C)));
      // A bf16-representable bias: the BIAS epilogue reads the bias rounded to bf16.
      const auto bias_host = bf16_round(randn(size_t(s.OC), next_seed()));
      const auto bias = to_device(bias_host);
      DeviceBuffer out(size_t(s.N) * s.OC * 2);
      poison(out);
      engine.matmul_forward(out.get<__nv_bfloat16>(), inp.ptr(), w.ptr(),
                            with_bias ? bias.get<float>() : nullptr, s.N, s.C, s.OC);
      sync();

      std::vector<float> ref(size_t(s.N) * s.OC);
      cpu::matmul_forward<float>(ref.data(), inp.host.data(), w.host.data(),
                                 with_bias ? bias_host.data() : nullptr, s.N, s.C, s.OC);
      const double err = rel_err(download_bf16(out, ref.size()), bf16_round(ref));
      EXPECT_LE(err, with_bias ? kTolBf16OutWithBias : kTolBf16Out) << str(s) << " bias " << with_bias;
    }
  }
  note_bias_fallbacks(engine, "bf16 forward");
}

// matmul_backward: dinp with beta = 0 then beta = 1; dweight and dbias accumulate (+=) into
// random initial values, checked after one call and after a second identical call.
TEST(GpuGemm, Bf16BackwardMatchesCpuTwinAndAccumulates) {
  ECO_REQUIRE_GPU();
  GemmEngine engine;
  for (const LinearShape& s : kBf16Shapes) {
    const size_t n_inp = size_t(s.N) * s.C, n_out = size_t(s.N) * s.OC, n_w = size_t(s.OC) * s.C;
    const auto dout = random_bf16(n_out);
    const auto inp = random_bf16(n_inp);
    const auto w = random_bf16(n_w, 1.0f / std::sqrt(float(s.C)));
    const auto dw0 = randn(n_w, next_seed(), 0.5f), db0 = randn(size_t(s.OC), next_seed(), 0.5f);

    // The products once, from the CPU twin on zeroed gradients.
    std::vector<float> p_inp(n_inp, 0.0f), p_w(n_w, 0.0f), p_b(size_t(s.OC), 0.0f);
    cpu::matmul_backward<float>(p_inp.data(), p_w.data(), p_b.data(), dout.host.data(),
                                inp.host.data(), w.host.data(), s.N, s.C, s.OC);

    DeviceBuffer dinp(n_inp * 2);
    poison(dinp);
    auto dw = to_device(dw0), db = to_device(db0);
    const auto call = [&](bool accumulate) {
      engine.matmul_backward(dinp.get<__nv_bfloat16>(), dw.get<float>(), db.get<float>(),
                             dout.ptr(), inp.ptr(), w.ptr(), s.N, s.C, s.OC, accumulate);
      sync();
    };
    std::vector<float> ref_w = dw0, ref_b = db0;

    call(false);  // dinp = dout @ W (poisoned before: beta = 0 must not read it)
    const auto dinp1 = download_bf16(dinp, n_inp);
    EXPECT_LE(rel_err(dinp1, bf16_round(p_inp)), kTolBf16Out) << str(s) << " dinp beta=0";
    for (size_t i = 0; i < n_w; ++i) ref_w[i] += p_w[i];
    for (int o = 0; o < s.OC; ++o) ref_b[o] += p_b[o];
    EXPECT_LE(rel_err(to_host<float>(dw, n_w), ref_w), kTolF32OutBf16In) << str(s) << " dW x1";
    EXPECT_LE(rel_err(to_host<float>(db, size_t(s.OC)), ref_b), kTolF32OutBf16In)
        << str(s) << " dbias x1";

    call(true);  // dinp = bf16(dinp1 + dout @ W); dW, dbias += the products once more
    std::vector<float> ref_inp2(n_inp);
    for (size_t i = 0; i < n_inp; ++i) ref_inp2[i] = dinp1[i] + p_inp[i];
    EXPECT_LE(rel_err(download_bf16(dinp, n_inp), bf16_round(ref_inp2)), kTolBf16Out)
        << str(s) << " dinp beta=1";
    for (size_t i = 0; i < n_w; ++i) ref_w[i] += p_w[i];
    for (int o = 0; o < s.OC; ++o) ref_b[o] += p_b[o];
    EXPECT_LE(rel_err(to_host<float>(dw, n_w), ref_w), kTolF32OutBf16In) << str(s) << " dW x2";
    EXPECT_LE(rel_err(to_host<float>(db, size_t(s.OC)), ref_b), kTolF32OutBf16In)
        << str(s) << " dbias x2";
  }
}

// Same inputs, same engine: bit-identical outputs (a difference would be a race or a
// non-deterministic reduction, which would break bit-exact resume).
TEST(GpuGemm, RepeatedCallsAreBitIdentical) {
  ECO_REQUIRE_GPU();
  GemmEngine engine;
  const int N = 600, C = 768, OC = 2304;
  const auto inp = random_bf16(size_t(N) * C), w = random_bf16(size_t(OC) * C, 0.03f);
  const auto dout = random_bf16(size_t(N) * OC);
  const auto bias = to_device(randn(size_t(OC), next_seed()));
  std::vector<uint16_t> out_bits[2];
  std::vector<float> dw[2], db[2];
  for (int rep = 0; rep < 2; ++rep) {
    DeviceBuffer out(size_t(N) * OC * 2), dinp(size_t(N) * C * 2);
    auto dwd = to_device(std::vector<float>(size_t(OC) * C, 0.0f));
    auto dbd = to_device(std::vector<float>(size_t(OC), 0.0f));
    poison(out);
    engine.matmul_forward(out.get<__nv_bfloat16>(), inp.ptr(), w.ptr(), bias.get<float>(), N, C,
                          OC);
    engine.matmul_backward(dinp.get<__nv_bfloat16>(), dwd.get<float>(), dbd.get<float>(),
                           dout.ptr(), inp.ptr(), w.ptr(), N, C, OC, false);
    sync();
    out_bits[rep] = to_host<uint16_t>(out, size_t(N) * OC);
    dw[rep] = to_host<float>(dwd, size_t(OC) * C);
    db[rep] = to_host<float>(dbd, size_t(OC));
  }
  EXPECT_TRUE(out_bits[0] == out_bits[1]) << "forward output differs between identical calls";
  EXPECT_EQ(std::memcmp(dw[0].data(), dw[1].data(), dw[0].size() * 4), 0) << "dweight differs";
  EXPECT_EQ(std::memcmp(db[0].data(), db[1].data(), db[0].size() * 4), 0) << "dbias differs";
}

// The heuristic runs once per plan key (shape, layout, types, epilogue, ...): the second
// identical call is a cache hit.
TEST(GpuGemm, HeuristicRunsOncePerPlanKey) {
  ECO_REQUIRE_GPU();
  GemmEngine engine;
  const auto inp = random_bf16(64 * 128), w = random_bf16(256 * 128, 0.1f);
  const auto bias = to_device(randn(256, next_seed()));
  DeviceBuffer out(64 * 256 * 2);
  const auto fwd = [&](int N, const float* b) {
    engine.matmul_forward(out.get<__nv_bfloat16>(), inp.ptr(), w.ptr(), b, N, 128, 256);
    sync();
  };
  EXPECT_EQ(engine.heuristic_queries(), 0);
  fwd(64, nullptr);
  EXPECT_EQ(engine.heuristic_queries(), 1);
  fwd(64, nullptr);
  EXPECT_EQ(engine.heuristic_queries(), 1) << "second identical call must hit the plan cache";
  fwd(32, nullptr);
  EXPECT_EQ(engine.heuristic_queries(), 2) << "a new shape is a new plan";
  fwd(64, bias.get<float>());
  EXPECT_EQ(engine.heuristic_queries(), 3) << "the bias epilogue is part of the key";
  fwd(64, bias.get<float>());
  fwd(32, nullptr);
  EXPECT_EQ(engine.heuristic_queries(), 3);
  EXPECT_EQ(engine.cached_plans(), 3);
}

// ---- strided batched GEMM ----------------------------------------------------------------------

// C_i = alpha * op(A_i) @ op(B_i) + beta * C_i in double, row-major with leading dims / strides.
void reference_gemm(bool ta, bool tb, int M, int N, int K, double alpha,
                    const std::vector<float>& A, int64_t lda, int64_t sa,
                    const std::vector<float>& B, int64_t ldb, int64_t sb, double beta,
                    std::vector<double>& C, int64_t ldc, int64_t sc, int batch) {
  for (int i = 0; i < batch; ++i)
    for (int m = 0; m < M; ++m)
      for (int n = 0; n < N; ++n) {
        double acc = 0;
        for (int k = 0; k < K; ++k) {
          const double a = A[i * sa + (ta ? int64_t(k) * lda + m : int64_t(m) * lda + k)];
          const double b = B[i * sb + (tb ? int64_t(n) * ldb + k : int64_t(k) * ldb + n)];
          acc += a * b;
        }
        double& c = C[i * sc + int64_t(m) * ldc + n];
        c = alpha * acc + (beta != 0 ? beta * c : 0.0);
      }
}

// Host-side element type of a device matrix: bf16 bits or fp32.
template <class T>
struct HostOf;
template <>
struct HostOf<__nv_bfloat16> {
  using type = uint16_t;
  static float to_float(uint16_t b) { return bf16_to_float(b); }
  static uint16_t from_float(float x) { return float_to_bf16(x); }
  static uint16_t poison() { return 0xFFFF; }  // NaN
};
template <>
struct HostOf<float> {
  using type = float;
  static float to_float(float x) { return x; }
  static float from_float(float x) { return x; }
  static float poison() {  // NaN
    const uint32_t u = 0xFFFFFFFFu;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

// Runs one strided batched GEMM with padded leading dims and odd (unaligned) batch strides, C's
// window either poisoned (beta = 0) or random (beta = 1), everything outside the window holding
// a sentinel that must survive; compares the window against the double reference.
template <class AB, class CD>
void check_batched(GemmEngine& engine, bool ta, bool tb, int M, int N, int K, int batch, float beta,
                   double tol) {
  using HA = HostOf<AB>;
  using HC = HostOf<CD>;
  const int a_rows = ta ? K : M, a_cols = ta ? M : K, b_rows = tb ? N : K, b_cols = tb ? K : N;
  const int64_t lda = a_cols + 3, ldb = b_cols + 5, ldc = N + 2;
  const int64_t sa = a_rows * lda + 7, sb = b_rows * ldb + 1, sc = int64_t(M) * ldc + 3;
  const float alpha = 0.5f;

  // Inputs: random everywhere (padding too), rounded to the operand type.
  auto a = randn(size_t(sa) * batch, next_seed()), b = randn(size_t(sb) * batch, next_seed());
  std::vector<typename HA::type> a_dev(a.size()), b_dev(b.size());
  for (size_t i = 0; i < a.size(); ++i) a[i] = HA::to_float(a_dev[i] = HA::from_float(a[i]));
  for (size_t i = 0; i < b.size(); ++i) b[i] = HA::to_float(b_dev[i] = HA::from_float(b[i]));

  // C: sentinel outside the windows, poison (beta 0) or random values (beta 1) inside.
  const typename HC::type sentinel = HC::from_float(12345.0f);  // compared as stored
  std::vector<typename HC::type> c_dev(size_t(sc) * batch, sentinel);
  std::vector<double> ref(c_dev.size(), 0.0);
  const auto c_init = randn(c_dev.size(), next_seed());
  const auto in_window = [&](size_t idx) {
    const int64_t r = int64_t(idx) % sc;
    return r < int64_t(M) * ldc && r % ldc < N;
  };
  for (size_t i = 0; i < c_dev.size(); ++i)
    if (in_window(i)) {
      if (beta != 0) {
        c_dev[i] = HC::from_float(c_init[i]);
        ref[i] = HC::to_float(c_dev[i]);
      } else {
        c_dev[i] = HC::poison();
      }
    }
  const DeviceBuffer da = to_device(a_dev), db = to_device(b_dev), dc = to_device(c_dev);
  engine.gemm_strided_batched<AB, CD>(ta, tb, M, N, K, alpha, da.get<AB>(), lda, sa, db.get<AB>(),
                                      ldb, sb, beta, dc.get<CD>(), ldc, sc, batch);
  sync();
  reference_gemm(ta, tb, M, N, K, alpha, a, lda, sa, b, ldb, sb, beta, ref, ldc, sc, batch);

  const auto got = to_host<typename HC::type>(dc, c_dev.size());
  std::vector<float> got_w, ref_w;
  size_t clobbered = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (in_window(i)) {
      got_w.push_back(HC::to_float(got[i]));
      // bf16 outputs are compared with the reference rounded the same way (see the top).
      ref_w.push_back(HC::to_float(HC::from_float(float(ref[i]))));
    } else if (got[i] != sentinel) {
      ++clobbered;
    }
  }
  const std::string what = std::string("op(A)=") + (ta ? "T" : "N") + " op(B)=" + (tb ? "T" : "N") +
                           " M=" + std::to_string(M) + " N=" + std::to_string(N) +
                           " K=" + std::to_string(K) + " batch=" + std::to_string(batch) +
                           " beta=" + std::to_string(beta);
  EXPECT_EQ(clobbered, 0u) << what << ": elements outside the C windows were written";
  EXPECT_LE(rel_err(got_w, ref_w), tol) << what;
}

TEST(GpuGemm, StridedBatchedMatchesReferenceInEveryLayout) {
  ECO_REQUIRE_GPU();
  GemmEngine engine;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (float beta : {0.0f, 1.0f}) {
        check_batched<__nv_bfloat16, __nv_bfloat16>(engine, ta, tb, 37, 29, 45, 3, beta,
                                                    kTolBf16Out);
        check_batched<__nv_bfloat16, float>(engine, ta, tb, 37, 29, 45, 3, beta, kTolF32OutBf16In);
        check_batched<float, float>(engine, ta, tb, 37, 29, 45, 3, beta, kTolF32);
      }
  // Single matrices (batch 1) and a degenerate row.
  check_batched<__nv_bfloat16, __nv_bfloat16>(engine, false, true, 1, 64, 128, 1, 0.0f,
                                              kTolBf16Out);
  check_batched<__nv_bfloat16, float>(engine, true, false, 130, 70, 1, 1, 1.0f, kTolF32OutBf16In);
}

// The attention use: heads batched inside qkv (T, 3C) (head h at column h*hs, stride hs),
// att_h = scale * q_h k_h^T (stride T*T), then y_h = att_h v_h written into y (T, C) at column
// h*hs (ldc C, stride hs): interleaved outputs must not overwrite each other.
TEST(GpuGemm, AttentionLayoutBatchedOverHeads) {
  ECO_REQUIRE_GPU();
  GemmEngine engine;
  const int T = 96, NH = 4, hs = 64, C = NH * hs;
  const float scale = 1.0f / std::sqrt(float(hs));
  const auto qkv = random_bf16(size_t(T) * 3 * C);
  DeviceBuffer att(size_t(NH) * T * T * 4), y(size_t(T) * C * 2);
  poison(att);
  poison(y);
  const __nv_bfloat16* q = qkv.ptr();
  engine.gemm_strided_batched<__nv_bfloat16, float>(false, true, T, T, hs, scale, q, 3 * C, hs,
                                                    q + C, 3 * C, hs, 0.0f, att.get<float>(), T,
                                                    int64_t(T) * T, NH);
  // att in bf16 for the second product (as an attention kernel would keep probabilities).
  const auto att_h = to_host<float>(att, size_t(NH) * T * T);
  const auto att_bf = bf16_round(att_h);
  const auto att_dev = to_device(bf16_bits(att_bf));
  engine.gemm_strided_batched<__nv_bfloat16, __nv_bfloat16>(
      false, false, T, hs, T, 1.0f, att_dev.get<__nv_bfloat16>(), T, int64_t(T) * T, q + 2 * C,
      3 * C, hs, 0.0f, y.get<__nv_bfloat16>(), C, hs, NH);
  sync();

  std::vector<float> ref_att(size_t(NH) * T * T), ref_y(size_t(T) * C);
  for (int h = 0; h < NH; ++h)
    for (int i = 0; i < T; ++i) {
      for (int j = 0; j < T; ++j) {
        double acc = 0;
        for (int d = 0; d < hs; ++d)
          acc += double(qkv.host[size_t(i) * 3 * C + h * hs + d]) *
                 qkv.host[size_t(j) * 3 * C + C + h * hs + d];
        ref_att[(size_t(h) * T + i) * T + j] = float(scale * acc);
      }
      for (int d = 0; d < hs; ++d) {
        double acc = 0;
        for (int j = 0; j < T; ++j)
          acc += double(att_bf[(size_t(h) * T + i) * T + j]) *
                 qkv.host[size_t(j) * 3 * C + 2 * C + h * hs + d];
        ref_y[size_t(i) * C + h * hs + d] = float(acc);
      }
    }
  EXPECT_LE(rel_err(att_h, ref_att), kTolF32OutBf16In) << "att = scale * q k^T";
  EXPECT_LE(rel_err(download_bf16(y, ref_y.size()), bf16_round(ref_y)), kTolBf16Out)
      << "y = att v (every element of y written exactly once)";
}

// ---- FP8 forward -------------------------------------------------------------------------------

// x (rows, cols): normals whose rows have magnitudes spread over ~2^-4 .. 2^4, so that per-row
// scales matter.
std::vector<float> rows_of_mixed_magnitude(int rows, int cols) {
  auto x = randn(size_t(rows) * cols, next_seed());
  const auto g = randn(size_t(rows), next_seed());
  for (int r = 0; r < rows; ++r) {
    const float m = std::exp2(std::fmax(-4.0f, std::fmin(4.0f, 2.0f * g[r])));
    for (int c = 0; c < cols; ++c) x[size_t(r) * cols + c] *= m;
  }
  return x;
}

// Quantized on the CPU (eco::quantize, E4M3, RTN): codes, scales and the dequantized values.
struct Fp8Operand {
  std::vector<uint8_t> codes;
  std::vector<float> scales, dequant;
  DeviceBuffer d_codes, d_scales;
};
Fp8Operand quantize_e4m3(const std::vector<float>& x, int rows, int cols, Granularity g) {
  Fp8Operand o;
  o.codes.resize(x.size());
  o.scales.resize(size_t(num_scales(g, rows, cols)));
  QTensor q = qtensor_view(QFormat::E4M3, g, rows, cols, o.codes.data(), o.scales.data());
  quantize(x.data(), q, Rounding::RTN, next_seed(), 0, 0);
  o.dequant.resize(x.size());
  dequantize(q, o.dequant.data());
  o.d_codes = to_device(o.codes);
  o.d_scales = to_device(o.scales);
  return o;
}

void check_fp8_forward(GemmEngine& engine, Granularity g) {
  const LinearShape shapes[] = {{16, 16, 16}, {48, 32, 80}, {64, 768, 2304}, {272, 768, 3072}};
  for (const LinearShape& s : shapes) {
    for (bool with_bias : {false, true}) {
      const auto x = quantize_e4m3(rows_of_mixed_magnitude(s.N, s.C), s.N, s.C, g);
      auto w_f = rows_of_mixed_magnitude(s.OC, s.C);
      for (float& v : w_f) v /= std::sqrt(float(s.C));
      const auto w = quantize_e4m3(w_f, s.OC, s.C, g);
      const auto bias_host = bf16_round(randn(size_t(s.OC), next_seed()));
      const auto bias = to_device(bias_host);
      DeviceBuffer out(size_t(s.N) * s.OC * 2);
      poison(out);
      engine.matmul_forward_fp8(out.get<__nv_bfloat16>(), x.d_codes.get<uint8_t>(),
                                x.d_scales.get<float>(), w.d_codes.get<uint8_t>(),
                                w.d_scales.get<float>(), with_bias ? bias.get<float>() : nullptr,
                                s.N, s.C, s.OC, g);
      sync();
      std::vector<float> ref(size_t(s.N) * s.OC);
      cpu::matmul_forward<float>(ref.data(), x.dequant.data(), w.dequant.data(),
                                 with_bias ? bias_host.data() : nullptr, s.N, s.C, s.OC);
      EXPECT_LE(rel_err(download_bf16(out, ref.size()), ref), kTolFp8)
          << str(s) << " bias " << with_bias << " scales " << granularity_name(g);
    }
  }
  note_bias_fallbacks(engine, granularity_name(g));
}

TEST(GpuGemmFp8, RowwiseForwardMatchesDequantizedReference) {
  ECO_REQUIRE_GPU();
  GemmEngine engine;
  // sm_90+: OUTER_VEC_32F; sm_89: the engine's own unit-scaled route.
  if (engine.compute_capability() < 89)
    GTEST_SKIP() << "FP8 GEMM needs sm_89+; this GPU is sm_" << engine.compute_capability();
  check_fp8_forward(engine, Granularity::PerRow);
}

// sm_89's route for per-row scales (a unit-scaled per-tensor GEMM into fp32, then
// scale_outer_to_bf16), forced on this GPU: against the dequantized reference like the
// OUTER_VEC route, and against that route's own output on sm_90+ (the same products; fast
// accumulation and the rounding of the scaling may differ: 1e-2 relative, bf16 outputs).
TEST(GpuGemmFp8, RowwiseEpilogueRouteMatchesDequantizedReferenceAndOuterVec) {
  ECO_REQUIRE_GPU();
  GemmEngine engine;
  if (engine.compute_capability() < 89)
    GTEST_SKIP() << "FP8 GEMM needs sm_89+; this GPU is sm_" << engine.compute_capability();
  engine.set_rowwise_fp8_epilogue(true);
  ASSERT_TRUE(engine.rowwise_fp8_epilogue());
  check_fp8_forward(engine, Granularity::PerRow);
  if (engine.compute_capability() < 90) return;
  GemmEngine outer_vec;
  ASSERT_FALSE(outer_vec.rowwise_fp8_epilogue());
  const LinearShape s{64, 768, 2304};
  const auto x = quantize_e4m3(rows_of_mixed_magnitude(s.N, s.C), s.N, s.C, Granularity::PerRow);
  const auto w = quantize_e4m3(rows_of_mixed_magnitude(s.OC, s.C), s.OC, s.C, Granularity::PerRow);
  const auto bias = to_device(bf16_round(randn(size_t(s.OC), next_seed())));
  DeviceBuffer a(size_t(s.N) * s.OC * 2), b(size_t(s.N) * s.OC * 2);
  poison(a);
  poison(b);
  const auto run = [&](GemmEngine& e, DeviceBuffer& out) {
    e.matmul_forward_fp8(out.get<__nv_bfloat16>(), x.d_codes.get<uint8_t>(),
                         x.d_scales.get<float>(), w.d_codes.get<uint8_t>(),
                         w.d_scales.get<float>(), bias.get<float>(), s.N, s.C, s.OC,
                         Granularity::PerRow);
  };
  run(engine, a);
  run(outer_vec, b);
  sync();
  const size_t n = size_t(s.N) * s.OC;
  EXPECT_LE(rel_err(download_bf16(a, n), download_bf16(b, n)), 1e-2) << str(s);
}

TEST(GpuGemmFp8, PerTensorForwardMatchesDequantizedReference) {
  ECO_REQUIRE_GPU();
  GemmEngine engine;
  if (engine.compute_capability() < 89)
    GTEST_SKIP() << "FP8 GEMM needs sm_89+; this GPU is sm_" << engine.compute_capability();
  check_fp8_forward(engine, Granularity::PerTensor);
}

void expect_error_containing(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected an error containing \"" << needle << "\"";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "error \"" << e.what() << "\" does not mention \"" << needle << "\"";
  }
}

// The host checks run before anything touches the GPU and name the offending shapes.
TEST(GpuGemmFp8, RejectsShapesNotMultipleOf16AndMisalignedPointers) {
  ECO_REQUIRE_GPU();
  GemmEngine engine;
  DeviceBuffer codes(64 * 64 + 64), scales(64 * 4), out(64 * 64 * 2 + 64);
  const auto call = [&](int N, int C, int OC, size_t code_offset) {
    return [&, N, C, OC, code_offset] {
      engine.matmul_forward_fp8(out.get<__nv_bfloat16>(), codes.get<uint8_t>() + code_offset,
                                scales.get<float>(), codes.get<uint8_t>(), scales.get<float>(),
                                nullptr, N, C, OC, Granularity::PerRow);
    };
  };
  expect_error_containing(call(17, 32, 32, 0), "N=17 C=32 OC=32");
  expect_error_containing(call(17, 32, 32, 0), "multiples of 16");
  expect_error_containing(call(32, 40, 32, 0), "multiples of 16");
  expect_error_containing(call(32, 32, 24, 0), "multiples of 16");
  expect_error_containing(call(32, 32, 32, 8), "16-byte aligned");
  EXPECT_EQ(engine.heuristic_queries(), 0);
}

}  // namespace
}  // namespace eco
