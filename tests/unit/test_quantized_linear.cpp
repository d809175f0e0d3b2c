// The linear layer with a quantized weight through the Backend interface on the CPU: its default
// forward and backward are exactly the emulation the model ran before the operation existed
// (cast_activations, dequantize, matmul_forward / matmul_backward on the dequantized weight).
// (ParamStore's linear-weight view, which hands the model's quantized weights to these
// operations, is tested in test_treatments.cpp.)
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/rng.h"
#include "base/backend.h"
#include "kernels/cpu/quantize.h"
#include "base/treatment.h"

namespace eco {
namespace {

std::vector<float> randn(size_t n, uint64_t seed, float std = 1.0f) {
  Rng r(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = float(std * r.normal());
  return v;
}

Tensor upload(Backend& be, const std::vector<float>& h, std::vector<int64_t> shape) {
  Tensor t = be.alloc("test", std::move(shape), DType::F32, MemCategory::Workspace);
  be.copy_from_host(t, h.data());
  return t;
}

std::vector<float> download(Backend& be, const Tensor& t) {
  std::vector<float> h(size_t(t.numel()));
  be.copy_to_host(h.data(), t);
  return h;
}

// Bit equality (NaNs included).
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// A (OC, C) weight quantized by the reference quantizer into backend tensors.
QTensor quantized_weight(Backend& be, QFormat f, Granularity g, int OC, int C, uint64_t seed) {
  QTensor q;
  q.format = f;
  q.granularity = g;
  q.rows = OC;
  q.cols = C;
  q.codes = be.alloc("codes", {code_bytes(f, int64_t(OC) * C)}, DType::U8, MemCategory::QuantCodes);
  q.scales = be.alloc("scales", {num_scales(g, OC, C)}, DType::F32, MemCategory::Scales);
  be.quantize(q, upload(be, randn(size_t(OC) * C, seed, 0.05f), {OC, C}), Rounding::RTN, 0, 0, 0);
  return q;
}

struct Recipe {
  QFormat f;
  Granularity g;
  ActCast act;
};
// The storage + cast pairs the quantized treatments use (fp8-*, int4-*).
const Recipe kRecipes[] = {{QFormat::E4M3, Granularity::PerRow, ActCast::E4M3Row},
                           {QFormat::INT4, Granularity::PerTensor, ActCast::None}};

TEST(QuantizedLinear, DefaultForwardIsTheCastDequantizeMatmulEmulationBitForBit) {
  auto be = make_cpu_backend();
  const int N = 6, C = 40, OC = 24;
  uint64_t seed = 10;
  for (const Recipe& r : kRecipes)
    for (bool in_place : {false, true})
      for (bool with_bias : {false, true}) {
        const QTensor w = quantized_weight(*be, r.f, r.g, OC, C, ++seed);
        const auto xh = randn(size_t(N) * C, ++seed, 3.0f);
        const Tensor bias = with_bias ? upload(*be, randn(size_t(OC), ++seed), {OC}) : Tensor{};

        // The emulation, as Transformer::linear_forward ran it before.
        const Tensor x_old = upload(*be, xh, {N, C});
        const Tensor cast_old = in_place ? x_old : upload(*be, randn(size_t(N) * C, 1), {N, C});
        const Tensor w_old = be->alloc("w", {OC, C}, DType::F32, MemCategory::Workspace);
        const Tensor out_old = be->alloc("out", {N, OC}, DType::F32, MemCategory::Workspace);
        be->cast_activations(cast_old, x_old, N, C, r.act);
        be->dequantize(w_old, w);
        be->matmul_forward(out_old, cast_old, w_old, bias, N, C, OC);

        const Tensor x = upload(*be, xh, {N, C});
        const Tensor cast = in_place ? x : upload(*be, randn(size_t(N) * C, 2), {N, C});
        const Tensor scratch = be->alloc("w_scratch", {OC, C}, DType::F32, MemCategory::Workspace);
        const Tensor out = upload(*be, randn(size_t(N) * OC, 3), {N, OC});  // overwritten
        be->quantized_linear_forward(out, cast, x, w, scratch, bias, N, C, OC, r.act);

        const auto what = ::testing::Message() << qformat_name(r.f) << " in_place " << in_place
                                                << " bias " << with_bias;
        EXPECT_TRUE(same_bits(download(*be, out), download(*be, out_old))) << what;
        EXPECT_TRUE(same_bits(download(*be, cast), download(*be, cast_old))) << what;
        if (!in_place) {
          EXPECT_TRUE(same_bits(download(*be, x), xh)) << what << ": x changed";
        }
      }
}

TEST(QuantizedLinear, DefaultBackwardIsMatmulBackwardOnTheDequantizedWeightBitForBit) {
  auto be = make_cpu_backend();
  const int N = 6, C = 40, OC = 24;
  uint64_t seed = 20;
  for (const Recipe& r : kRecipes) {
    const QTensor w = quantized_weight(*be, r.f, r.g, OC, C, ++seed);
    const Tensor dout = upload(*be, randn(size_t(N) * OC, ++seed), {N, OC});
    const Tensor x = upload(*be, randn(size_t(N) * C, ++seed), {N, C});
    // Non-zero starting gradients: every backward accumulates.
    const auto dinp0 = randn(size_t(N) * C, ++seed), dw0 = randn(size_t(OC) * C, ++seed),
               db0 = randn(size_t(OC), ++seed);
    const Tensor dinp_old = upload(*be, dinp0, {N, C}), dw_old = upload(*be, dw0, {OC, C}),
                 db_old = upload(*be, db0, {OC});
    const Tensor w_old = be->alloc("w", {OC, C}, DType::F32, MemCategory::Workspace);
    be->dequantize(w_old, w);
    be->matmul_backward(dinp_old, dw_old, db_old, dout, x, w_old, N, C, OC);

    const Tensor dinp = upload(*be, dinp0, {N, C}), dw = upload(*be, dw0, {OC, C}),
                 db = upload(*be, db0, {OC});
    const Tensor scratch = be->alloc("w_scratch", {OC, C}, DType::F32, MemCategory::Workspace);
    be->quantized_linear_backward(dinp, dw, db, dout, x, w, scratch, N, C, OC);
    EXPECT_TRUE(same_bits(download(*be, dinp), download(*be, dinp_old))) << qformat_name(r.f);
    EXPECT_TRUE(same_bits(download(*be, dw), download(*be, dw_old))) << qformat_name(r.f);
    EXPECT_TRUE(same_bits(download(*be, db), download(*be, db_old))) << qformat_name(r.f);
  }
}

}  // namespace
}  // namespace eco
