// The CUDA backend's operations that have no kernel test of their own (quantize with every
// granularity, dequantize, the fp32 -> bf16 weight rounding, the activation casts,
// sum_squares_segments) against the CPU reference, through the Backend interface as the model
// calls them.
// Bit-identical where both run the same src/base/math element math in the same order; the
// E4M3 activation cast equals the CPU cast of the same (bf16) values, rounded once to bf16.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "base/error.h"
#include "core/rng.h"
#include "gpu_test.h"
#include "base/math/bf16.h"
#include "kernels/cuda/convert.cuh"
#include "base/backend.h"
#include "kernels/cpu/quantize.h"

namespace eco {
namespace {

using gputest::download;
using gputest::same_bits;
using gputest::upload;

struct Shape {
  int64_t rows, cols;
};

TEST(GpuBackend, QuantizeAndDequantizeAreBitIdenticalToCpuForEveryGranularity) {
  ECO_REQUIRE_GPU();
  auto gpu = make_cuda_backend();
  // {5, 18}: rows of cols % 4 == 2 (Philox groups and INT4 bytes straddling rows); {3, 5}: an
  // odd element count (the last INT4 byte half used).
  const Shape shapes[] = {{1, 16}, {3, 40}, {5, 18}, {3, 5}, {130, 257}, {256, 384}};
  uint64_t seed = 5;
  for (QFormat f : {QFormat::E4M3, QFormat::E5M2, QFormat::INT8, QFormat::INT4})
    for (Granularity g : {Granularity::PerRow, Granularity::PerTensor, Granularity::Block128})
      for (Rounding r : {Rounding::RTN, Rounding::SR})
        for (const Shape& s : shapes) {
          if (f == QFormat::INT4 && g == Granularity::PerRow && s.cols % 2) continue;  // refused
          const int64_t n = s.rows * s.cols;
          auto x = gputest::randn(size_t(n), ++seed, 0.05f);
          x[size_t(n / 2)] = 0.0f;
          std::vector<uint8_t> codes(size_t(code_bytes(f, n)));
          std::vector<float> scales(size_t(num_scales(g, s.rows, s.cols)));
          std::vector<float> ref(static_cast<size_t>(n));
          QTensor qc = qtensor_view(f, g, s.rows, s.cols, codes.data(), scales.data());
          quantize(x.data(), qc, r, 7, 3, 11);
          dequantize(qc, ref.data());

          QTensor q;
          q.format = f;
          q.granularity = g;
          q.rows = s.rows;
          q.cols = s.cols;
          q.codes = gpu->alloc("codes", {int64_t(codes.size())}, DType::U8, MemCategory::QuantCodes);
          q.scales = gpu->alloc("scales", {int64_t(scales.size())}, DType::F32, MemCategory::Scales);
          const Tensor src = upload(*gpu, x, DType::F32, {s.rows, s.cols});
          gpu->quantize(q, src, r, 7, 3, 11);
          const Tensor out = gpu->alloc("out", {s.rows, s.cols}, DType::F32, MemCategory::Workspace);
          gpu->dequantize(out, q);
          const auto what = ::testing::Message()
                            << qformat_name(f) << " " << granularity_name(g) << " "
                            << (r == Rounding::SR ? "SR" : "RTN") << " " << s.rows << "x" << s.cols;
          EXPECT_EQ(download<uint8_t>(*gpu, q.codes), codes) << what;
          EXPECT_TRUE(same_bits(download<float>(*gpu, q.scales), scales)) << what;
          EXPECT_TRUE(same_bits(download<float>(*gpu, out), ref)) << what;
        }
}

TEST(GpuBackend, RoundToBf16IsBitIdenticalToCpu) {
  ECO_REQUIRE_GPU();
  auto gpu = make_cuda_backend();
  auto cpu = make_cpu_backend();
  auto x = gputest::randn(10007, 3, 3.0f);
  x[0] = std::numeric_limits<float>::quiet_NaN();
  x[1] = std::numeric_limits<float>::infinity();
  x[2] = 3.4e38f;  // rounds up to inf
  x[3] = -1e-40f;  // subnormal
  const int64_t n = int64_t(x.size());
  const Tensor g = upload(*gpu, x, DType::F32, {n});
  const Tensor c = upload(*cpu, x, DType::F32, {n});
  gpu->round_to_bf16(g, g, n);  // in place, as ParamStore may
  cpu->round_to_bf16(c, c, n);
  EXPECT_TRUE(same_bits(download<float>(*gpu, g), download<float>(*cpu, c)));
}

// The activations are bf16 on the GPU: the E4M3 row cast of those values must equal the CPU cast
// of the same values (fp32), rounded to bf16; None and Bf16 are copies (bf16 is exact already).
TEST(GpuBackend, ActivationCastsMatchTheCpuCastOfTheSameBf16Values) {
  ECO_REQUIRE_GPU();
  auto gpu = make_cuda_backend();
  auto cpu = make_cpu_backend();
  for (const Shape& s : {Shape{1, 7}, Shape{5, 37}, Shape{64, 768}, Shape{3, 3000}}) {
    const int N = int(s.rows), C = int(s.cols);
    const size_t n = size_t(N) * C;
    const auto x = gputest::randn(n, 40 + n, 4.0f);
    std::vector<uint16_t> bits(n);
    std::vector<float> vals(n);
    for (size_t i = 0; i < n; ++i) {
      bits[i] = float_to_bf16(x[i]);
      vals[i] = bf16_to_float(bits[i]);
    }
    const Tensor xc = upload(*cpu, vals, DType::F32, {N, C});
    cpu->cast_activations(xc, xc, N, C, ActCast::E4M3Row);
    std::vector<uint16_t> want(n);
    const auto cast = download<float>(*cpu, xc);
    for (size_t i = 0; i < n; ++i) want[i] = float_to_bf16(cast[i]);

    const Tensor xg = upload(*gpu, bits, DType::BF16, {N, C});
    const Tensor out = gpu->alloc("out", {N, C}, DType::BF16, MemCategory::Workspace);
    gpu->cast_activations(out, xg, N, C, ActCast::E4M3Row);  // out of place
    EXPECT_EQ(download<uint16_t>(*gpu, out), want) << N << "x" << C;
    gpu->cast_activations(xg, xg, N, C, ActCast::E4M3Row);  // in place
    EXPECT_EQ(download<uint16_t>(*gpu, xg), want) << N << "x" << C << " in place";

    const Tensor y = upload(*gpu, bits, DType::BF16, {N, C});
    for (ActCast a : {ActCast::None, ActCast::Bf16}) {
      gpu->zero(out);
      gpu->cast_activations(out, y, N, C, a);
      EXPECT_EQ(download<uint16_t>(*gpu, out), bits) << N << "x" << C;
    }
  }
}

// bf16 -> fp32 is exact: every bit pattern, NaNs and infinities included.
TEST(GpuConvert, Bf16ToF32WidensEveryBitPatternExactly) {
  ECO_REQUIRE_GPU();
  std::vector<uint16_t> bits(1 << 16);
  for (size_t i = 0; i < bits.size(); ++i) bits[i] = uint16_t(i);
  std::vector<float> want(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) want[i] = bf16_to_float(bits[i]);
  const auto d_in = gputest::to_device(bits);
  cuda::DeviceBuffer d_out(want.size() * sizeof(float));
  gputest::poison(d_out);
  ECO_CHECK_CUDA(cuda::bf16_to_f32(d_out.get<float>(), d_in.get<__nv_bfloat16>(),
                                   int64_t(bits.size())));
  EXPECT_TRUE(same_bits(gputest::to_host<float>(d_out, want.size()), want));
}

// The whole tensor as one segment (the sum of squares of a tensor).
TEST(GpuBackend, SumSquaresOfAWholeTensorMatchesCpuInDouble) {
  ECO_REQUIRE_GPU();
  auto gpu = make_cuda_backend();
  auto cpu = make_cpu_backend();
  for (int64_t n : {int64_t(1), int64_t(1000), int64_t(3) << 20}) {
    const auto x = gputest::randn(size_t(n), 77 + uint64_t(n));
    double g = std::nan(""), c = std::nan("");
    gpu->sum_squares_segments(upload(*gpu, x, DType::F32, {n}), {{0, n}}, &g);
    cpu->sum_squares_segments(upload(*cpu, x, DType::F32, {n}), {{0, n}}, &c);
    EXPECT_NEAR(g, c, 1e-12 * c) << n;  // double sums of fp32 squares in another order
  }
}

// sum_squares_segments against the CPU backend: both are double sums of the same exact fp32
// squares in different orders, each within (len - 1) 2^-53 sum of the exact value, so they agree
// within 2 len 2^-53 sum; an empty segment gives exactly 0. And the GPU's partial of a segment is
// the same bits asked alone as among others. Returns the GPU's partials.
std::vector<double> expect_segments_match_cpu(Backend& gpu, Backend& cpu,
                                              const std::vector<float>& x,
                                              const std::vector<SumSegment>& segs) {
  const int64_t n = int64_t(x.size());
  std::vector<double> g(segs.size(), std::nan("")), c(segs.size(), std::nan(""));
  gpu.sum_squares_segments(upload(gpu, x, DType::F32, {n}), segs, g.data());
  cpu.sum_squares_segments(upload(cpu, x, DType::F32, {n}), segs, c.data());
  for (size_t k = 0; k < segs.size(); ++k) {
    const double tol = 2.0 * double(segs[k].length) * std::ldexp(1.0, -53) * c[k];
    EXPECT_NEAR(g[k], c[k], tol) << "segment " << k << " (offset " << segs[k].offset
                                 << ", length " << segs[k].length << ")";
    if (segs[k].length == 0) {
      EXPECT_EQ(g[k], 0.0) << "segment " << k;
    }
  }
  return g;
}

// Small enough for the emulator (emu.backend): empty, one element, a partial warp, longer than a
// block, overlapping segments; a second, longer list (the scratches grow); each segment alone.
TEST(GpuBackend, SumSquaresSegmentsMatchCpuAndDoNotDependOnTheOthers) {
  ECO_REQUIRE_GPU();
  auto gpu = make_cuda_backend();
  auto cpu = make_cpu_backend();
  const int64_t n = 20011;
  const auto x = gputest::randn(size_t(n), 31, 0.02f);
  const std::vector<SumSegment> few = {{0, 0}, {3, 1}, {9, 31}, {100, 5000}, {2000, 7777}};
  const std::vector<double> g = expect_segments_match_cpu(*gpu, *cpu, x, few);
  std::vector<SumSegment> more = few;
  for (int64_t o = 0; o + 1024 <= n; o += 1024) more.push_back({o, 1024});
  more.push_back({n - 1, 1});
  const std::vector<double> g_more = expect_segments_match_cpu(*gpu, *cpu, x, more);
  const Tensor t = upload(*gpu, x, DType::F32, {n});
  for (size_t k = 0; k < few.size(); ++k) {
    double alone = std::nan("");
    gpu->sum_squares_segments(t, {few[k]}, &alone);
    EXPECT_EQ(std::memcmp(&alone, &g[k], sizeof alone), 0) << "segment " << k << " alone";
    EXPECT_EQ(std::memcmp(&g_more[k], &g[k], sizeof alone), 0) << "segment " << k << ", more";
  }
  double out = 0;
  EXPECT_THROW(gpu->sum_squares_segments(t, {{n - 3, 4}}, &out), Error);  // one past the end
}

// A model's scale (not under the emulator): 96 segments of 128 rows of 768 (GPT-2's gradient
// rows of a ZeRO-1 shard) and 70000 short ones, past the kernel's 65535 blocks (the blocks stride
// over the segments).
TEST(GpuBackend, SumSquaresSegmentsPastTheBlockLimitMatchCpu) {
  ECO_REQUIRE_GPU();
  auto gpu = make_cuda_backend();
  auto cpu = make_cpu_backend();
  const int64_t rows = 128 * 768, big = 96, n = big * rows + 70000 * 3;
  const auto x = gputest::randn(size_t(n), 32, 0.01f);
  std::vector<SumSegment> segs;
  for (int64_t k = 0; k < big; ++k) segs.push_back({k * rows, rows});
  for (int64_t o = big * rows; o < n; o += 3) segs.push_back({o, 3});
  expect_segments_match_cpu(*gpu, *cpu, x, segs);
}

// The head through the backend with a vocabulary that is not a multiple of 8 (GPT-2's): the CUDA
// backend keeps the logits rows logits_stride(V, C) (a multiple of 64) apart and runs the GEMMs
// over the padded width (see head_forward). Against the CPU backend (stride V) on the same
// bf16-representable values: logits, then dinp and dW, both accumulating into non-zero starting
// values, from a dlogits whose padding is zero (as the classifier leaves it). The same shapes
// through matmul_forward / matmul_backward (unpadded rows) too. Tolerance: bf16 output rounding
// and fp32 accumulation in another order: relative (norm) error <= 5e-3 (bf16 outputs), 1e-4 (the
// fp32 weight gradient). Outputs are poisoned (NaN) first, so unwritten elements fail; the
// padding columns of the logits must come out exactly zero.
TEST(GpuBackend, HeadWithUnalignedVocabularyMatchesCpu) {
  ECO_REQUIRE_GPU();
  auto gpu = make_cuda_backend();
  auto cpu = make_cpu_backend();
  struct Case {
    int N, C, V;
  };
  for (const Case& k : {Case{5, 16, 37}, Case{64, 768, 1031}, Case{96, 64, 50257}}) {
    const int N = k.N, C = k.C, V = k.V, ld = gpu->logits_stride(V, C);
    ASSERT_EQ(ld % 64, 0) << V;
    ASSERT_GE(ld, V);
    ASSERT_EQ(cpu->logits_stride(V, C), V);
    auto bf16_values = [](std::vector<float> v) {
      for (float& x : v) x = bf16_to_float(float_to_bf16(x));
      return v;
    };
    auto bits_of = [](const std::vector<float>& v) {
      std::vector<uint16_t> b(v.size());
      for (size_t i = 0; i < v.size(); ++i) b[i] = float_to_bf16(v[i]);
      return b;
    };
    auto floats_of = [](const std::vector<uint16_t>& b) {
      std::vector<float> v(b.size());
      for (size_t i = 0; i < b.size(); ++i) v[i] = bf16_to_float(b[i]);
      return v;
    };
    // (rows, V) packed <-> (rows, ld) strided with zero padding.
    auto strided = [&](const std::vector<uint16_t>& packed) {
      std::vector<uint16_t> out(size_t(N) * ld, 0);
      for (int n = 0; n < N; ++n)
        std::copy_n(packed.begin() + int64_t(n) * V, V, out.begin() + int64_t(n) * ld);
      return out;
    };
    const auto x = bf16_values(gputest::randn(size_t(N) * C, 500 + V));
    const auto w = bf16_values(gputest::randn(size_t(V) * C, 600 + V, 0.05f));
    const auto dout = bf16_values(gputest::randn(size_t(N) * V, 700 + V));
    const auto dinp0 = bf16_values(gputest::randn(size_t(N) * C, 800 + V));
    const auto dw0 = gputest::randn(size_t(V) * C, 900 + V);

    // CPU reference (stride V: head_forward is matmul_forward there).
    const Tensor cx = upload(*cpu, x, DType::F32, {N, C}), cw = upload(*cpu, w, DType::F32, {V, C});
    const Tensor cout_ = cpu->alloc("out", {N, V}, DType::F32, MemCategory::Workspace);
    cpu->head_forward(cout_, cx, cw, N, C, V, V);
    const Tensor cdinp = upload(*cpu, dinp0, DType::F32, {N, C});
    const Tensor cdw = upload(*cpu, dw0, DType::F32, {V, C});
    cpu->head_backward(cdinp, cdw, upload(*cpu, dout, DType::F32, {N, V}), cx, cw, N, C, V, V);
    const auto want_out = download<float>(*cpu, cout_), want_dinp = download<float>(*cpu, cdinp),
               want_dw = download<float>(*cpu, cdw);

    const Tensor gx = upload(*gpu, bits_of(x), DType::BF16, {N, C});
    const Tensor gw = upload(*gpu, w, DType::F32, {V, C});
    // CUDA head, padded rows.
    {
      const Tensor gout = upload(*gpu, std::vector<uint16_t>(size_t(N) * ld, 0x7FC0), DType::BF16,
                                 {N, ld});  // NaN
      gpu->head_forward(gout, gx, gw, N, C, V, ld);
      const Tensor gdinp = upload(*gpu, bits_of(dinp0), DType::BF16, {N, C});
      const Tensor gdw = upload(*gpu, dw0, DType::F32, {V, C});
      gpu->head_backward(gdinp, gdw, upload(*gpu, strided(bits_of(dout)), DType::BF16, {N, ld}),
                         gx, gw, N, C, V, ld);
      const auto all = floats_of(download<uint16_t>(*gpu, gout));
      std::vector<float> out;
      for (int n = 0; n < N; ++n) {
        out.insert(out.end(), all.begin() + int64_t(n) * ld, all.begin() + int64_t(n) * ld + V);
        for (int j = V; j < ld; ++j)
          ASSERT_EQ(all[size_t(int64_t(n) * ld + j)], 0.0f) << "padding " << n << ", " << j;
      }
      for (float v : out) ASSERT_TRUE(std::isfinite(v)) << N << "x" << C << "x" << V;
      EXPECT_LE(gputest::rel_err(out, want_out), 5e-3) << V;
      EXPECT_LE(gputest::rel_err(floats_of(download<uint16_t>(*gpu, gdinp)), want_dinp), 5e-3) << V;
      EXPECT_LE(gputest::rel_err(download<float>(*gpu, gdw), want_dw), 1e-4) << V;
    }
    // CUDA matmul, unpadded rows (cuBLASLt on rows off 16-byte boundaries).
    {
      const Tensor gout = upload(*gpu, std::vector<uint16_t>(size_t(N) * V, 0x7FC0), DType::BF16,
                                 {N, V});  // NaN
      gpu->matmul_forward(gout, gx, gw, Tensor{}, N, C, V);
      const Tensor gdinp = upload(*gpu, bits_of(dinp0), DType::BF16, {N, C});
      const Tensor gdw = upload(*gpu, dw0, DType::F32, {V, C});
      gpu->matmul_backward(gdinp, gdw, Tensor{}, upload(*gpu, bits_of(dout), DType::BF16, {N, V}),
                           gx, gw, N, C, V);
      const auto out = floats_of(download<uint16_t>(*gpu, gout));
      for (float v : out) ASSERT_TRUE(std::isfinite(v)) << N << "x" << C << "x" << V;
      EXPECT_LE(gputest::rel_err(out, want_out), 5e-3) << V;
      EXPECT_LE(gputest::rel_err(floats_of(download<uint16_t>(*gpu, gdinp)), want_dinp), 5e-3) << V;
      EXPECT_LE(gputest::rel_err(download<float>(*gpu, gdw), want_dw), 1e-4) << V;
    }
  }
}

}  // namespace
}  // namespace eco
