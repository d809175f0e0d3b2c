// GPU tests: causal attention forward/backward (kernels/cuda/attention.cuh) against the CPU twin
// eco::cpu::attention_forward/backward<float> run on the same bf16-rounded inputs.
// Tolerances: the GPU stores out and dqkv in bf16 (8 significant bits: rounding alone gives a
// relative-norm error of ~1.6e-3) and computes in fp32 in another order than BLAS, and backward
// takes D = rowsum(dout * out) from the bf16 out (as FlashAttention does): forward 5e-3,
// backward 1e-2. lse is fp32 throughout: checked against float64 to 2e-5 (absolute; values are
// O(log T), the fp32 dot products of hs <= 128 terms err by ~1e-6).
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "gpu_test.h"
#include "kernels/common/bf16.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cuda/attention.cuh"

namespace eco {
namespace {

using gputest::poison;
using gputest::randn;
using gputest::rel_err;
using gputest::to_device;
using gputest::to_host;

struct AttnShape {
  int B, T, NH, hs;
  std::string str() const {
    char buf[64];
    std::snprintf(buf, sizeof buf, "B%d T%d NH%d hs%d", B, T, NH, hs);
    return buf;
  }
};

// Ragged T (1, 7, 64, 129: one key, under one tile, whole tiles, one past), NH in {1, 3, 12},
// hs in {16, 64} and the 128 limit.
const std::vector<AttnShape> kShapes = {{1, 1, 1, 16},   {2, 7, 3, 16},   {1, 64, 12, 64},
                                        {2, 129, 3, 64}, {1, 129, 1, 16}, {2, 33, 2, 128}};

// Random normals rounded to bf16: the bits for the GPU, their exact float values for the CPU.
struct Bf16Data {
  std::vector<uint16_t> bits;
  std::vector<float> values;
};
Bf16Data random_bf16(size_t n, uint64_t seed, float std) {
  Bf16Data d{std::vector<uint16_t>(n), randn(n, seed, std)};
  for (size_t i = 0; i < n; ++i) {
    d.bits[i] = float_to_bf16(d.values[i]);
    d.values[i] = bf16_to_float(d.bits[i]);
  }
  return d;
}

std::vector<float> bf16_values(const std::vector<uint16_t>& bits) {
  std::vector<float> v(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) v[i] = bf16_to_float(bits[i]);
  return v;
}

__nv_bfloat16* bf16_ptr(const cuda::DeviceBuffer& d) { return d.get<__nv_bfloat16>(); }

// lse[b, h, t] = log sum_{u <= t} exp(q_t . k_u / sqrt(hs)), in float64.
std::vector<double> reference_lse(const std::vector<float>& qkv, const AttnShape& s) {
  const int C = s.NH * s.hs;
  std::vector<double> lse(size_t(s.B) * s.NH * s.T);
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.NH; ++h)
      for (int t = 0; t < s.T; ++t) {
        const float* q = &qkv[(size_t(b) * s.T + t) * 3 * C + size_t(h) * s.hs];
        std::vector<double> sc(size_t(t) + 1);
        double mx = -INFINITY;
        for (int u = 0; u <= t; ++u) {
          const float* k = &qkv[(size_t(b) * s.T + u) * 3 * C + C + size_t(h) * s.hs];
          double dot = 0;
          for (int d = 0; d < s.hs; ++d) dot += double(q[d]) * k[d];
          sc[size_t(u)] = dot / std::sqrt(double(s.hs));
          mx = std::max(mx, sc[size_t(u)]);
        }
        double sum = 0;
        for (double x : sc) sum += std::exp(x - mx);
        lse[(size_t(b) * s.NH + h) * s.T + t] = mx + std::log(sum);
      }
  return lse;
}

TEST(GpuAttention, ForwardMatchesCpuTwin) {
  ECO_REQUIRE_GPU();
  for (const auto& s : kShapes) {
    SCOPED_TRACE(s.str());
    const int C = s.NH * s.hs;
    const size_t n_qkv = size_t(s.B) * s.T * 3 * C, n_out = size_t(s.B) * s.T * C,
                 n_lse = size_t(s.B) * s.NH * s.T;
    const Bf16Data qkv = random_bf16(n_qkv, 100 + s.T, 1.0f);

    std::vector<float> ref(n_out), att(size_t(s.B) * s.NH * s.T * s.T);
    cpu::attention_forward(ref.data(), att.data(), qkv.values.data(), s.B, s.T, C, s.NH);

    auto d_qkv = to_device(qkv.bits);
    cuda::DeviceBuffer d_out(n_out * 2), d_lse(n_lse * sizeof(float));
    poison(d_out);
    poison(d_lse);
    ECO_CHECK_CUDA(cuda::attention_forward(bf16_ptr(d_out), d_lse.get<float>(), bf16_ptr(d_qkv),
                                           s.B, s.T, C, s.NH));
    ECO_CHECK_CUDA(cudaDeviceSynchronize());

    EXPECT_LT(rel_err(bf16_values(to_host<uint16_t>(d_out, n_out)), ref), 5e-3);
    const auto lse = to_host<float>(d_lse, n_lse);
    const auto lse_ref = reference_lse(qkv.values, s);
    for (size_t i = 0; i < n_lse; ++i) ASSERT_NEAR(lse[i], lse_ref[i], 2e-5) << "lse " << i;
  }
}

TEST(GpuAttention, BackwardAccumulatesCpuTwinsGradient) {
  ECO_REQUIRE_GPU();
  for (const auto& s : kShapes) {
    SCOPED_TRACE(s.str());
    const int C = s.NH * s.hs;
    const size_t n_qkv = size_t(s.B) * s.T * 3 * C, n_out = size_t(s.B) * s.T * C,
                 n_lse = size_t(s.B) * s.NH * s.T, n_att = size_t(s.B) * s.NH * s.T * s.T;
    const Bf16Data qkv = random_bf16(n_qkv, 200 + s.T, 1.0f);
    const Bf16Data dout = random_bf16(n_out, 300 + s.T, 1.0f);
    // dqkv starts non-zero (backward accumulates), small next to the gradient so that its bf16
    // rounding does not hide gradient errors.
    const Bf16Data dqkv0 = random_bf16(n_qkv, 400 + s.T, 0.05f);

    auto d_qkv = to_device(qkv.bits), d_dout = to_device(dout.bits);
    cuda::DeviceBuffer d_out(n_out * 2), d_lse(n_lse * sizeof(float)),
        d_scratch(n_lse * sizeof(float));
    ECO_CHECK_CUDA(cuda::attention_forward(bf16_ptr(d_out), d_lse.get<float>(), bf16_ptr(d_qkv),
                                           s.B, s.T, C, s.NH));

    std::vector<float> out(n_out), att(n_att), scratch(n_att), ref = dqkv0.values;
    cpu::attention_forward(out.data(), att.data(), qkv.values.data(), s.B, s.T, C, s.NH);
    cpu::attention_backward(ref.data(), scratch.data(), dout.values.data(), qkv.values.data(),
                            att.data(), s.B, s.T, C, s.NH);

    auto d_dqkv = to_device(dqkv0.bits);
    poison(d_scratch);
    ECO_CHECK_CUDA(cuda::attention_backward(bf16_ptr(d_dqkv), d_scratch.get<float>(),
                                            bf16_ptr(d_dout), bf16_ptr(d_qkv), bf16_ptr(d_out),
                                            d_lse.get<float>(), s.B, s.T, C, s.NH));
    ECO_CHECK_CUDA(cudaDeviceSynchronize());
    const auto got = bf16_values(to_host<uint16_t>(d_dqkv, n_qkv));
    EXPECT_LT(rel_err(got, ref), 1e-2);
    // The gradient alone (dqkv minus its start), so that the start cannot mask a wrong gradient;
    // for T = 1 dq and dk vanish and only dv carries signal.
    std::vector<float> g_got(n_qkv), g_ref(n_qkv);
    for (size_t i = 0; i < n_qkv; ++i) {
      g_got[i] = got[i] - dqkv0.values[i];
      g_ref[i] = ref[i] - dqkv0.values[i];
    }
    EXPECT_LT(rel_err(g_got, g_ref), 1e-2);
  }
}

TEST(GpuAttention, ForwardAndBackwardAreDeterministic) {
  ECO_REQUIRE_GPU();
  const AttnShape s{2, 129, 3, 64};
  const int C = s.NH * s.hs;
  const size_t n_qkv = size_t(s.B) * s.T * 3 * C, n_out = size_t(s.B) * s.T * C,
               n_lse = size_t(s.B) * s.NH * s.T;
  const Bf16Data qkv = random_bf16(n_qkv, 501, 1.0f), dout = random_bf16(n_out, 502, 1.0f),
                 dqkv0 = random_bf16(n_qkv, 503, 0.05f);
  auto d_qkv = to_device(qkv.bits), d_dout = to_device(dout.bits);
  cuda::DeviceBuffer d_out(n_out * 2), d_lse(n_lse * sizeof(float)),
      d_scratch(n_lse * sizeof(float));
  std::vector<uint16_t> outs[2], grads[2];
  std::vector<float> lses[2];
  for (int run = 0; run < 2; ++run) {
    poison(d_out);
    poison(d_lse);
    auto d_dqkv = to_device(dqkv0.bits);
    ECO_CHECK_CUDA(cuda::attention_forward(bf16_ptr(d_out), d_lse.get<float>(), bf16_ptr(d_qkv),
                                           s.B, s.T, C, s.NH));
    ECO_CHECK_CUDA(cuda::attention_backward(bf16_ptr(d_dqkv), d_scratch.get<float>(),
                                            bf16_ptr(d_dout), bf16_ptr(d_qkv), bf16_ptr(d_out),
                                            d_lse.get<float>(), s.B, s.T, C, s.NH));
    ECO_CHECK_CUDA(cudaDeviceSynchronize());
    outs[run] = to_host<uint16_t>(d_out, n_out);
    lses[run] = to_host<float>(d_lse, n_lse);
    grads[run] = to_host<uint16_t>(d_dqkv, n_qkv);
  }
  EXPECT_EQ(outs[0], outs[1]);
  EXPECT_EQ(0, std::memcmp(lses[0].data(), lses[1].data(), n_lse * sizeof(float)));
  EXPECT_EQ(grads[0], grads[1]);
}

TEST(GpuAttention, RejectsHeadSizeAbove128AndRaggedHeads) {
  ECO_REQUIRE_GPU();
  cuda::DeviceBuffer buf(1 << 20);
  auto* p = bf16_ptr(buf);
  float* f = buf.get<float>();
  EXPECT_EQ(cuda::attention_forward(p, f, p, 1, 4, 2 * 129, 2), cudaErrorInvalidValue);  // hs 129
  EXPECT_EQ(cuda::attention_forward(p, f, p, 1, 4, 10, 3), cudaErrorInvalidValue);       // C % NH
  EXPECT_EQ(cuda::attention_backward(p, f, p, p, p, f, 1, 0, 64, 1), cudaErrorInvalidValue);  // T 0
}

}  // namespace
}  // namespace eco
