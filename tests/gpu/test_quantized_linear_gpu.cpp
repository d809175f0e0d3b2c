// The linear layer with a quantized weight on the CUDA backend (Backend::quantized_linear_forward
// and _backward) against the CPU backend's emulation, on fresh random inputs:
//  - the activation side of the FP8 forward (cuda::quantize_cast_e4m3_rows): codes and scales
//    bit-identical to the CPU quantizer, x_cast to the CPU cast rounded to bf16;
//  - the forward where the FP8 GEMM applies (E4M3 per-row weight, E4M3 activation cast, N, C, OC
//    multiples of 16, sm_90+): bit-identical to GemmEngine::matmul_forward_fp8 on the CPU
//    quantizer's codes (so the FP8 GEMM is what ran), within tolerance of the CPU;
//  - the forward where it does not (ragged shapes, other weight formats): bit-identical to the
//    CUDA emulation (cast, dequantize, bf16 GEMM), within tolerance of the CPU;
//  - the backward: bit-identical to matmul_backward on the dequantized weight (the old path).
//
// Tolerance of out against the CPU (which computes in fp32 from the same codes and scales):
// ||gpu - cpu|| / ||cpu|| <= 5e-3, and per element |gpu - cpu| <= 2^-7 |cpu| + 2^-8 |bias| +
// 2^-8 sum_k |x_cast_k w_k|. The FP8 GEMM multiplies E4M3 values exactly (4 x 4 significant
// bits) and accumulates in fp32 with fast accumulation on (Hopper keeps fewer accumulator bits
// then; for K <= 3072 that costs well under 1e-3 norm-wise); the bias is rounded to bf16 before
// the add (2^-9 |bias|) and the output once to bf16 (unit roundoff 2^-9: ~1.5e-3 norm-wise). The
// emulation instead rounds every dequantized weight to bf16 (2^-9 relative each, at most
// 2^-9 sum_k |x_k w_k| per output). 5e-3 holds both with room, while a wrong scale, row or
// column moves the error to O(1). The per-element bound catches an isolated wrong row or column.
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <vector>

#include "core/rng.h"
#include "gpu_test.h"
#include "base/math/bf16.h"
#include "kernels/cuda/convert.cuh"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/quantize.cuh"
#include "base/backend.h"
#include "kernels/cpu/quantize.h"

namespace eco {
namespace {

using bf16 = __nv_bfloat16;

using gputest::download;
using gputest::upload;

// A bf16 output filled with NaN (0xFFFF), so an element the operation does not write fails.
Tensor poisoned_bf16(Backend& be, std::vector<int64_t> shape) {
  Tensor t = be.alloc("out", std::move(shape), DType::BF16, MemCategory::Workspace);
  be.copy_from_host(t, std::vector<uint16_t>(size_t(t.numel()), 0xFFFFu).data());
  return t;
}

std::vector<uint16_t> to_bf16_bits(const std::vector<float>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = float_to_bf16(v[i]);
  return b;
}

std::vector<float> bits_to_floats(const std::vector<uint16_t>& b) {
  std::vector<float> v(b.size());
  for (size_t i = 0; i < b.size(); ++i) v[i] = bf16_to_float(b[i]);
  return v;
}

// Activations (N, C) as bf16 values: normals with a per-row magnitude over 2^-8 .. 2^8 (so the
// per-row scales matter), row 1 all zeros (scale 0) when N > 1.
std::vector<float> random_activations(int N, int C, uint64_t seed) {
  Rng r(seed);
  std::vector<float> x(size_t(N) * C);
  for (int i = 0; i < N; ++i) {
    const float mag = std::ldexp(1.0f, int(r.next_u64() % 17) - 8);
    for (int c = 0; c < C; ++c)
      x[size_t(i) * C + c] = i == 1 ? 0.0f : bf16_to_float(float_to_bf16(mag * float(r.normal())));
  }
  return x;
}

// A weight (OC, C) quantized on the host by the CPU reference, uploaded to one backend.
struct HostQuantized {
  QFormat format;
  Granularity granularity;
  int64_t rows, cols;
  std::vector<uint8_t> codes;
  std::vector<float> scales;

  HostQuantized(QFormat f, Granularity g, int OC, int C, uint64_t seed)
      : format(f), granularity(g), rows(OC), cols(C), codes(size_t(code_bytes(f, int64_t(OC) * C))),
        scales(size_t(num_scales(g, OC, C))) {
    const auto w = gputest::randn(size_t(OC) * C, seed, 0.05f);
    QTensor q = qtensor_view(f, g, OC, C, codes.data(), scales.data());
    quantize(w.data(), q, Rounding::RTN, 0, 0, 0);
  }
  QTensor on(Backend& be) const {
    QTensor q;
    q.format = format;
    q.granularity = granularity;
    q.rows = rows;
    q.cols = cols;
    q.codes = upload(be, codes, DType::U8, {int64_t(codes.size())});
    q.scales = upload(be, scales, DType::F32, {int64_t(scales.size())});
    return q;
  }
  std::vector<float> dequantized() {
    std::vector<float> out(size_t(rows * cols));
    dequantize(qtensor_view(format, granularity, rows, cols, codes.data(), scales.data()),
               out.data());
    return out;
  }
};

// Checks gpu against cpu with the tolerance in the file comment; returns the norm-wise error.
double expect_close(const std::vector<float>& gpu, const std::vector<float>& cpu,
                    const std::vector<float>& x_cast, const std::vector<float>& w,
                    const std::vector<float>& bias, int N, int C, int OC, const char* what) {
  const double err = gputest::rel_err(gpu, cpu);
  EXPECT_LE(err, 5e-3) << what;
  int bad = 0;
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) {
      double cond = 0;
      for (int c = 0; c < C; ++c)
        cond += std::fabs(double(x_cast[size_t(n) * C + c]) * w[size_t(o) * C + c]);
      const size_t i = size_t(n) * OC + o;
      const double b = bias.empty() ? 0.0 : std::fabs(bias[size_t(o)]);
      const double bound = std::ldexp(std::fabs(cpu[i]), -7) + std::ldexp(b, -8) +
                           std::ldexp(cond, -8);
      if (!(std::fabs(double(gpu[i]) - cpu[i]) <= bound) && bad++ < 5)
        ADD_FAILURE() << what << " out[" << n << ", " << o << "] gpu " << gpu[i] << " cpu "
                      << cpu[i] << " bound " << bound;
    }
  EXPECT_EQ(bad, 0) << what << ": elements outside the per-element bound";
  return err;
}

struct LinearShape {
  int N, C, OC;
};

// One forward on both backends from the same bf16 activations, codes, scales and bias; checks
// x_cast and out against the CPU, and returns the GPU's x (as uploaded), out and x_cast.
struct ForwardRun {
  Tensor x, out, x_cast, bias;
  QTensor w;
};

ForwardRun run_forward(Backend& gpu, Backend& cpu, HostQuantized& hq, const LinearShape& s,
                       ActCast act, bool with_bias, uint64_t seed, const char* what) {
  const int N = s.N, C = s.C, OC = s.OC;
  const auto x = random_activations(N, C, seed);
  const auto bias = with_bias ? gputest::randn(size_t(OC), seed + 1, 0.5f) : std::vector<float>{};

  const Tensor xc = upload(cpu, x, DType::F32, {N, C});
  const Tensor cast_c = cpu.alloc("x_cast", {N, C}, DType::F32, MemCategory::Workspace);
  const Tensor out_c = cpu.alloc("out", {N, OC}, DType::F32, MemCategory::Workspace);
  const Tensor scratch_c = cpu.alloc("w_scratch", {OC, C}, DType::F32, MemCategory::Workspace);
  const Tensor bias_c = with_bias ? upload(cpu, bias, DType::F32, {OC}) : Tensor{};
  cpu.quantized_linear_forward(out_c, cast_c, xc, hq.on(cpu), scratch_c, bias_c, N, C, OC, act);

  ForwardRun r;
  r.x = upload(gpu, to_bf16_bits(x), DType::BF16, {N, C});
  r.out = poisoned_bf16(gpu, {N, OC});
  r.x_cast = poisoned_bf16(gpu, {N, C});
  r.bias = with_bias ? upload(gpu, bias, DType::F32, {OC}) : Tensor{};
  r.w = hq.on(gpu);
  const Tensor scratch_g = gpu.alloc("w_scratch", {OC, C}, DType::F32, MemCategory::Workspace);
  gpu.quantized_linear_forward(r.out, r.x_cast, r.x, r.w, scratch_g, r.bias, N, C, OC, act);

  const auto cast_cpu = download<float>(cpu, cast_c);
  EXPECT_EQ(download<uint16_t>(gpu, r.x_cast), to_bf16_bits(cast_cpu))
      << what << ": x_cast is the CPU cast rounded to bf16";
  const double err =
      expect_close(bits_to_floats(download<uint16_t>(gpu, r.out)), download<float>(cpu, out_c),
                   cast_cpu, hq.dequantized(), bias, N, C, OC, what);
  std::printf("  %s: out rel_err %.2e\n", what, err);
  return r;
}

// ---- the activation quantizer of the FP8 forward ---------------------------------------------

TEST(GpuQuantizeCast, E4m3RowsGiveTheCpuQuantizersCodesScalesAndCast) {
  ECO_REQUIRE_GPU();
  struct Rows {
    int N, C;
  };
  for (const Rows& s : {Rows{1, 8}, Rows{3, 40}, Rows{16, 16}, Rows{64, 768}, Rows{5, 3000}}) {
    const int N = s.N, C = s.C;
    const size_t n = size_t(N) * C;
    auto x = random_activations(N, C, 100 + n);
    x[n / 2] = std::numeric_limits<float>::quiet_NaN();  // ignored by the max, encodes as NaN
    std::vector<uint8_t> want_codes(n);
    std::vector<float> want_scales(static_cast<size_t>(N)), want_cast(n);
    QTensor q = qtensor_view(QFormat::E4M3, Granularity::PerRow, N, C, want_codes.data(),
                             want_scales.data());
    quantize(x.data(), q, Rounding::RTN, 0, 0, 0);
    dequantize(q, want_cast.data());

    const auto d_x = gputest::to_device(to_bf16_bits(x));
    cuda::DeviceBuffer d_codes(n), d_scales(sizeof(float) * size_t(N)), d_cast(2 * n);
    for (bool in_place : {false, true}) {
      gputest::poison(d_codes);
      gputest::poison(d_scales);
      gputest::poison(d_cast);
      bf16* cast = in_place ? d_x.get<bf16>() : d_cast.get<bf16>();
      ECO_CHECK_CUDA(cuda::quantize_cast_e4m3_rows(d_codes.get<uint8_t>(), d_scales.get<float>(),
                                                   cast, d_x.get<bf16>(), N, C));
      ECO_CHECK_CUDA(cudaDeviceSynchronize());
      const auto what = ::testing::Message() << N << "x" << C << (in_place ? " in place" : "");
      EXPECT_EQ(gputest::to_host<uint8_t>(d_codes, n), want_codes) << what;
      const auto scales = gputest::to_host<float>(d_scales, size_t(N));
      for (int r = 0; r < N; ++r)
        EXPECT_EQ(f32_bits(scales[size_t(r)]), f32_bits(want_scales[size_t(r)]))
            << what << " row " << r;
      EXPECT_EQ(gputest::to_host<uint16_t>(in_place ? d_x : d_cast, n), to_bf16_bits(want_cast))
          << what;
    }
  }
}

TEST(GpuQuantizeCast, RefusesWhatItsVectorAccessCannotTake) {
  ECO_REQUIRE_GPU();
  cuda::DeviceBuffer x(4096), codes(4096), scales(64), cast(4096);
  const auto launch = [&](int64_t C, int x_offset, int codes_offset) {
    const cudaError_t e = cuda::quantize_cast_e4m3_rows(
        codes.get<uint8_t>() + codes_offset, scales.get<float>(), cast.get<bf16>(),
        x.get<bf16>() + x_offset, 4, C);
    cudaGetLastError();
    return e;
  };
  EXPECT_EQ(launch(64, 0, 0), cudaSuccess);
  EXPECT_EQ(launch(12, 0, 0), cudaErrorInvalidValue);  // C not a multiple of 8
  EXPECT_EQ(launch(64, 4, 0), cudaErrorInvalidValue);  // x 8-byte aligned only
  EXPECT_EQ(launch(64, 0, 4), cudaErrorInvalidValue);  // codes 4-byte aligned only
  ECO_CHECK_CUDA(cudaDeviceSynchronize());
}

// ---- the forward -------------------------------------------------------------------------------

// Multiples of 16: the FP8 GEMM on sm_89+. Its output must be the FP8 GEMM's on the CPU
// quantizer's activation codes, bit for bit (same plan key, so the same cuBLASLt algorithm; the
// same route: OUTER_VEC on sm_90+, the unit-scaled GEMM + scaling kernel on sm_89).
TEST(GpuQuantizedLinear, ForwardRunsTheFp8GemmOnMultiplesOf16AndMatchesCpu) {
  ECO_REQUIRE_GPU();
  auto gpu = make_cuda_backend();
  auto cpu = make_cpu_backend();
  cuda::GemmEngine engine;
  const bool fp8 = engine.compute_capability() >= 89;
  if (!fp8) std::printf("  sm_%d: no FP8 GEMM; checking the emulation instead\n",
                        engine.compute_capability());
  uint64_t seed = 1000;
  for (const LinearShape& s : {LinearShape{16, 16, 16}, LinearShape{64, 256, 768},
                               LinearShape{128, 1024, 512}, LinearShape{48, 3072, 64}})
    for (bool with_bias : {false, true}) {
      HostQuantized hq(QFormat::E4M3, Granularity::PerRow, s.OC, s.C, ++seed);
      char what[96];
      std::snprintf(what, sizeof what, "N=%d C=%d OC=%d bias=%d", s.N, s.C, s.OC, int(with_bias));
      const ForwardRun r =
          run_forward(*gpu, *cpu, hq, s, ActCast::E4M3Row, with_bias, ++seed, what);
      const auto got = download<uint16_t>(*gpu, r.out);
      const size_t n_out = size_t(s.N) * s.OC;
      if (fp8) {
        // The CPU quantizer's activation codes through the FP8 GEMM directly.
        const auto x = bits_to_floats(download<uint16_t>(*gpu, r.x));
        std::vector<uint8_t> codes(x.size());
        std::vector<float> scales(size_t(s.N));
        QTensor q = qtensor_view(QFormat::E4M3, Granularity::PerRow, s.N, s.C, codes.data(),
                                 scales.data());
        quantize(x.data(), q, Rounding::RTN, 0, 0, 0);
        const auto d_codes = gputest::to_device(codes), d_scales = gputest::to_device(scales);
        cuda::DeviceBuffer d_out(2 * n_out);
        gputest::poison(d_out);
        engine.matmul_forward_fp8(d_out.get<bf16>(), d_codes.get<uint8_t>(), d_scales.get<float>(),
                                  r.w.codes.as<uint8_t>(), r.w.scales.as<float>(),
                                  with_bias ? r.bias.as<float>() : nullptr, s.N, s.C, s.OC,
                                  Granularity::PerRow);
        ECO_CHECK_CUDA(cudaDeviceSynchronize());
        EXPECT_EQ(got, gputest::to_host<uint16_t>(d_out, n_out)) << what << ": not the FP8 GEMM";
      } else {
        const Tensor cast = poisoned_bf16(*gpu, {s.N, s.C});
        const Tensor wd = gpu->alloc("wd", {s.OC, s.C}, DType::F32, MemCategory::Workspace);
        const Tensor out = poisoned_bf16(*gpu, {s.N, s.OC});
        gpu->cast_activations(cast, r.x, s.N, s.C, ActCast::E4M3Row);
        gpu->dequantize(wd, r.w);
        gpu->matmul_forward(out, cast, wd, r.bias, s.N, s.C, s.OC);
        EXPECT_EQ(got, download<uint16_t>(*gpu, out)) << what << ": not the emulation";
      }
    }
}

// What the FP8 GEMM cannot take runs the emulation of the Backend base on the GPU: the CUDA cast,
// dequantize, bf16 GEMM, bit for bit, and x_cast written in place as well as out of place.
TEST(GpuQuantizedLinear, OtherShapesAndFormatsFallBackToTheEmulation) {
  ECO_REQUIRE_GPU();
  auto gpu = make_cuda_backend();
  auto cpu = make_cpu_backend();
  struct Case {
    LinearShape s;
    QFormat f;
    Granularity g;
    ActCast act;
    const char* why;
  };
  const Case cases[] = {
      {{40, 48, 80}, QFormat::E4M3, Granularity::PerRow, ActCast::E4M3Row, "N % 16 != 0"},
      {{32, 40, 48}, QFormat::E4M3, Granularity::PerRow, ActCast::E4M3Row, "C % 16 != 0"},
      {{32, 64, 24}, QFormat::E4M3, Granularity::PerRow, ActCast::E4M3Row, "OC % 16 != 0"},
      {{7, 37, 5}, QFormat::E4M3, Granularity::PerRow, ActCast::E4M3Row, "ragged"},
      {{32, 64, 32}, QFormat::E4M3, Granularity::PerTensor, ActCast::E4M3Row, "per-tensor weight"},
      {{32, 64, 32}, QFormat::INT4, Granularity::PerTensor, ActCast::None, "INT4 weight-only"},
  };
  uint64_t seed = 2000;
  for (const Case& c : cases)
    for (bool in_place : {false, true}) {
      const LinearShape& s = c.s;
      HostQuantized hq(c.f, c.g, s.OC, s.C, ++seed);
      char what[96];
      std::snprintf(what, sizeof what, "%s N=%d C=%d OC=%d%s", c.why, s.N, s.C, s.OC,
                    in_place ? " in place" : "");
      const ForwardRun r = run_forward(*gpu, *cpu, hq, s, c.act, true, ++seed, what);
      const auto got = download<uint16_t>(*gpu, r.out);
      const auto got_cast = download<uint16_t>(*gpu, r.x_cast);

      // The same input through the emulation's three operations.
      const Tensor x2 = upload(*gpu, download<uint16_t>(*gpu, r.x), DType::BF16, {s.N, s.C});
      const Tensor cast = poisoned_bf16(*gpu, {s.N, s.C});
      const Tensor wd = gpu->alloc("wd", {s.OC, s.C}, DType::F32, MemCategory::Workspace);
      const Tensor out = poisoned_bf16(*gpu, {s.N, s.OC});
      gpu->cast_activations(cast, x2, s.N, s.C, c.act);
      gpu->dequantize(wd, r.w);
      gpu->matmul_forward(out, cast, wd, r.bias, s.N, s.C, s.OC);
      EXPECT_EQ(got, download<uint16_t>(*gpu, out)) << what;
      if (in_place) {  // x_cast aliasing x, as the model passes norm1 / norm2 / act
        const Tensor out2 = poisoned_bf16(*gpu, {s.N, s.OC});
        const Tensor wscratch =
            gpu->alloc("w_scratch", {s.OC, s.C}, DType::F32, MemCategory::Workspace);
        gpu->quantized_linear_forward(out2, x2, x2, r.w, wscratch, r.bias, s.N, s.C, s.OC, c.act);
        EXPECT_EQ(download<uint16_t>(*gpu, out2), got) << what;
        EXPECT_EQ(download<uint16_t>(*gpu, x2), got_cast) << what;
      }
    }
}

// In place on the FP8 path too (the model casts norm1, norm2 and the MLP activation in place).
TEST(GpuQuantizedLinear, Fp8ForwardInPlaceEqualsOutOfPlace) {
  ECO_REQUIRE_GPU();
  auto gpu = make_cuda_backend();
  const int N = 64, C = 128, OC = 96;
  HostQuantized hq(QFormat::E4M3, Granularity::PerRow, OC, C, 31);
  const QTensor w = hq.on(*gpu);
  const auto xb = to_bf16_bits(random_activations(N, C, 32));
  const Tensor bias = upload(*gpu, gputest::randn(size_t(OC), 33), DType::F32, {OC});
  const Tensor scratch = gpu->alloc("w_scratch", {OC, C}, DType::F32, MemCategory::Workspace);
  const Tensor x = upload(*gpu, xb, DType::BF16, {N, C});
  const Tensor cast = poisoned_bf16(*gpu, {N, C});
  const Tensor out = poisoned_bf16(*gpu, {N, OC});
  gpu->quantized_linear_forward(out, cast, x, w, scratch, bias, N, C, OC, ActCast::E4M3Row);
  const Tensor x2 = upload(*gpu, xb, DType::BF16, {N, C});
  const Tensor out2 = poisoned_bf16(*gpu, {N, OC});
  gpu->quantized_linear_forward(out2, x2, x2, w, scratch, bias, N, C, OC, ActCast::E4M3Row);
  EXPECT_EQ(download<uint16_t>(*gpu, out2), download<uint16_t>(*gpu, out));
  EXPECT_EQ(download<uint16_t>(*gpu, x2), download<uint16_t>(*gpu, cast));
  EXPECT_EQ(download<uint16_t>(*gpu, x), xb) << "out of place must not touch x";
}

// ---- the backward -----------------------------------------------------------------------------

// The codes decoded straight to bf16 equal the fp32 dequantization rounded once, for every
// format and granularity.
TEST(GpuConvert, DequantizeBf16IsTheFp32DequantizationRoundedOnce) {
  ECO_REQUIRE_GPU();
  uint64_t seed = 3000;
  for (QFormat f : {QFormat::E4M3, QFormat::E5M2, QFormat::INT8, QFormat::INT4})
    for (Granularity g : {Granularity::PerRow, Granularity::PerTensor, Granularity::Block128}) {
      const int rows = 130, cols = 258;
      HostQuantized hq(f, g, rows, cols, ++seed);
      const auto want = to_bf16_bits(hq.dequantized());
      const auto d_codes = gputest::to_device(hq.codes), d_scales = gputest::to_device(hq.scales);
      cuda::DeviceBuffer d_out(2 * want.size());
      gputest::poison(d_out);
      ECO_CHECK_CUDA(cuda::dequantize_bf16(d_out.get<bf16>(), d_codes.get<uint8_t>(),
                                           d_scales.get<float>(), rows, cols, f, g));
      EXPECT_EQ(gputest::to_host<uint16_t>(d_out, want.size()), want)
          << qformat_name(f) << " " << granularity_name(g);
    }
}

// dinp, dw, dbias accumulate exactly as matmul_backward on the dequantized fp32 weight does.
TEST(GpuQuantizedLinear, BackwardIsTheBf16GemmOnTheDequantizedWeight) {
  ECO_REQUIRE_GPU();
  auto gpu = make_cuda_backend();
  uint64_t seed = 4000;
  for (const LinearShape& s : {LinearShape{32, 64, 48}, LinearShape{40, 48, 80}}) {
    const int N = s.N, C = s.C, OC = s.OC;
    HostQuantized hq(QFormat::E4M3, Granularity::PerRow, OC, C, ++seed);
    const QTensor w = hq.on(*gpu);
    const auto dout = to_bf16_bits(gputest::randn(size_t(N) * OC, ++seed));
    const auto x = to_bf16_bits(gputest::randn(size_t(N) * C, ++seed));
    const auto dinp0 = to_bf16_bits(gputest::randn(size_t(N) * C, ++seed));
    const auto dw0 = gputest::randn(size_t(OC) * C, ++seed);
    const auto db0 = gputest::randn(size_t(OC), ++seed);
    const Tensor d_out = upload(*gpu, dout, DType::BF16, {N, OC});
    const Tensor d_x = upload(*gpu, x, DType::BF16, {N, C});
    struct Grads {
      Tensor dinp, dw, db;
    };
    const auto fresh = [&] {
      return Grads{upload(*gpu, dinp0, DType::BF16, {N, C}), upload(*gpu, dw0, DType::F32, {OC, C}),
                   upload(*gpu, db0, DType::F32, {OC})};
    };
    const Grads a = fresh(), b = fresh();
    const Tensor scratch = gpu->alloc("w_scratch", {OC, C}, DType::F32, MemCategory::Workspace);
    gpu->quantized_linear_backward(a.dinp, a.dw, a.db, d_out, d_x, w, scratch, N, C, OC);
    gpu->dequantize(scratch, w);
    gpu->matmul_backward(b.dinp, b.dw, b.db, d_out, d_x, scratch, N, C, OC);
    const auto what = ::testing::Message() << N << "x" << C << "x" << OC;
    EXPECT_EQ(download<uint16_t>(*gpu, a.dinp), download<uint16_t>(*gpu, b.dinp)) << what;
    EXPECT_EQ(download<uint32_t>(*gpu, a.dw), download<uint32_t>(*gpu, b.dw)) << what;
    EXPECT_EQ(download<uint32_t>(*gpu, a.db), download<uint32_t>(*gpu, b.db)) << what;
  }
}

}  // namespace
}  // namespace eco
