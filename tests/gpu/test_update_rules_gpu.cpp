// The optimizer's rules as data, through the Backend interface: sign SGD with momentum
// (RuleKind::SignSgdm), a rule registered only in src/base/math/optimizer_rules.h, runs through
// plain_update and quantized_update on the CPU backend and the CUDA backend with the same bits,
// and the CPU backend's result equals a few lines of float math written here (its plain step,
// its Master step, and its Naive / ECO RTN steps with the CPU quantizer). Tolerance 0: the
// reference performs the rule's operations in the rule's order (-ffp-contract=off everywhere).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "base/qtensor.h"
#include "gpu_test.h"
#include "base/math/optimizer_rules.h"
#include "kernels/cpu/quantize.h"
#include "base/backend.h"

namespace eco {
namespace {

using gputest::download;
using gputest::same_bits;
using gputest::upload;

constexpr float kLr = 0.02f, kBeta = 0.9f, kGradScale = 0.7f;

RuleStep sign_step(float lr = kLr) {
  return momentum_step(RuleKind::SignSgdm, lr, kBeta, 0.0f, kGradScale);
}

// The rule by hand: m = b m + (1 - b)(g s); w = w (1 - lr wd) - lr sign(m), sign(0) = 0.
void reference_moment(float g, float& m) { m = kBeta * m + (1.0f - kBeta) * (g * kGradScale); }
float reference_theta(float w, float m, float lr, float wd) {
  const float sign = m > 0.0f ? 1.0f : m < 0.0f ? -1.0f : 0.0f;
  return w * (1.0f - lr * wd) - lr * sign;
}

// ---- plain steps -------------------------------------------------------------------------------

TEST(GpuUpdateRules, SignSgdmPlainStepMatchesCpuAndFloatReference) {
  ECO_REQUIRE_GPU();
  auto gpu = make_cuda_backend();
  auto cpu = make_cpu_backend(DType::F32);
  // Sizes around the float4 tail and a multi-tensor chunk; distinct weight decays.
  const std::vector<int64_t> sizes = {1, 5, 1001, 16385};
  const std::vector<float> decays = {0.0f, 0.1f, 0.0f, 0.05f};
  struct Host {
    std::vector<float> w, m;
  };
  std::vector<Host> ref(sizes.size());
  std::vector<PlainUpdate> on_cpu, on_gpu;
  for (size_t t = 0; t < sizes.size(); ++t) {
    const int64_t n = sizes[t];
    ref[t].w = gputest::randn(size_t(n), 10 + t);
    ref[t].m = gputest::randn(size_t(n), 20 + t, 1e-3f);
    ref[t].m[0] = 0.0f;  // with a zero gradient below: sign(0)
    const auto tensor = [&](Backend& be) {
      return PlainUpdate{upload(be, ref[t].w, DType::F32, {n}),
                         be.alloc("grad", {n}, DType::F32, MemCategory::Workspace),
                         upload(be, ref[t].m, DType::F32, {n}), Tensor{}, n, decays[t], n};
    };
    on_cpu.push_back(tensor(*cpu));
    on_gpu.push_back(tensor(*gpu));
  }
  for (int step = 1; step <= 3; ++step) {
    const float lr = kLr * float(step);
    for (size_t t = 0; t < sizes.size(); ++t) {
      std::vector<float> g = gputest::randn(size_t(sizes[t]), 100 * uint64_t(step) + t, 0.01f);
      g[0] = 0.0f;
      cpu->copy_from_host(on_cpu[t].grad, g.data());
      gpu->copy_from_host(on_gpu[t].grad, g.data());
      for (size_t i = 0; i < g.size(); ++i) {
        reference_moment(g[i], ref[t].m[i]);
        ref[t].w[i] = reference_theta(ref[t].w[i], ref[t].m[i], lr, decays[t]);
      }
    }
    cpu->plain_update(on_cpu, sign_step(lr));
    gpu->plain_update(on_gpu, sign_step(lr));
  }
  for (size_t t = 0; t < sizes.size(); ++t) {
    SCOPED_TRACE("tensor of " + std::to_string(sizes[t]));
    EXPECT_TRUE(same_bits(download<float>(*cpu, on_cpu[t].param), ref[t].w)) << "cpu param";
    EXPECT_TRUE(same_bits(download<float>(*cpu, on_cpu[t].m), ref[t].m)) << "cpu m";
    EXPECT_TRUE(same_bits(download<float>(*gpu, on_gpu[t].param), ref[t].w)) << "gpu param";
    EXPECT_TRUE(same_bits(download<float>(*gpu, on_gpu[t].m), ref[t].m)) << "gpu m";
  }
}

// ---- quantized steps ---------------------------------------------------------------------------

struct Case {
  QFormat format;
  Granularity granularity;
  int64_t rows, cols;
};

// One backend's copy of a quantized parameter and its state.
struct Param {
  QTensor q;
  Tensor master, grad, m;
};

Param make_param(Backend& be, const Case& c, const std::vector<uint8_t>& codes,
                 const std::vector<float>& scales, const std::vector<float>& master,
                 const std::vector<float>& m) {
  Param p;
  p.q.format = c.format;
  p.q.granularity = c.granularity;
  p.q.rows = c.rows;
  p.q.cols = c.cols;
  p.q.codes = upload(be, codes, DType::U8, {int64_t(codes.size())});
  p.q.scales = upload(be, scales, DType::F32, {int64_t(scales.size())});
  p.master = upload(be, master, DType::F32, {c.rows * c.cols});
  p.grad = be.alloc("grad", {c.rows * c.cols}, DType::F32, MemCategory::Workspace);
  p.m = upload(be, m, DType::F32, {c.rows * c.cols});
  return p;
}

// A backend's codes, scales, master and m, downloaded.
struct State {
  std::vector<uint8_t> codes;
  std::vector<float> scales, master, m;
};
State download_state(Backend& be, const Param& p) {
  return {download<uint8_t>(be, p.q.codes), download<float>(be, p.q.scales),
          download<float>(be, p.master), download<float>(be, p.m)};
}

// The CPU backend's step against the hand-written rule (RTN, so that the reference can quantize
// with the CPU quantizer): Master: master is the plain step and the codes its quantization;
// Naive: the codes quantize theta from the decoded old weight; Eco: as Naive, and m takes
// SGDM's injection ((b - 1) / b) / lr * (theta - dequant(code)).
void expect_reference_step(const Case& c, UpdatePolicy policy, State before,
                           const std::vector<float>& grad, const State& after, float lr) {
  const size_t n = size_t(c.rows * c.cols);
  std::vector<float> w(n), theta(n), m = before.m;
  dequantize(qtensor_view(c.format, c.granularity, c.rows, c.cols, before.codes.data(),
                          before.scales.data()),
             w.data());
  for (size_t i = 0; i < n; ++i) {
    reference_moment(grad[i], m[i]);
    theta[i] = reference_theta(policy == UpdatePolicy::Master ? before.master[i] : w[i], m[i], lr,
                               0.0f);
  }
  std::vector<uint8_t> codes(after.codes.size());
  std::vector<float> scales(after.scales.size());
  QTensor expected = qtensor_view(c.format, c.granularity, c.rows, c.cols, codes.data(),
                                  scales.data());
  quantize(theta.data(), expected, Rounding::RTN, 0, 0, 0);
  std::vector<float> decoded(n);
  dequantize(expected, decoded.data());
  if (policy == UpdatePolicy::Eco) {
    const float inject = ((kBeta - 1.0f) / kBeta) / lr;
    for (size_t i = 0; i < n; ++i) m[i] = m[i] + inject * (theta[i] - decoded[i]);
  }
  EXPECT_EQ(after.codes, codes) << "codes";
  EXPECT_TRUE(same_bits(after.scales, scales)) << "scales";
  EXPECT_TRUE(same_bits(after.m, m)) << "m";
  if (policy == UpdatePolicy::Master) {
    EXPECT_TRUE(same_bits(after.master, theta)) << "master";
  }
}

TEST(GpuUpdateRules, SignSgdmQuantizedUpdateMatchesCpuAndFloatReference) {
  ECO_REQUIRE_GPU();
  auto gpu = make_cuda_backend();
  auto cpu = make_cpu_backend(DType::F32);
  // The CUDA kernels each case takes: the register kernel (vector and ragged rows), the two-pass
  // kernel (128x128 tiles), the per-tensor kernels.
  const Case cases[] = {{QFormat::E4M3, Granularity::PerRow, 3, 64},
                        {QFormat::E4M3, Granularity::PerRow, 4, 37},
                        {QFormat::INT8, Granularity::Block128, 130, 140},
                        {QFormat::INT4, Granularity::PerTensor, 6, 50}};
  uint64_t seed = 40;
  for (const Case& c : cases)
    for (UpdatePolicy policy : {UpdatePolicy::Master, UpdatePolicy::Naive, UpdatePolicy::Eco})
      for (Rounding rounding : {Rounding::RTN, Rounding::SR}) {
        SCOPED_TRACE(std::string(qformat_name(c.format)) + " " + granularity_name(c.granularity) +
                     " " + std::to_string(c.rows) + "x" + std::to_string(c.cols) + " policy " +
                     std::to_string(int(policy)) + (rounding == Rounding::SR ? " SR" : " RTN"));
        const int64_t n = c.rows * c.cols;
        const std::vector<float> w = gputest::randn(size_t(n), ++seed, 0.05f);
        std::vector<uint8_t> codes(size_t(code_bytes(c.format, n)));
        std::vector<float> scales(size_t(num_scales(c.granularity, c.rows, c.cols)));
        QTensor start = qtensor_view(c.format, c.granularity, c.rows, c.cols, codes.data(),
                                     scales.data());
        quantize(w.data(), start, Rounding::RTN, 0, 0, 0);
        const std::vector<float> m0 = gputest::randn(size_t(n), ++seed, 1e-3f);
        Param pc = make_param(*cpu, c, codes, scales, w, m0);
        Param pg = make_param(*gpu, c, codes, scales, w, m0);
        const Tensor no_master{};
        for (int step = 1; step <= 3; ++step) {
          SCOPED_TRACE("step " + std::to_string(step));
          const float lr = kLr / float(step);
          const std::vector<float> grad = gputest::randn(size_t(n), ++seed, 0.01f);
          cpu->copy_from_host(pc.grad, grad.data());
          gpu->copy_from_host(pg.grad, grad.data());
          const QuantizedStep qs{policy, rounding, 4242, uint64_t(step), 9};
          const bool master = policy == UpdatePolicy::Master;
          const State before = download_state(*cpu, pc);
          cpu->quantized_update(pc.q, master ? pc.master : no_master, pc.grad, pc.m, Tensor{},
                                sign_step(lr), qs);
          gpu->quantized_update(pg.q, master ? pg.master : no_master, pg.grad, pg.m, Tensor{},
                                sign_step(lr), qs);
          const State on_cpu = download_state(*cpu, pc), on_gpu = download_state(*gpu, pg);
          EXPECT_EQ(on_gpu.codes, on_cpu.codes) << "codes";
          EXPECT_TRUE(same_bits(on_gpu.scales, on_cpu.scales)) << "scales";
          EXPECT_TRUE(same_bits(on_gpu.m, on_cpu.m)) << "m";
          EXPECT_TRUE(same_bits(on_gpu.master, on_cpu.master)) << "master";
          if (rounding == Rounding::RTN)
            expect_reference_step(c, policy, before, grad, on_cpu, lr);
        }
      }
}

}  // namespace
}  // namespace eco
