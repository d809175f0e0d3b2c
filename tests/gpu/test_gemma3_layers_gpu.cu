// GPU tests of the gemma3 layer kernels against their CPU twins (kernels/cpu/kernels.h), at
// Gemma 3 1B's sizes: RoPE over grouped-query rows (4 query heads on 1 kv head of 256, both
// bases), QK-norm, the GeGLU MLP (hidden 6912), the bf16 embedding scale sqrt(1152) and the fp32
// add of the (1 + w) norm gains. The twin runs in fp32 on the bf16-rounded inputs widened back.
//
// Tolerances (norm-wise relative error, as tests/gpu/test_layers_gpu.cu explains them):
//  - bf16 outputs 5e-3 (one bf16 rounding ~1.7e-3 plus fp32 reassociation; RoPE's double pow /
//    sin / cos and GELU's tanhf may differ from glibc by an ulp or two).
//  - fp32 statistics and gain gradients 1e-5 (summation order only).
//  - Bit for bit: the embedding scale (one fp32 product rounded once, as the CPU's product is
//    when it is stored) and the gains' fp32 add.
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "gpu_test.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cuda/activations.cuh"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/norms.cuh"
#include "kernels/cuda/rope.cuh"

namespace eco {
namespace {

using bf16 = __nv_bfloat16;
using cuda::DeviceBuffer;
using gputest::bf16_values;
using gputest::poison;
using gputest::random_bf16;
using gputest::rel_err;
using gputest::to_device;
using gputest::to_host;

constexpr double kBf16Tol = 5e-3;
constexpr double kF32Tol = 1e-5;

DeviceBuffer poisoned(size_t bytes) {
  DeviceBuffer d(bytes);
  poison(d);
  return d;
}
std::vector<float> bf16_to_host(const DeviceBuffer& d, size_t n) {
  return bf16_values(to_host<uint16_t>(d, n));
}
void sync() { ECO_CHECK_CUDA(cudaDeviceSynchronize()); }

struct GqaRows {
  int B, T, NH, KVH, hd;
  size_t n() const { return size_t(B) * T * (NH + 2 * KVH) * hd; }
};
// Gemma 3 1B's attention rows at T 1024, a 2:1 grouping with hd 64, and a ragged small one.
const GqaRows kGqaRows[] = {{2, 1024, 4, 1, 256}, {1, 257, 8, 4, 64}, {3, 7, 4, 2, 6}};

TEST(GpuGemma3Layers, RopeOverGroupedQueryRowsMatchesCpu) {
  ECO_REQUIRE_GPU();
  uint64_t seed = 70;
  for (const GqaRows& r : kGqaRows)
    for (float theta : {1e4f, 1e6f}) {
      SCOPED_TRACE(::testing::Message() << r.B << "x" << r.T << " NH " << r.NH << " KVH " << r.KVH
                                        << " hd " << r.hd << " theta " << theta);
      const auto x = random_bf16(r.n(), ++seed, 1.0f);
      std::vector<float> ref(r.n());
      cpu::rope_forward_gqa(ref.data(), x.values.data(), r.B, r.T, r.NH, r.KVH, r.hd, theta);
      auto d_x = to_device(x.bits);
      auto d_out = poisoned(r.n() * sizeof(bf16));
      ECO_CHECK_CUDA(cuda::rope_forward_gqa(d_out.get<bf16>(), d_x.get<bf16>(), r.B, r.T, r.NH,
                                            r.KVH, r.hd, theta));
      sync();
      EXPECT_LT(rel_err(bf16_to_host(d_out, r.n()), ref), kBf16Tol) << "forward";

      const auto dout = random_bf16(r.n(), ++seed, 1.0f);
      auto dinp = random_bf16(r.n(), ++seed, 1.0f);
      auto d_dout = to_device(dout.bits), d_dinp = to_device(dinp.bits);
      ECO_CHECK_CUDA(cuda::rope_backward_gqa(d_dinp.get<bf16>(), d_dout.get<bf16>(), r.B, r.T,
                                             r.NH, r.KVH, r.hd, theta));
      sync();
      cpu::rope_backward_gqa(dinp.values.data(), dout.values.data(), r.B, r.T, r.NH, r.KVH, r.hd,
                             theta);
      EXPECT_LT(rel_err(bf16_to_host(d_dinp, r.n()), dinp.values), kBf16Tol) << "backward";
    }
}

TEST(GpuGemma3Layers, QkNormForwardAndBackwardMatchCpu) {
  ECO_REQUIRE_GPU();
  uint64_t seed = 90;
  for (const GqaRows& r : kGqaRows) {
    SCOPED_TRACE(::testing::Message() << r.B << "x" << r.T << " NH " << r.NH << " KVH " << r.KVH
                                      << " hd " << r.hd);
    const int N = r.B * r.T;
    const size_t n_rstd = size_t(N) * (r.NH + r.KVH);
    const auto x = random_bf16(r.n(), ++seed, 2.0f);
    std::vector<float> wq = gputest::randn(size_t(r.hd), ++seed, 0.2f),
                       wk = gputest::randn(size_t(r.hd), ++seed, 0.2f);
    for (float& w : wq) w += 1.0f;  // (1 + w) gains, as the model passes them
    for (float& w : wk) w += 1.0f;
    std::vector<float> out(r.n()), rstd(n_rstd);
    cpu::qk_rmsnorm_forward(out.data(), rstd.data(), x.values.data(), wq.data(), wk.data(), N,
                            r.NH, r.KVH, r.hd, 1e-6f);
    auto d_x = to_device(x.bits), d_wq = to_device(wq), d_wk = to_device(wk);
    auto d_out = poisoned(r.n() * sizeof(bf16)), d_rstd = poisoned(n_rstd * sizeof(float));
    ECO_CHECK_CUDA(cuda::qk_rmsnorm_forward(d_out.get<bf16>(), d_rstd.get<float>(),
                                            d_x.get<bf16>(), d_wq.get<float>(), d_wk.get<float>(),
                                            N, r.NH, r.KVH, r.hd, 1e-6f));
    sync();
    EXPECT_LT(rel_err(bf16_to_host(d_out, r.n()), out), kBf16Tol) << "out";
    EXPECT_LT(rel_err(to_host<float>(d_rstd, n_rstd), rstd), kF32Tol) << "rstd";

    const auto dout = random_bf16(r.n(), ++seed, 1.0f);
    auto dinp = random_bf16(r.n(), ++seed, 0.1f);
    std::vector<float> dwq = gputest::randn(size_t(r.hd), ++seed, 0.1f),
                       dwk = gputest::randn(size_t(r.hd), ++seed, 0.1f);
    auto d_dout = to_device(dout.bits), d_dinp = to_device(dinp.bits);
    auto d_dwq = to_device(dwq), d_dwk = to_device(dwk), d_rstd_cpu = to_device(rstd);
    DeviceBuffer scratch(cuda::qk_norm_backward_scratch_floats(r.hd) * sizeof(float));
    poison(scratch);
    ECO_CHECK_CUDA(cuda::qk_rmsnorm_backward(
        d_dinp.get<bf16>(), d_dwq.get<float>(), d_dwk.get<float>(), d_dout.get<bf16>(),
        d_x.get<bf16>(), d_wq.get<float>(), d_wk.get<float>(), d_rstd_cpu.get<float>(), N, r.NH,
        r.KVH, r.hd, scratch.get<float>()));
    sync();
    cpu::qk_rmsnorm_backward(dinp.values.data(), dwq.data(), dwk.data(), dout.values.data(),
                             x.values.data(), wq.data(), wk.data(), rstd.data(), N, r.NH, r.KVH,
                             r.hd);
    EXPECT_LT(rel_err(bf16_to_host(d_dinp, r.n()), dinp.values), kBf16Tol) << "dinp";
    EXPECT_LT(rel_err(to_host<float>(d_dwq, size_t(r.hd)), dwq), kF32Tol) << "dwq";
    EXPECT_LT(rel_err(to_host<float>(d_dwk, size_t(r.hd)), dwk), kF32Tol) << "dwk";
  }
}

// Gemma 3 1B's MLP (N 4096 tokens, hidden 6912), a ragged hidden and one row.
TEST(GpuGemma3Layers, GegluForwardAndBackwardMatchCpu) {
  ECO_REQUIRE_GPU();
  struct Shape {
    int N, H;
  };
  uint64_t seed = 110;
  for (const Shape s : {Shape{4096, 6912}, Shape{7, 33}, Shape{1, 16}}) {
    SCOPED_TRACE(::testing::Message() << s.N << "x" << s.H);
    const size_t n_in = size_t(s.N) * 2 * s.H, n_out = size_t(s.N) * s.H;
    const auto x = random_bf16(n_in, ++seed, 2.0f);
    std::vector<float> ref(n_out);
    cpu::geglu_forward(ref.data(), x.values.data(), s.N, s.H);
    auto d_x = to_device(x.bits);
    auto d_out = poisoned(n_out * sizeof(bf16));
    ECO_CHECK_CUDA(cuda::geglu_forward(d_out.get<bf16>(), d_x.get<bf16>(), s.N, s.H));
    sync();
    EXPECT_LT(rel_err(bf16_to_host(d_out, n_out), ref), kBf16Tol) << "forward";

    const auto dout = random_bf16(n_out, ++seed, 1.0f);
    auto dinp = random_bf16(n_in, ++seed, 1.0f);
    auto d_dout = to_device(dout.bits), d_dinp = to_device(dinp.bits);
    ECO_CHECK_CUDA(
        cuda::geglu_backward(d_dinp.get<bf16>(), d_dout.get<bf16>(), d_x.get<bf16>(), s.N, s.H));
    sync();
    cpu::geglu_backward(dinp.values.data(), dout.values.data(), x.values.data(), s.N, s.H);
    EXPECT_LT(rel_err(bf16_to_host(d_dinp, n_in), dinp.values), kBf16Tol) << "backward";
  }
}

// x *= sqrt(1152) over a micro-batch's embeddings (16 x 512 x 1152) and a ragged count: the fp32
// product rounded once, as the CPU's product stored in bf16.
TEST(GpuGemma3Layers, EmbeddingScaleIsTheFp32ProductRoundedOnce) {
  ECO_REQUIRE_GPU();
  const float s = float(std::sqrt(1152.0));
  for (int64_t n : {int64_t(16) * 512 * 1152, int64_t(1001)}) {
    const auto x = random_bf16(size_t(n), 130 + uint64_t(n % 97), 0.05f);
    std::vector<float> ref = x.values;
    cpu::scale_inplace(ref.data(), s, n);
    std::vector<uint16_t> ref_bits(ref.size());
    for (size_t i = 0; i < ref.size(); ++i) ref_bits[i] = float_to_bf16(ref[i]);
    auto d_x = to_device(x.bits);
    ECO_CHECK_CUDA(cuda::scale_inplace_bf16(d_x.get<bf16>(), s, n));
    sync();
    EXPECT_EQ(to_host<uint16_t>(d_x, size_t(n)), ref_bits) << "n " << n;
  }
}

// The (1 + w) gains: w + ones in fp32, bit for bit.
TEST(GpuGemma3Layers, GainAddIsTheFp32SumBitwise) {
  ECO_REQUIRE_GPU();
  const std::vector<float> w = gputest::randn(1152, 150, 0.1f), ones(1152, 1.0f);
  std::vector<float> ref(w.size());
  for (size_t i = 0; i < w.size(); ++i) ref[i] = w[i] + ones[i];
  auto d_w = to_device(w), d_ones = to_device(ones);
  auto d_out = poisoned(w.size() * sizeof(float));
  ECO_CHECK_CUDA(cuda::add_f32(d_out.get<float>(), d_w.get<float>(), d_ones.get<float>(),
                               int64_t(w.size())));
  sync();
  EXPECT_TRUE(gputest::same_bits(to_host<float>(d_out, w.size()), ref));
}

}  // namespace
}  // namespace eco
