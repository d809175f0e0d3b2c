// GPU tests: the element-wise kernels and row-wise quantize against their CPU twins.
#include <gtest/gtest.h>

#include "gpu_test.h"
#include "base/math/activations.h"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/quantize.cuh"
#include "kernels/cpu/quantize.h"

namespace eco {
namespace {

using gputest::poison;
using gputest::randn;
using gputest::rel_err;
using gputest::to_device;
using gputest::to_host;

// fp32 element-wise math on both sides from the same src/base/math function, no FMA
// contraction. CUDA's tanhf and glibc's differ by an ulp or two (each is within 2 ulps), and
// 0.5 x (1 + tanh(u)) amplifies that relative to the result for negative x (cancellation): on an
// H200 the worst case was 5.2e-8 absolute at x ~ -0.2. Tolerance 1e-6 * (|x| + |gelu(x)|).
TEST(GpuElementwise, GeluForwardMatchesCpuWithinUlps) {
  ECO_REQUIRE_GPU();
  for (int64_t n : {1, 255, 257, 100003}) {
    const auto x = randn(size_t(n), 11 + n, 3.0f);
    auto dx = to_device(x);
    cuda::DeviceBuffer dy(x.size() * sizeof(float));
    poison(dy);
    ECO_CHECK_CUDA(cuda::gelu_forward(dy.get<float>(), dx.get<float>(), n));
    ECO_CHECK_CUDA(cudaDeviceSynchronize());
    const auto y = to_host<float>(dy, x.size());
    for (int64_t i = 0; i < n; ++i) {
      const float ref = gelu_tanh(x[i]);
      ASSERT_NEAR(y[i], ref, 1e-6f * (std::fabs(x[i]) + std::fabs(ref))) << "n " << n << " i " << i;
    }
  }
}

// SR decisions and codes of the GPU row-wise quantize equal the CPU reference bit for bit.
TEST(GpuQuantize, RowwiseE4m3CodesAndScalesEqualCpu) {
  ECO_REQUIRE_GPU();
  for (auto rounding : {Rounding::RTN, Rounding::SR}) {
    for (auto [rows, cols] : {std::pair{1, 1}, {7, 33}, {64, 1000}, {300, 4096}}) {
      const auto x = randn(size_t(rows) * cols, 5 + rows, 2.0f);
      std::vector<uint8_t> ref_codes(x.size());
      std::vector<float> ref_scales(rows);
      QTensor q = qtensor_view(QFormat::E4M3, Granularity::PerRow, rows, cols, ref_codes.data(),
                               ref_scales.data());
      quantize(x.data(), q, rounding, 1234, 7, 3);
      auto dx = to_device(x);
      cuda::DeviceBuffer dc(x.size()), ds(size_t(rows) * sizeof(float));
      poison(dc);
      poison(ds);
      ECO_CHECK_CUDA(cuda::quantize_rows(dx.get<float>(), dc.get<uint8_t>(), ds.get<float>(),
                                         rows, cols, QFormat::E4M3, rounding, 1234, 7, 3));
      ECO_CHECK_CUDA(cudaDeviceSynchronize());
      EXPECT_EQ(to_host<uint8_t>(dc, x.size()), ref_codes) << rows << "x" << cols;
      EXPECT_EQ(to_host<float>(ds, size_t(rows)), ref_scales) << rows << "x" << cols;
    }
  }
}

}  // namespace
}  // namespace eco
