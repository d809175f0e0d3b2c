// GPU tests of the layer kernels (embedding, norms, RoPE, activations, residual, classifier,
// reductions) against their CPU twins in kernels/cpu/kernels.h. The twin runs in fp32 on the
// bf16-rounded inputs widened back to fp32, so a difference is the kernel's own error: fp32 math
// in another order plus the final bf16 rounding of bf16 outputs.
//
// Tolerances (norm-wise relative error, gputest::rel_err; NaN/inf never pass):
//  - bf16 outputs: kBf16Tol = 5e-3. bf16 keeps 8 significant bits (unit roundoff 2^-8, at most
//    3.9e-3 relative per element); one correct rounding of normal data already gives ~1.7e-3
//    norm-wise, so 1e-3 would reject a perfect kernel and 5e-3 leaves room for nothing more than
//    fp32 reassociation.
//  - fp32 outputs computed from the same bf16 inputs (losses, mean/rstd, parameter gradients):
//    kF32Tol = 1e-5; they differ only by fp32 summation order (~1e-7 per term).
//  - Exact (bit-identical) where the order of operations is the CPU twin's: embedding backward,
//    scale_inplace.
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gpu_test.h"
#include "base/math/bf16.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cuda/activations.cuh"
#include "kernels/cuda/classifier.cuh"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/embedding.cuh"
#include "kernels/cuda/norms.cuh"
#include "kernels/cuda/reductions.cuh"
#include "kernels/cuda/rope.cuh"

namespace eco {
namespace {

using bf16 = __nv_bfloat16;
using cuda::DeviceBuffer;
using gputest::poison;
using gputest::rel_err;
using gputest::to_device;
using gputest::to_host;

constexpr double kBf16Tol = 5e-3;
constexpr double kF32Tol = 1e-5;

// Fresh random inputs for every check.
uint64_t fresh_seed() {
  static uint64_t seed = 20240;
  return seed++;
}

std::vector<float> randn(size_t n, float std = 1.0f, float mean = 0.0f) {
  auto v = gputest::randn(n, fresh_seed(), std);
  for (auto& x : v) x += mean;
  return v;
}

// A bf16 tensor on the host: the bits the GPU gets and the same values widened to fp32.
struct Bf16Host {
  std::vector<uint16_t> bits;
  std::vector<float> vals;
};

Bf16Host to_bf16(const std::vector<float>& x) {
  Bf16Host h{std::vector<uint16_t>(x.size()), std::vector<float>(x.size())};
  for (size_t i = 0; i < x.size(); i++) {
    h.bits[i] = float_to_bf16(x[i]);
    h.vals[i] = bf16_to_float(h.bits[i]);
  }
  return h;
}

Bf16Host bf16_randn(size_t n, float std = 1.0f, float mean = 0.0f) {
  return to_bf16(randn(n, std, mean));
}

std::vector<float> bf16_to_host(const DeviceBuffer& d, size_t n) {
  const auto bits = to_host<uint16_t>(d, n);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; i++) v[i] = bf16_to_float(bits[i]);
  return v;
}

DeviceBuffer poisoned(size_t bytes) {
  DeviceBuffer d(bytes);
  poison(d);
  return d;
}

std::vector<int32_t> random_tokens(size_t n, int V) {
  Rng r(fresh_seed());
  std::vector<int32_t> t(n);
  for (auto& x : t) x = int32_t(r.next_u64() % uint64_t(V));
  return t;
}

void sync() { ECO_CHECK_CUDA(cudaDeviceSynchronize()); }

// ---- embedding -------------------------------------------------------------------------------

struct EmbShape {
  int B, T, C, V;
};
const EmbShape kEmbShapes[] = {
    {1, 1, 16, 11}, {1, 7, 33, 11}, {4, 16, 768, 11}, {1, 257, 1000, 11}, {2, 64, 64, 50257}};

TEST(GpuEmbedding, ForwardMatchesCpu) {
  ECO_REQUIRE_GPU();
  for (const auto [B, T, C, V] : kEmbShapes) {
    for (bool positions : {true, false}) {
      const int N = B * T;
      const auto wte = randn(size_t(V) * C), wpe = randn(size_t(T) * C);
      const auto tokens = random_tokens(size_t(N), V);
      std::vector<float> ref(size_t(N) * C);
      cpu::embedding_forward(ref.data(), tokens.data(), wte.data(),
                             positions ? wpe.data() : nullptr, B, T, C);
      auto d_wte = to_device(wte), d_wpe = to_device(wpe), d_tok = to_device(tokens);
      auto d_out = poisoned(ref.size() * sizeof(bf16));
      ECO_CHECK_CUDA(cuda::embedding_forward(d_out.get<bf16>(), d_tok.get<int32_t>(),
                                             d_wte.get<float>(),
                                             positions ? d_wpe.get<float>() : nullptr, B, T, C));
      sync();
      EXPECT_LT(rel_err(bf16_to_host(d_out, ref.size()), ref), kBf16Tol)
          << B << "x" << T << "x" << C << " V " << V << " wpe " << positions;
    }
  }
}

// Each (row, channel) of dwte is summed by one thread in token order, as on the CPU, from
// exactly widened bf16 values: the fp32 results are bit-identical. Pre-filled gradients check +=.
TEST(GpuEmbedding, BackwardAccumulatesBitIdenticallyToCpu) {
  ECO_REQUIRE_GPU();
  for (const auto [B, T, C, V] : kEmbShapes) {
    for (bool positions : {true, false}) {
      const int N = B * T;
      const auto dout = bf16_randn(size_t(N) * C);
      const auto tokens = random_tokens(size_t(N), V);
      auto dwte = randn(size_t(V) * C), dwpe = randn(size_t(T) * C);
      auto d_dwte = to_device(dwte), d_dwpe = to_device(dwpe);
      auto d_dout = to_device(dout.bits), d_tok = to_device(tokens);
      ECO_CHECK_CUDA(cuda::embedding_backward(d_dwte.get<float>(),
                                              positions ? d_dwpe.get<float>() : nullptr,
                                              d_dout.get<bf16>(), d_tok.get<int32_t>(), B, T, C));
      sync();
      cpu::embedding_backward(dwte.data(), positions ? dwpe.data() : nullptr, dout.vals.data(),
                              tokens.data(), B, T, C);
      EXPECT_EQ(to_host<float>(d_dwte, dwte.size()), dwte) << B << "x" << T << "x" << C;
      EXPECT_EQ(to_host<float>(d_dwpe, dwpe.size()), dwpe) << B << "x" << T << "x" << C;
    }
  }
}

// ---- LayerNorm / RMSNorm -----------------------------------------------------------------------

const int kNormRows[] = {1, 7, 64, 257};
const int kNormCols[] = {16, 33, 768, 1000};
constexpr float kEps = 1e-5f;

// Inputs with a mean far from zero (the two-pass variance must not cancel) and gains near 1.
TEST(GpuLayerNorm, ForwardMatchesCpu) {
  ECO_REQUIRE_GPU();
  for (int N : kNormRows) {
    for (int C : kNormCols) {
      const bool with_bias = C != 33;
      const auto x = bf16_randn(size_t(N) * C, 2.0f, 3.0f);
      const auto w = randn(size_t(C), 0.1f, 1.0f), b = randn(size_t(C), 0.1f);
      std::vector<float> ref(x.vals.size()), mean(N), rstd(N);
      cpu::layernorm_forward(ref.data(), mean.data(), rstd.data(), x.vals.data(), w.data(),
                             with_bias ? b.data() : nullptr, N, C, kEps);
      auto d_x = to_device(x.bits), d_w = to_device(w), d_b = to_device(b);
      auto d_out = poisoned(ref.size() * sizeof(bf16));
      auto d_mean = poisoned(size_t(N) * sizeof(float)),
           d_rstd = poisoned(size_t(N) * sizeof(float));
      ECO_CHECK_CUDA(cuda::layernorm_forward(d_out.get<bf16>(), d_mean.get<float>(),
                                             d_rstd.get<float>(), d_x.get<bf16>(), d_w.get<float>(),
                                             with_bias ? d_b.get<float>() : nullptr, N, C, kEps));
      sync();
      EXPECT_LT(rel_err(bf16_to_host(d_out, ref.size()), ref), kBf16Tol) << N << "x" << C;
      EXPECT_LT(rel_err(to_host<float>(d_mean, size_t(N)), mean), kF32Tol) << N << "x" << C;
      EXPECT_LT(rel_err(to_host<float>(d_rstd, size_t(N)), rstd), kF32Tol) << N << "x" << C;
    }
  }
}

// The saved statistics of both sides come from the CPU forward, so only the backward differs.
TEST(GpuLayerNorm, BackwardAccumulatesLikeCpu) {
  ECO_REQUIRE_GPU();
  for (int N : kNormRows) {
    for (int C : kNormCols) {
      const bool with_bias = C != 33;
      const auto x = bf16_randn(size_t(N) * C, 2.0f, 3.0f), dout = bf16_randn(size_t(N) * C);
      const auto w = randn(size_t(C), 0.1f, 1.0f), b = randn(size_t(C), 0.1f);
      std::vector<float> y(x.vals.size()), mean(N), rstd(N);
      cpu::layernorm_forward(y.data(), mean.data(), rstd.data(), x.vals.data(), w.data(), b.data(),
                             N, C, kEps);
      auto dinp = bf16_randn(x.vals.size());
      auto dw = randn(size_t(C)), db = randn(size_t(C));
      auto d_x = to_device(x.bits), d_dout = to_device(dout.bits), d_w = to_device(w);
      auto d_mean = to_device(mean), d_rstd = to_device(rstd);
      auto d_dinp = to_device(dinp.bits), d_dw = to_device(dw), d_db = to_device(db);
      DeviceBuffer scratch(cuda::norm_backward_scratch_floats(C) * sizeof(float));
      poison(scratch);
      ECO_CHECK_CUDA(cuda::layernorm_backward(
          d_dinp.get<bf16>(), d_dw.get<float>(), with_bias ? d_db.get<float>() : nullptr,
          d_dout.get<bf16>(), d_x.get<bf16>(), d_w.get<float>(), d_mean.get<float>(),
          d_rstd.get<float>(), N, C, scratch.get<float>()));
      sync();
      cpu::layernorm_backward(dinp.vals.data(), dw.data(), with_bias ? db.data() : nullptr,
                              dout.vals.data(), x.vals.data(), w.data(), mean.data(), rstd.data(),
                              N, C);
      EXPECT_LT(rel_err(bf16_to_host(d_dinp, dinp.vals.size()), dinp.vals), kBf16Tol)
          << N << "x" << C;
      EXPECT_LT(rel_err(to_host<float>(d_dw, size_t(C)), dw), kF32Tol) << N << "x" << C;
      EXPECT_LT(rel_err(to_host<float>(d_db, size_t(C)), db), kF32Tol) << N << "x" << C;
    }
  }
}

TEST(GpuRmsNorm, ForwardMatchesCpu) {
  ECO_REQUIRE_GPU();
  for (int N : kNormRows) {
    for (int C : kNormCols) {
      const auto x = bf16_randn(size_t(N) * C, 2.0f, 0.5f);
      const auto w = randn(size_t(C), 0.1f, 1.0f);
      std::vector<float> ref(x.vals.size()), rstd(N);
      cpu::rmsnorm_forward(ref.data(), rstd.data(), x.vals.data(), w.data(), N, C, kEps);
      auto d_x = to_device(x.bits), d_w = to_device(w);
      auto d_out = poisoned(ref.size() * sizeof(bf16)),
           d_rstd = poisoned(size_t(N) * sizeof(float));
      ECO_CHECK_CUDA(cuda::rmsnorm_forward(d_out.get<bf16>(), d_rstd.get<float>(), d_x.get<bf16>(),
                                           d_w.get<float>(), N, C, kEps));
      sync();
      EXPECT_LT(rel_err(bf16_to_host(d_out, ref.size()), ref), kBf16Tol) << N << "x" << C;
      EXPECT_LT(rel_err(to_host<float>(d_rstd, size_t(N)), rstd), kF32Tol) << N << "x" << C;
    }
  }
}

TEST(GpuRmsNorm, BackwardAccumulatesLikeCpu) {
  ECO_REQUIRE_GPU();
  for (int N : kNormRows) {
    for (int C : kNormCols) {
      const auto x = bf16_randn(size_t(N) * C, 2.0f, 0.5f), dout = bf16_randn(size_t(N) * C);
      const auto w = randn(size_t(C), 0.1f, 1.0f);
      std::vector<float> y(x.vals.size()), rstd(N);
      cpu::rmsnorm_forward(y.data(), rstd.data(), x.vals.data(), w.data(), N, C, kEps);
      auto dinp = bf16_randn(x.vals.size());
      auto dw = randn(size_t(C));
      auto d_x = to_device(x.bits), d_dout = to_device(dout.bits), d_w = to_device(w);
      auto d_rstd = to_device(rstd), d_dinp = to_device(dinp.bits), d_dw = to_device(dw);
      DeviceBuffer scratch(cuda::norm_backward_scratch_floats(C) * sizeof(float));
      poison(scratch);
      ECO_CHECK_CUDA(cuda::rmsnorm_backward(d_dinp.get<bf16>(), d_dw.get<float>(),
                                            d_dout.get<bf16>(), d_x.get<bf16>(), d_w.get<float>(),
                                            d_rstd.get<float>(), N, C, scratch.get<float>()));
      sync();
      cpu::rmsnorm_backward(dinp.vals.data(), dw.data(), dout.vals.data(), x.vals.data(), w.data(),
                            rstd.data(), N, C);
      EXPECT_LT(rel_err(bf16_to_host(d_dinp, dinp.vals.size()), dinp.vals), kBf16Tol)
          << N << "x" << C;
      EXPECT_LT(rel_err(to_host<float>(d_dw, size_t(C)), dw), kF32Tol) << N << "x" << C;
    }
  }
}

// The residual add fused into the norm (residual_layernorm_forward / residual_rmsnorm_forward)
// against the two unfused calls: every bit of resid, out, mean and rstd equal (tolerance 0: the
// fused kernel rounds a + b once, as residual_forward, and then runs the norm's own arithmetic on
// those values), with resid separate and aliasing a; against the CPU twins through the unfused
// path's own tests. Outputs poisoned first.
TEST(GpuResidualNorm, FusedEqualsResidualThenNormBitwise) {
  ECO_REQUIRE_GPU();
  for (bool rms : {false, true})
    for (bool alias : {false, true})
      for (int N : kNormRows)
        for (int C : kNormCols) {
          const size_t n = size_t(N) * C;
          const auto a = bf16_randn(n, 2.0f, 1.0f), b = bf16_randn(n, 0.5f);
          const auto w = randn(size_t(C), 0.1f, 1.0f), bias = randn(size_t(C), 0.1f);
          auto d_a = to_device(a.bits), d_b = to_device(b.bits), d_w = to_device(w),
               d_bias = to_device(bias);
          // Unfused reference.
          auto r_resid = poisoned(n * sizeof(bf16)), r_out = poisoned(n * sizeof(bf16));
          auto r_mean = poisoned(size_t(N) * sizeof(float)),
               r_rstd = poisoned(size_t(N) * sizeof(float));
          ECO_CHECK_CUDA(cuda::residual_forward(r_resid.get<bf16>(), d_a.get<bf16>(),
                                                d_b.get<bf16>(), int64_t(n)));
          if (rms)
            ECO_CHECK_CUDA(cuda::rmsnorm_forward(r_out.get<bf16>(), r_rstd.get<float>(),
                                                 r_resid.get<bf16>(), d_w.get<float>(), N, C,
                                                 kEps));
          else
            ECO_CHECK_CUDA(cuda::layernorm_forward(r_out.get<bf16>(), r_mean.get<float>(),
                                                   r_rstd.get<float>(), r_resid.get<bf16>(),
                                                   d_w.get<float>(), d_bias.get<float>(), N, C,
                                                   kEps));
          // Fused, into a separate resid or over a.
          auto f_resid = poisoned(n * sizeof(bf16)), f_out = poisoned(n * sizeof(bf16));
          auto f_mean = poisoned(size_t(N) * sizeof(float)),
               f_rstd = poisoned(size_t(N) * sizeof(float));
          bf16* resid = alias ? d_a.get<bf16>() : f_resid.get<bf16>();
          if (rms)
            ECO_CHECK_CUDA(cuda::residual_rmsnorm_forward(resid, f_out.get<bf16>(),
                                                          f_rstd.get<float>(), d_a.get<bf16>(),
                                                          d_b.get<bf16>(), d_w.get<float>(), N, C,
                                                          kEps));
          else
            ECO_CHECK_CUDA(cuda::residual_layernorm_forward(
                resid, f_out.get<bf16>(), f_mean.get<float>(), f_rstd.get<float>(),
                d_a.get<bf16>(), d_b.get<bf16>(), d_w.get<float>(), d_bias.get<float>(), N, C,
                kEps));
          sync();
          const auto where = std::string(rms ? "rms " : "ln ") + (alias ? "aliased " : "") +
                             std::to_string(N) + "x" + std::to_string(C);
          EXPECT_EQ(to_host<uint16_t>(alias ? d_a : f_resid, n), to_host<uint16_t>(r_resid, n))
              << where;
          EXPECT_EQ(to_host<uint16_t>(f_out, n), to_host<uint16_t>(r_out, n)) << where;
          EXPECT_EQ(to_host<uint32_t>(f_rstd, size_t(N)), to_host<uint32_t>(r_rstd, size_t(N)))
              << where;
          if (!rms) {
            EXPECT_EQ(to_host<uint32_t>(f_mean, size_t(N)), to_host<uint32_t>(r_mean, size_t(N)))
                << where;
          }
        }
  EXPECT_EQ(cuda::residual_layernorm_forward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                             nullptr, nullptr, 1, 8, kEps),
            cudaErrorInvalidValue);
}

// ---- RoPE
// ----------------------------------------------------------------------------------------

struct RopeShape {
  int B, T, C, NH;
};
// Head sizes 8, 6 (odd half), 64 and 100; positions up to 256.
const RopeShape kRopeShapes[] = {
    {1, 1, 16, 2}, {2, 7, 36, 6}, {2, 64, 768, 12}, {1, 257, 1000, 10}};
constexpr float kTheta = 10000.0f;

TEST(GpuRope, ForwardMatchesCpu) {
  ECO_REQUIRE_GPU();
  for (const auto [B, T, C, NH] : kRopeShapes) {
    const auto x = bf16_randn(size_t(B) * T * 3 * C);
    std::vector<float> ref(x.vals.size());
    cpu::rope_forward(ref.data(), x.vals.data(), B, T, C, NH, kTheta);
    auto d_x = to_device(x.bits);
    auto d_out = poisoned(ref.size() * sizeof(bf16));
    ECO_CHECK_CUDA(cuda::rope_forward(d_out.get<bf16>(), d_x.get<bf16>(), B, T, C, NH, kTheta));
    sync();
    EXPECT_LT(rel_err(bf16_to_host(d_out, ref.size()), ref), kBf16Tol)
        << B << "x" << T << "x" << C << " NH " << NH;
  }
}

TEST(GpuRope, BackwardAccumulatesLikeCpu) {
  ECO_REQUIRE_GPU();
  for (const auto [B, T, C, NH] : kRopeShapes) {
    const auto dout = bf16_randn(size_t(B) * T * 3 * C);
    auto dinp = bf16_randn(dout.vals.size());
    auto d_dout = to_device(dout.bits), d_dinp = to_device(dinp.bits);
    ECO_CHECK_CUDA(
        cuda::rope_backward(d_dinp.get<bf16>(), d_dout.get<bf16>(), B, T, C, NH, kTheta));
    sync();
    cpu::rope_backward(dinp.vals.data(), dout.vals.data(), B, T, C, NH, kTheta);
    EXPECT_LT(rel_err(bf16_to_host(d_dinp, dinp.vals.size()), dinp.vals), kBf16Tol)
        << B << "x" << T << "x" << C << " NH " << NH;
  }
}

TEST(GpuRope, RejectsOddHeadSizeAndAliasing) {
  ECO_REQUIRE_GPU();
  DeviceBuffer a(3 * 36 * sizeof(bf16)), b(3 * 36 * sizeof(bf16));
  EXPECT_EQ(cuda::rope_forward(b.get<bf16>(), a.get<bf16>(), 1, 1, 36, 4, kTheta),
            cudaErrorInvalidValue);  // head size 9
  EXPECT_EQ(cuda::rope_forward(a.get<bf16>(), a.get<bf16>(), 1, 1, 36, 6, kTheta),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // rejected before any launch
}

// ---- activations, residual ---------------------------------------------------------------------

const int64_t kElementCounts[] = {1, 7, 2112, 257000};
struct RowsCols {
  int N, H;
};
const RowsCols kSwigluShapes[] = {{1, 16}, {7, 33}, {64, 768}, {257, 1000}};

TEST(GpuActivations, GeluForwardMatchesCpu) {
  ECO_REQUIRE_GPU();
  for (int64_t n : kElementCounts) {
    const auto x = bf16_randn(size_t(n), 3.0f);
    std::vector<float> ref(n);
    cpu::gelu_forward(ref.data(), x.vals.data(), n);
    auto d_x = to_device(x.bits);
    auto d_out = poisoned(size_t(n) * sizeof(bf16));
    ECO_CHECK_CUDA(cuda::gelu_forward(d_out.get<bf16>(), d_x.get<bf16>(), n));
    sync();
    EXPECT_LT(rel_err(bf16_to_host(d_out, size_t(n)), ref), kBf16Tol) << "n " << n;
  }
}

TEST(GpuActivations, GeluBackwardAccumulatesLikeCpu) {
  ECO_REQUIRE_GPU();
  for (int64_t n : kElementCounts) {
    const auto x = bf16_randn(size_t(n), 3.0f), dout = bf16_randn(size_t(n));
    auto dinp = bf16_randn(size_t(n));
    auto d_x = to_device(x.bits), d_dout = to_device(dout.bits), d_dinp = to_device(dinp.bits);
    ECO_CHECK_CUDA(cuda::gelu_backward(d_dinp.get<bf16>(), d_x.get<bf16>(), d_dout.get<bf16>(), n));
    sync();
    cpu::gelu_backward(dinp.vals.data(), x.vals.data(), dout.vals.data(), n);
    EXPECT_LT(rel_err(bf16_to_host(d_dinp, size_t(n)), dinp.vals), kBf16Tol) << "n " << n;
  }
}

TEST(GpuActivations, SwigluForwardMatchesCpu) {
  ECO_REQUIRE_GPU();
  for (const auto [N, H] : kSwigluShapes) {
    const auto x = bf16_randn(size_t(N) * 2 * H, 2.0f);
    std::vector<float> ref(size_t(N) * H);
    cpu::swiglu_forward(ref.data(), x.vals.data(), N, H);
    auto d_x = to_device(x.bits);
    auto d_out = poisoned(ref.size() * sizeof(bf16));
    ECO_CHECK_CUDA(cuda::swiglu_forward(d_out.get<bf16>(), d_x.get<bf16>(), N, H));
    sync();
    EXPECT_LT(rel_err(bf16_to_host(d_out, ref.size()), ref), kBf16Tol) << N << "x" << H;
  }
}

TEST(GpuActivations, SwigluBackwardAccumulatesLikeCpu) {
  ECO_REQUIRE_GPU();
  for (const auto [N, H] : kSwigluShapes) {
    const auto x = bf16_randn(size_t(N) * 2 * H, 2.0f), dout = bf16_randn(size_t(N) * H);
    auto dinp = bf16_randn(x.vals.size());
    auto d_x = to_device(x.bits), d_dout = to_device(dout.bits), d_dinp = to_device(dinp.bits);
    ECO_CHECK_CUDA(
        cuda::swiglu_backward(d_dinp.get<bf16>(), d_dout.get<bf16>(), d_x.get<bf16>(), N, H));
    sync();
    cpu::swiglu_backward(dinp.vals.data(), dout.vals.data(), x.vals.data(), N, H);
    EXPECT_LT(rel_err(bf16_to_host(d_dinp, dinp.vals.size()), dinp.vals), kBf16Tol)
        << N << "x" << H;
  }
}

TEST(GpuResidual, ForwardMatchesCpu) {
  ECO_REQUIRE_GPU();
  for (int64_t n : {int64_t(1), int64_t(255), int64_t(257), int64_t(100003)}) {
    const auto a = bf16_randn(size_t(n)), b = bf16_randn(size_t(n));
    std::vector<float> ref(n);
    cpu::residual_forward(ref.data(), a.vals.data(), b.vals.data(), n);
    auto d_a = to_device(a.bits), d_b = to_device(b.bits);
    auto d_out = poisoned(size_t(n) * sizeof(bf16));
    ECO_CHECK_CUDA(cuda::residual_forward(d_out.get<bf16>(), d_a.get<bf16>(), d_b.get<bf16>(), n));
    sync();
    EXPECT_LT(rel_err(bf16_to_host(d_out, size_t(n)), ref), kBf16Tol) << "n " << n;
  }
}

TEST(GpuResidual, AccumulateAddsInPlace) {
  ECO_REQUIRE_GPU();
  for (int64_t n : {int64_t(1), int64_t(255), int64_t(257), int64_t(100003)}) {
    auto dst = bf16_randn(size_t(n));
    const auto src = bf16_randn(size_t(n));
    auto d_dst = to_device(dst.bits), d_src = to_device(src.bits);
    ECO_CHECK_CUDA(cuda::accumulate(d_dst.get<bf16>(), d_src.get<bf16>(), n));
    sync();
    cpu::accumulate(dst.vals.data(), src.vals.data(), n);
    EXPECT_LT(rel_err(bf16_to_host(d_dst, size_t(n)), dst.vals), kBf16Tol) << "n " << n;
  }
}

// Buffers off 16-byte alignment take the element-by-element path of the bf16 map.
TEST(GpuResidual, MisalignedBuffersMatchCpu) {
  ECO_REQUIRE_GPU();
  const int64_t n = 1000;
  const auto a = bf16_randn(size_t(n) + 1), b = bf16_randn(size_t(n) + 1);
  std::vector<float> ref(n);
  cpu::residual_forward(ref.data(), a.vals.data() + 1, b.vals.data() + 1, n);
  auto d_a = to_device(a.bits), d_b = to_device(b.bits);
  auto d_out = poisoned((size_t(n) + 1) * sizeof(bf16));
  ECO_CHECK_CUDA(
      cuda::residual_forward(d_out.get<bf16>() + 1, d_a.get<bf16>() + 1, d_b.get<bf16>() + 1, n));
  sync();
  const auto out = bf16_to_host(d_out, size_t(n) + 1);
  EXPECT_LT(rel_err(std::vector<float>(out.begin() + 1, out.end()), ref), kBf16Tol);
}

// ---- classifier
// ----------------------------------------------------------------------------------

const RowsCols kClassifierShapes[] = {{1, 11}, {7, 11}, {7, 50257}, {64, 50257}, {257, 1000}};

// Every 5th row has target -1 (ignored: loss 0, gradient 0). dlogits aliases logits.
TEST(GpuClassifier, LossesAndInPlaceGradientsMatchCpu) {
  ECO_REQUIRE_GPU();
  for (const auto [N, V] : kClassifierShapes) {
    const auto logits = bf16_randn(size_t(N) * V, 2.0f);
    auto targets = random_tokens(size_t(N), V);
    for (int n = 0; n < N; n += 5) targets[size_t(n)] = -1;
    const float dloss = 1.0f / float(N);
    std::vector<float> losses(N), grad(logits.vals.size());
    cpu::crossentropy_forward_backward(losses.data(), grad.data(), logits.vals.data(),
                                       targets.data(), N, V, dloss);
    auto d_logits = to_device(logits.bits), d_t = to_device(targets);
    auto d_losses = poisoned(size_t(N) * sizeof(float));
    ECO_CHECK_CUDA(cuda::crossentropy_forward_backward(d_losses.get<float>(), d_logits.get<bf16>(),
                                                       d_logits.get<bf16>(), d_t.get<int32_t>(), N,
                                                       V, V, dloss));
    sync();
    EXPECT_LT(rel_err(to_host<float>(d_losses, size_t(N)), losses), kF32Tol) << N << "x" << V;
    EXPECT_LT(rel_err(bf16_to_host(d_logits, grad.size()), grad), kBf16Tol) << N << "x" << V;
  }
}

TEST(GpuClassifier, LossesOnlyLeaveLogitsUntouched) {
  ECO_REQUIRE_GPU();
  for (const auto [N, V] : kClassifierShapes) {
    const auto logits = bf16_randn(size_t(N) * V, 2.0f);
    const auto targets = random_tokens(size_t(N), V);
    std::vector<float> losses(N);
    cpu::crossentropy_forward_backward<float>(losses.data(), nullptr, logits.vals.data(),
                                              targets.data(), N, V, 1.0f);
    auto d_logits = to_device(logits.bits), d_t = to_device(targets);
    auto d_losses = poisoned(size_t(N) * sizeof(float));
    ECO_CHECK_CUDA(cuda::crossentropy_forward_backward(
        d_losses.get<float>(), nullptr, d_logits.get<bf16>(), d_t.get<int32_t>(), N, V, V, 1.0f));
    sync();
    EXPECT_LT(rel_err(to_host<float>(d_losses, size_t(N)), losses), kF32Tol) << N << "x" << V;
    EXPECT_EQ(to_host<uint16_t>(d_logits, logits.bits.size()), logits.bits) << N << "x" << V;
  }
}

// A target >= V is a data bug: it must surface as a NaN loss, not read out of bounds.
TEST(GpuClassifier, TargetOutOfRangeGivesNanLoss) {
  ECO_REQUIRE_GPU();
  const int N = 2, V = 11;
  const auto logits = bf16_randn(size_t(N) * V);
  const std::vector<int32_t> targets = {3, V};
  auto d_logits = to_device(logits.bits), d_t = to_device(targets);
  auto d_losses = poisoned(size_t(N) * sizeof(float));
  ECO_CHECK_CUDA(cuda::crossentropy_forward_backward(d_losses.get<float>(), d_logits.get<bf16>(),
                                                     d_logits.get<bf16>(), d_t.get<int32_t>(), N, V,
                                                     V, 1.0f));
  sync();
  const auto losses = to_host<float>(d_losses, size_t(N));
  EXPECT_TRUE(std::isfinite(losses[0]));
  EXPECT_TRUE(std::isnan(losses[1]));
}

// A -inf logit adds nothing to the softmax, wherever a thread meets it (also first: the running
// max is then -inf too, and exp(-inf - -inf) would be NaN). Losses and gradients as the CPU's.
TEST(GpuClassifier, NegativeInfinityLogitsAddNothing) {
  ECO_REQUIRE_GPU();
  const int N = 3, V = 1000;
  auto logits = bf16_randn(size_t(N) * V, 2.0f);
  for (int col : {0, 5, 511, 512, 600})
    for (int n = 0; n < N; ++n) {
      logits.vals[size_t(n) * V + col] = -INFINITY;
      logits.bits[size_t(n) * V + col] = 0xFF80;  // bf16 -inf
    }
  const std::vector<int32_t> targets = {1, 999, 300};
  std::vector<float> losses(N), grad(logits.vals.size());
  cpu::crossentropy_forward_backward(losses.data(), grad.data(), logits.vals.data(),
                                     targets.data(), N, V, 1.0f);
  auto d_logits = to_device(logits.bits), d_t = to_device(targets);
  auto d_losses = poisoned(size_t(N) * sizeof(float));
  ECO_CHECK_CUDA(cuda::crossentropy_forward_backward(d_losses.get<float>(), d_logits.get<bf16>(),
                                                     d_logits.get<bf16>(), d_t.get<int32_t>(), N, V,
                                                     V, 1.0f));
  sync();
  const auto got = to_host<float>(d_losses, size_t(N));
  for (float l : got) EXPECT_TRUE(std::isfinite(l));
  EXPECT_LT(rel_err(got, losses), kF32Tol);
  EXPECT_LT(rel_err(bf16_to_host(d_logits, grad.size()), grad), kBf16Tol);
}

// Rows ld > V apart (the CUDA backend's padded logits, Backend::logits_stride): the same losses
// and gradient bits as the packed rows, each row's padding columns of dlogits written zero
// (poisoned with NaN before: the head's backward GEMM reads them), in place and out of place.
TEST(GpuClassifier, StridedRowsGiveThePackedResultsAndZeroPadding) {
  ECO_REQUIRE_GPU();
  for (const auto [N, V, ld] : {std::array{7, 11, 64}, std::array{9, 50257, 50304}}) {
    const auto logits = bf16_randn(size_t(N) * V, 2.0f);
    auto targets = random_tokens(size_t(N), V);
    targets[1] = -1;  // an ignored row: zero gradient over the whole stride
    const float dloss = 1.0f / float(N);
    auto d_packed = to_device(logits.bits), d_t = to_device(targets);
    auto d_packed_losses = poisoned(size_t(N) * sizeof(float));
    ECO_CHECK_CUDA(cuda::crossentropy_forward_backward(
        d_packed_losses.get<float>(), d_packed.get<bf16>(), d_packed.get<bf16>(),
        d_t.get<int32_t>(), N, V, V, dloss));
    std::vector<uint16_t> strided(size_t(N) * ld, 0x7FC0);  // NaN padding
    for (int n = 0; n < N; ++n)
      std::copy_n(logits.bits.begin() + int64_t(n) * V, V, strided.begin() + int64_t(n) * ld);
    auto d_strided = to_device(strided);
    auto d_out = to_device(std::vector<uint16_t>(strided.size(), 0x7FC0));
    auto d_losses = poisoned(size_t(N) * sizeof(float)),
         d_losses_inplace = poisoned(size_t(N) * sizeof(float));
    ECO_CHECK_CUDA(cuda::crossentropy_forward_backward(d_losses.get<float>(), d_out.get<bf16>(),
                                                       d_strided.get<bf16>(), d_t.get<int32_t>(),
                                                       N, V, ld, dloss));
    ECO_CHECK_CUDA(cuda::crossentropy_forward_backward(
        d_losses_inplace.get<float>(), d_strided.get<bf16>(), d_strided.get<bf16>(),
        d_t.get<int32_t>(), N, V, ld, dloss));
    sync();
    const auto packed_losses = to_host<float>(d_packed_losses, size_t(N));
    EXPECT_EQ(to_host<float>(d_losses, size_t(N)), packed_losses) << V << " / " << ld;
    EXPECT_EQ(to_host<float>(d_losses_inplace, size_t(N)), packed_losses) << V << " / " << ld;
    const auto packed = to_host<uint16_t>(d_packed, logits.bits.size());
    for (const auto* d : {&d_out, &d_strided}) {
      const auto got = to_host<uint16_t>(*d, strided.size());
      for (int n = 0; n < N; ++n) {
        EXPECT_TRUE(std::equal(packed.begin() + int64_t(n) * V, packed.begin() + int64_t(n + 1) * V,
                               got.begin() + int64_t(n) * ld))
            << "row " << n << ", V " << V << ", ld " << ld;
        for (int j = V; j < ld; ++j)
          ASSERT_EQ(got[size_t(int64_t(n) * ld + j)], 0u) << "padding " << n << ", " << j;
      }
    }
  }
  EXPECT_EQ(cuda::crossentropy_forward_backward(nullptr, nullptr, nullptr, nullptr, 1, 11, 10, 1.0f),
            cudaErrorInvalidValue);
}

// ---- reductions
// ----------------------------------------------------------------------------------

const int64_t kReductionCounts[] = {0, 1, 1000, (int64_t(1) << 20) + 3, 10000019};

double gpu_sum_squares(const std::vector<float>& x) {
  auto d_x = to_device(x);
  auto d_out = poisoned(sizeof(double)),
       scratch = poisoned(cuda::kSumSquaresScratch * sizeof(double));
  ECO_CHECK_CUDA(cuda::sum_squares(d_out.get<double>(), d_x.get<float>(), int64_t(x.size()),
                                   scratch.get<double>()));
  sync();
  return to_host<double>(d_out, 1)[0];
}

// Both sides square exactly in double and differ only in summation order: ~1e-16 relative.
TEST(GpuReductions, SumSquaresMatchesCpuInDouble) {
  ECO_REQUIRE_GPU();
  for (int64_t n : kReductionCounts) {
    const auto x = randn(size_t(n), 0.01f);
    const double ref = cpu::sum_squares(x.data(), n), got = gpu_sum_squares(x);
    ASSERT_TRUE(std::isfinite(got)) << "n " << n;
    EXPECT_LE(std::fabs(got - ref), 1e-12 * ref) << "n " << n;
  }
}

// One multiply per element, as on the CPU: bit-identical.
TEST(GpuElementwise, ScaleInplaceIsBitIdenticalToCpu) {
  ECO_REQUIRE_GPU();
  for (int64_t n : {int64_t(1), int64_t(257), int64_t(100003)}) {
    auto x = randn(size_t(n));
    auto d_x = to_device(x);
    ECO_CHECK_CUDA(cuda::scale_inplace(d_x.get<float>(), 0.37f, n));
    sync();
    cpu::scale_inplace(x.data(), 0.37f, n);
    EXPECT_EQ(to_host<float>(d_x, size_t(n)), x) << "n " << n;
  }
}

// ---- determinism: identical inputs give identical bits ------------------------------------------

// Many repeats of a few hot tokens over several shards and channel blocks.
TEST(GpuDeterminism, EmbeddingBackwardIsBitIdenticalRunToRun) {
  ECO_REQUIRE_GPU();
  const int B = 8, T = 256, C = 768, V = 1000, N = B * T;
  const auto dout = bf16_randn(size_t(N) * C);
  auto tokens = random_tokens(size_t(N), V);
  for (int n = 0; n < N; n += 2) tokens[size_t(n)] = n % 3;
  const auto dwte = randn(size_t(V) * C), dwpe = randn(size_t(T) * C);
  auto d_dout = to_device(dout.bits), d_tok = to_device(tokens);
  std::vector<uint32_t> runs[2][2];
  for (auto& run : runs) {
    auto d_dwte = to_device(dwte), d_dwpe = to_device(dwpe);
    ECO_CHECK_CUDA(cuda::embedding_backward(d_dwte.get<float>(), d_dwpe.get<float>(),
                                            d_dout.get<bf16>(), d_tok.get<int32_t>(), B, T, C));
    sync();
    run[0] = to_host<uint32_t>(d_dwte, dwte.size());
    run[1] = to_host<uint32_t>(d_dwpe, dwpe.size());
  }
  EXPECT_EQ(runs[0][0], runs[1][0]);
  EXPECT_EQ(runs[0][1], runs[1][1]);
}

// N = 4096 rows: 128 row chunks of 32 in the parameter-gradient reduction.
TEST(GpuDeterminism, LayerNormBackwardIsBitIdenticalRunToRun) {
  ECO_REQUIRE_GPU();
  const int N = 4096, C = 768;
  const auto x = bf16_randn(size_t(N) * C, 2.0f, 3.0f), dout = bf16_randn(size_t(N) * C);
  const auto w = randn(size_t(C), 0.1f, 1.0f), b = randn(size_t(C), 0.1f);
  std::vector<float> y(x.vals.size()), mean(N), rstd(N);
  cpu::layernorm_forward(y.data(), mean.data(), rstd.data(), x.vals.data(), w.data(), b.data(), N,
                         C, kEps);
  const auto dinp = bf16_randn(x.vals.size());
  const auto dw = randn(size_t(C)), db = randn(size_t(C));
  auto d_x = to_device(x.bits), d_dout = to_device(dout.bits), d_w = to_device(w);
  auto d_mean = to_device(mean), d_rstd = to_device(rstd);
  DeviceBuffer scratch(cuda::norm_backward_scratch_floats(C) * sizeof(float));
  std::vector<uint32_t> runs[2][3];
  for (auto& run : runs) {
    auto d_dinp = to_device(dinp.bits), d_dw = to_device(dw), d_db = to_device(db);
    poison(scratch);
    ECO_CHECK_CUDA(cuda::layernorm_backward(d_dinp.get<bf16>(), d_dw.get<float>(),
                                            d_db.get<float>(), d_dout.get<bf16>(), d_x.get<bf16>(),
                                            d_w.get<float>(), d_mean.get<float>(),
                                            d_rstd.get<float>(), N, C, scratch.get<float>()));
    sync();
    const auto dinp_bits = to_host<uint16_t>(d_dinp, dinp.bits.size());
    run[0].assign(dinp_bits.begin(), dinp_bits.end());
    run[1] = to_host<uint32_t>(d_dw, size_t(C));
    run[2] = to_host<uint32_t>(d_db, size_t(C));
  }
  for (int k = 0; k < 3; k++) EXPECT_EQ(runs[0][k], runs[1][k]) << "output " << k;
}

TEST(GpuDeterminism, SumSquaresIsBitIdenticalRunToRun) {
  ECO_REQUIRE_GPU();
  const auto x = randn(10000019, 0.01f);
  const double a = gpu_sum_squares(x), b = gpu_sum_squares(x);
  EXPECT_EQ(std::memcmp(&a, &b, sizeof a), 0);
}

}  // namespace
}  // namespace eco
