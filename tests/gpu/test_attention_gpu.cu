// GPU tests: causal attention forward/backward on the three CUDA paths, the flash kernel
// (attention.cuh), the tensor-core GEMMs (attention_gemm.cuh) and the mma.sync kernels
// (attention_mma.cuh), against the CPU twin eco::cpu::attention_forward/backward<float> run on
// the same bf16-rounded inputs.
// Tolerances: the GPU stores out and dqkv in bf16 (8 significant bits: rounding alone gives a
// relative-norm error of ~1.6e-3) and computes in fp32 in another order than BLAS, and backward
// takes D = rowsum(dout * out) from the bf16 out (as FlashAttention does): forward 5e-3,
// backward 1e-2. The GEMM path also rounds P and dS to bf16 for the GEMMs that read them (as
// FlashAttention does; ~1e-3 relative each, independent across elements): the same bounds, and
// the mma path rounds the same operands (P for P V, P and dS in the backward): the same again.
// lse is fp32 throughout: checked against float64 to 2e-5 (absolute; values are O(log T), the
// fp32 dot products of hs <= 128 terms err by ~1e-6).
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "attention_shape.h"
#include "gpu_test.h"
#include "base/math/bf16.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/attention_gemm.cuh"
#include "kernels/cuda/attention_mma.cuh"
#include "kernels/cuda/gemm.h"
#include "base/backend.h"

namespace eco {
namespace {

using bf16 = __nv_bfloat16;
using gputest::poison;
using gputest::randn;
using gputest::rel_err;
using gputest::to_device;
using gputest::to_host;

// Flash kernel: ragged T (1, 7, 64, 129: one key, under one tile, whole tiles, one past),
// NH in {1, 3, 12}, hs in {16, 64} and the 128 limit.
const std::vector<AttnShape> kFlashShapes = {{1, 1, 1, 16},   {2, 7, 3, 16},   {1, 64, 12, 64},
                                             {2, 129, 3, 64}, {1, 129, 1, 16}, {2, 33, 2, 128}};
// GEMM path: T = 1 (one key), 7 and 100 (score rows padded to 8 and 104), 257 (one past a
// multiple of 128 and of the row kernels' 128-column step), 1024 (GPT-2); hs 64, 128 and 24 (a
// multiple of 8, not of 16).
const std::vector<AttnShape> kGemmShapes = {{1, 1, 2, 64},   {2, 7, 3, 64},    {2, 100, 2, 64},
                                            {1, 257, 3, 64}, {1, 1024, 2, 64}, {2, 129, 2, 128},
                                            {2, 33, 3, 24}};
// mma path: T = 1, 17 (one past a warp's 16 rows), 64 (one whole 64-row tile), 65 and 100 (a
// ragged second tile), 257 (one past 4 tiles), 1024 (GPT-2); hs 32, 64, 128 (128 also streams
// the backward in 32-row steps, so its diagonal spans two steps).
const std::vector<AttnShape> kMmaShapes = {{1, 1, 2, 64},   {2, 17, 3, 32},  {1, 64, 2, 64},
                                           {2, 100, 2, 64}, {1, 257, 3, 64}, {1, 1024, 2, 64},
                                           {2, 65, 2, 32},  {1, 100, 2, 128}, {2, 257, 1, 128},
                                           {1, 1, 1, 128}};

using gputest::bf16_values;
using gputest::Bf16Data;
using gputest::random_bf16;

bf16* bf16_ptr(const cuda::DeviceBuffer& d) { return d.get<bf16>(); }

// One implementation of the attention.cuh contract under test (asynchronous on stream 0).
class AttentionPath {
 public:
  virtual ~AttentionPath() = default;
  virtual void forward(bf16* out, float* lse, const bf16* qkv, const AttnShape& s) = 0;
  virtual void backward(bf16* dqkv, float* D, const bf16* dout, const bf16* qkv, const bf16* out,
                        const float* lse, const AttnShape& s) = 0;
};

// The flash kernel and the mma path: a plain shape through the multi-head entry points (over C,
// NH), any other (grouped-query, windowed, own query scalar) through the grouped-query ones.
class FlashPath final : public AttentionPath {
 public:
  void forward(bf16* out, float* lse, const bf16* qkv, const AttnShape& s) override {
    if (s.plain())
      ECO_CHECK_CUDA(cuda::attention_forward(out, lse, qkv, s.B, s.T, s.C(), s.NH));
    else
      ECO_CHECK_CUDA(cuda::attention_forward_gqa(out, lse, qkv, s.B, s.T, s.attention()));
  }
  void backward(bf16* dqkv, float* D, const bf16* dout, const bf16* qkv, const bf16* out,
                const float* lse, const AttnShape& s) override {
    if (s.plain())
      ECO_CHECK_CUDA(
          cuda::attention_backward(dqkv, D, dout, qkv, out, lse, s.B, s.T, s.C(), s.NH));
    else
      ECO_CHECK_CUDA(cuda::attention_backward_gqa(dqkv, D, dout, qkv, out, lse, s.B, s.T,
                                                  s.attention()));
  }
};

// The GEMM path with its own engine; the score scratch is poisoned before every call, so that
// nothing can rely on a previous call's S or P (or on zeros it did not write).
class GemmPath final : public AttentionPath {
 public:
  void forward(bf16* out, float* lse, const bf16* qkv, const AttnShape& s) override {
    void* w = scratch(s);
    cuda::attention_gemm_forward(gemm_, out, lse, qkv, w, scratch_.bytes(), s.B, s.T, s.C(), s.NH);
  }
  void backward(bf16* dqkv, float* D, const bf16* dout, const bf16* qkv, const bf16* out,
                const float* lse, const AttnShape& s) override {
    void* w = scratch(s);
    cuda::attention_gemm_backward(gemm_, dqkv, D, w, scratch_.bytes(), dout, qkv, out, lse, s.B,
                                  s.T, s.C(), s.NH);
  }

 private:
  void* scratch(const AttnShape& s) {
    const size_t bytes = cuda::attention_gemm_scratch_bytes(s.T, s.NH);
    if (scratch_.bytes() < bytes) scratch_ = cuda::DeviceBuffer(bytes);
    poison(scratch_);
    return scratch_.get();
  }
  cuda::GemmEngine gemm_;
  cuda::DeviceBuffer scratch_;
};

class MmaPath final : public AttentionPath {
 public:
  void forward(bf16* out, float* lse, const bf16* qkv, const AttnShape& s) override {
    if (s.plain())
      cuda::attention_mma_forward(out, lse, qkv, s.B, s.T, s.C(), s.NH);
    else
      cuda::attention_mma_forward_gqa(out, lse, qkv, s.B, s.T, s.attention());
  }
  void backward(bf16* dqkv, float* D, const bf16* dout, const bf16* qkv, const bf16* out,
                const float* lse, const AttnShape& s) override {
    if (s.plain())
      cuda::attention_mma_backward(dqkv, D, dout, qkv, out, lse, s.B, s.T, s.C(), s.NH);
    else
      cuda::attention_mma_backward_gqa(dqkv, D, dout, qkv, out, lse, s.B, s.T, s.attention());
  }
};

// lse[b, h, t] = log sum over the keys u query t sees of exp(q_t . k_u q_scalar^-1/2), in
// float64 (query head h reads kv head h / (NH / KVH)).
std::vector<double> reference_lse(const std::vector<float>& qkv, const AttnShape& s) {
  const AttentionShape a = s.attention();
  const size_t ld = size_t(s.qkv_width());
  std::vector<double> lse(s.n_lse());
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.NH; ++h)
      for (int t = 0; t < s.T; ++t) {
        const float* q = &qkv[(size_t(b) * s.T + t) * ld + size_t(a.q_col(h))];
        const int u0 = attention_first_key(t, a.window);
        std::vector<double> sc(size_t(t - u0) + 1);
        double mx = -INFINITY;
        for (int u = u0; u <= t; ++u) {
          const float* k = &qkv[(size_t(b) * s.T + u) * ld + size_t(a.k_col(h / a.group()))];
          double dot = 0;
          for (int d = 0; d < s.hs; ++d) dot += double(q[d]) * k[d];
          sc[size_t(u - u0)] = dot / std::sqrt(double(a.q_scalar));
          mx = std::max(mx, sc[size_t(u - u0)]);
        }
        double sum = 0;
        for (double x : sc) sum += std::exp(x - mx);
        lse[(size_t(b) * s.NH + h) * s.T + t] = mx + std::log(sum);
      }
  return lse;
}

// The CPU twin's forward (out, probabilities) and backward (dqkv +=) for the shape.
void cpu_forward(float* out, float* att, const float* qkv, const AttnShape& s) {
  const AttentionShape a = s.attention();
  cpu::attention_forward_gqa(out, att, qkv, s.B, s.T, a.NH, a.KVH, a.hd, a.window, a.q_scalar);
}
void cpu_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                  const float* att, const AttnShape& s) {
  const AttentionShape a = s.attention();
  cpu::attention_backward_gqa(dqkv, scratch, dout, qkv, att, s.B, s.T, a.NH, a.KVH, a.hd,
                              a.window, a.q_scalar);
}

// out within 5e-3 of the CPU twin, lse within 2e-5 of float64; out and lse poisoned first.
void expect_forward_matches_cpu(AttentionPath& path, const std::vector<AttnShape>& shapes) {
  for (const auto& s : shapes) {
    SCOPED_TRACE(s.str());
    const Bf16Data qkv = random_bf16(s.n_qkv(), 100 + s.T + s.hs, 1.0f);
    std::vector<float> ref(s.n_out()), att(s.n_att());
    cpu_forward(ref.data(), att.data(), qkv.values.data(), s);

    auto d_qkv = to_device(qkv.bits);
    cuda::DeviceBuffer d_out(s.n_out() * 2), d_lse(s.n_lse() * sizeof(float));
    poison(d_out);
    poison(d_lse);
    path.forward(bf16_ptr(d_out), d_lse.get<float>(), bf16_ptr(d_qkv), s);
    ECO_CHECK_CUDA(cudaDeviceSynchronize());

    EXPECT_LT(rel_err(bf16_values(to_host<uint16_t>(d_out, s.n_out())), ref), 5e-3);
    const auto lse = to_host<float>(d_lse, s.n_lse());
    const auto lse_ref = reference_lse(qkv.values, s);
    for (size_t i = 0; i < lse.size(); ++i) ASSERT_NEAR(lse[i], lse_ref[i], 2e-5) << "lse " << i;
  }
}

// fwd's out and lse, then bwd's gradient accumulated into a non-zero dqkv, against the CPU twin
// (1e-2, on dqkv and on the gradient alone); bwd's D scratch poisoned first.
void expect_backward_matches_cpu(AttentionPath& fwd, AttentionPath& bwd,
                                 const std::vector<AttnShape>& shapes) {
  for (const auto& s : shapes) {
    SCOPED_TRACE(s.str());
    const size_t n_qkv = s.n_qkv();
    const Bf16Data qkv = random_bf16(n_qkv, 200 + s.T + s.hs, 1.0f);
    const Bf16Data dout = random_bf16(s.n_out(), 300 + s.T + s.hs, 1.0f);
    // dqkv starts non-zero (backward accumulates), small next to the gradient so that its bf16
    // rounding does not hide gradient errors.
    const Bf16Data dqkv0 = random_bf16(n_qkv, 400 + s.T + s.hs, 0.05f);

    auto d_qkv = to_device(qkv.bits), d_dout = to_device(dout.bits);
    cuda::DeviceBuffer d_out(s.n_out() * 2), d_lse(s.n_lse() * sizeof(float)),
        d_scratch(s.n_lse() * sizeof(float));
    fwd.forward(bf16_ptr(d_out), d_lse.get<float>(), bf16_ptr(d_qkv), s);

    std::vector<float> out(s.n_out()), att(s.n_att()), scratch(s.n_att()), ref = dqkv0.values;
    cpu_forward(out.data(), att.data(), qkv.values.data(), s);
    cpu_backward(ref.data(), scratch.data(), dout.values.data(), qkv.values.data(), att.data(), s);

    auto d_dqkv = to_device(dqkv0.bits);
    poison(d_scratch);
    bwd.backward(bf16_ptr(d_dqkv), d_scratch.get<float>(), bf16_ptr(d_dout), bf16_ptr(d_qkv),
                 bf16_ptr(d_out), d_lse.get<float>(), s);
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
    // The same per part (q, k, v) and over the last 8 tokens of each sequence (the ragged tile:
    // a missed key or a wrong mask there is diluted in the whole). Fewer elements: 2e-2.
    const int ld = s.qkv_width();
    const auto select = [&](auto keep) {
      std::vector<float> a, b;
      for (int bi = 0; bi < s.B; ++bi)
        for (int t = 0; t < s.T; ++t)
          for (int j = 0; j < ld; ++j)
            if (keep(t, j)) {
              const size_t i = (size_t(bi) * s.T + t) * ld + j;
              a.push_back(g_got[i]);
              b.push_back(g_ref[i]);
            }
      return rel_err(a, b);
    };
    // The part (q 0, k 1, v 2) of column j of a qkv row.
    const auto part_of = [&](int j) {
      return j < s.C() ? 0 : j < (s.NH + s.kv_heads()) * s.hs ? 1 : 2;
    };
    for (int part = 0; part < 3; ++part)
      EXPECT_LT(select([&](int, int j) { return part_of(j) == part; }), 2e-2)
          << "part " << "qkv"[part];
    EXPECT_LT(select([&](int t, int) { return t >= s.T - 8; }), 2e-2) << "last 8 tokens";
  }
}

// Two identical forward + backward runs give the same bits (out, lse, dqkv).
void expect_deterministic(AttentionPath& path, const AttnShape& s) {
  const Bf16Data qkv = random_bf16(s.n_qkv(), 501, 1.0f), dout = random_bf16(s.n_out(), 502, 1.0f),
                 dqkv0 = random_bf16(s.n_qkv(), 503, 0.05f);
  auto d_qkv = to_device(qkv.bits), d_dout = to_device(dout.bits);
  cuda::DeviceBuffer d_out(s.n_out() * 2), d_lse(s.n_lse() * sizeof(float)),
      d_scratch(s.n_lse() * sizeof(float));
  std::vector<uint16_t> outs[2], grads[2];
  std::vector<float> lses[2];
  for (int run = 0; run < 2; ++run) {
    poison(d_out);
    poison(d_lse);
    auto d_dqkv = to_device(dqkv0.bits);
    path.forward(bf16_ptr(d_out), d_lse.get<float>(), bf16_ptr(d_qkv), s);
    path.backward(bf16_ptr(d_dqkv), d_scratch.get<float>(), bf16_ptr(d_dout), bf16_ptr(d_qkv),
                  bf16_ptr(d_out), d_lse.get<float>(), s);
    ECO_CHECK_CUDA(cudaDeviceSynchronize());
    outs[run] = to_host<uint16_t>(d_out, s.n_out());
    lses[run] = to_host<float>(d_lse, s.n_lse());
    grads[run] = to_host<uint16_t>(d_dqkv, s.n_qkv());
  }
  EXPECT_EQ(outs[0], outs[1]);
  EXPECT_EQ(0, std::memcmp(lses[0].data(), lses[1].data(), s.n_lse() * sizeof(float)));
  EXPECT_EQ(grads[0], grads[1]);
}

// ---- the flash kernel ---------------------------------------------------------------------------

TEST(GpuAttention, ForwardMatchesCpuTwin) {
  ECO_REQUIRE_GPU();
  FlashPath flash;
  expect_forward_matches_cpu(flash, kFlashShapes);
}

TEST(GpuAttention, BackwardAccumulatesCpuTwinsGradient) {
  ECO_REQUIRE_GPU();
  FlashPath flash;
  expect_backward_matches_cpu(flash, flash, kFlashShapes);
}

TEST(GpuAttention, ForwardAndBackwardAreDeterministic) {
  ECO_REQUIRE_GPU();
  FlashPath flash;
  expect_deterministic(flash, {2, 129, 3, 64});
}

TEST(GpuAttention, RejectsHeadSizeAbove256AndRaggedHeads) {
  ECO_REQUIRE_GPU();
  cuda::DeviceBuffer buf(1 << 20);
  auto* p = bf16_ptr(buf);
  float* f = buf.get<float>();
  EXPECT_EQ(cuda::attention_forward(p, f, p, 1, 4, 2 * 257, 2), cudaErrorInvalidValue);  // hs 257
  EXPECT_EQ(cuda::attention_forward(p, f, p, 1, 4, 10, 3), cudaErrorInvalidValue);       // C % NH
  EXPECT_EQ(cuda::attention_backward(p, f, p, p, p, f, 1, 0, 64, 1), cudaErrorInvalidValue);  // T 0
}

// ---- the tensor-core GEMM path ------------------------------------------------------------------

TEST(GpuAttentionGemm, ForwardMatchesCpuTwin) {
  ECO_REQUIRE_GPU();
  GemmPath gemm;
  expect_forward_matches_cpu(gemm, kGemmShapes);
}

TEST(GpuAttentionGemm, BackwardAccumulatesCpuTwinsGradient) {
  ECO_REQUIRE_GPU();
  GemmPath gemm;
  expect_backward_matches_cpu(gemm, gemm, kGemmShapes);
}

// The backend may run a forward on one path and its backward on the other: both save the same
// lse (flash forward -> GEMM backward, and the reverse).
TEST(GpuAttentionGemm, BackwardTakesTheFlashKernelsLseAndViceVersa) {
  ECO_REQUIRE_GPU();
  FlashPath flash;
  GemmPath gemm;
  const std::vector<AttnShape> shapes = {{2, 7, 3, 64}, {1, 257, 2, 64}};
  expect_backward_matches_cpu(flash, gemm, shapes);
  expect_backward_matches_cpu(gemm, flash, shapes);
}

TEST(GpuAttentionGemm, ForwardAndBackwardAreDeterministic) {
  ECO_REQUIRE_GPU();
  GemmPath gemm;
  expect_deterministic(gemm, {2, 257, 3, 64});
}

// Host-only (runs without a GPU): the conditions the backend chooses the path by.
TEST(GpuAttentionGemm, TakesHeadSizesOfMultiplesOf8WithAlignedBuffersOnly) {
  alignas(16) static char buf[64];
  const void* p = buf;
  EXPECT_TRUE(cuda::attention_gemm_supported(8, 1024, 768, 12, {p, p}));  // GPT-2 124M
  EXPECT_TRUE(cuda::attention_gemm_supported(1, 1, 128, 1, {p}));
  EXPECT_FALSE(cuda::attention_gemm_supported(2, 64, 36, 3, {p}));             // hs 12
  EXPECT_FALSE(cuda::attention_gemm_supported(2, 64, 10, 3, {p}));             // C % NH
  EXPECT_FALSE(cuda::attention_gemm_supported(2, 0, 768, 12, {p}));            // T 0
  EXPECT_FALSE(cuda::attention_gemm_supported(2, 64, 768, 12, {p, buf + 2}));  // misaligned
  EXPECT_FALSE(cuda::attention_gemm_supported(2, 64, 768, 12, {p, nullptr}));
  // Score rows padded to 8 elements: 16-byte aligned in bf16 and fp32.
  EXPECT_EQ(cuda::attention_gemm_ld(1), 8);
  EXPECT_EQ(cuda::attention_gemm_ld(100), 104);
  EXPECT_EQ(cuda::attention_gemm_ld(1024), 1024);
  EXPECT_EQ(cuda::attention_gemm_scratch_bytes(1024, 12), size_t(12) * 1024 * 1024 * 6);
}

TEST(GpuAttentionGemm, RejectsUnsupportedCallsNamingTheShapes) {
  ECO_REQUIRE_GPU();
  cuda::GemmEngine gemm;
  cuda::DeviceBuffer buf(1 << 20);
  auto* p = bf16_ptr(buf);
  float* f = buf.get<float>();
  std::string hs12 = "no error", small_scratch = "no error";
  try {
    cuda::attention_gemm_forward(gemm, p, f, p, buf.get(), buf.bytes(), 1, 4, 36, 3);  // hs 12
  } catch (const std::exception& e) {  // eco::Error
    hs12 = e.what();
  }
  try {  // T 1024, NH 12 need 72 MiB of scratch
    cuda::attention_gemm_backward(gemm, p, f, buf.get(), buf.bytes(), p, p, p, f, 1, 1024, 768, 12);
  } catch (const std::exception& e) {  // eco::Error
    small_scratch = e.what();
  }
  EXPECT_NE(hs12.find("B=1 T=4 C=36 NH=3: the GEMM path needs"), std::string::npos) << hs12;
  EXPECT_NE(small_scratch.find("B=1 T=1024 C=768 NH=12: scratch of"), std::string::npos)
      << small_scratch;
}

// ---- the backend's choice -----------------------------------------------------------------------

// Bytes the backend's ledger holds for the GEMM path's score scratch (cuda_backend.cpp's name).
uint64_t gemm_scratch_in_ledger(const Backend& be) {
  uint64_t bytes = 0;
  for (const auto& e : be.ledger().entries())
    if (e.name.rfind("attention scores (GEMM path)", 0) == 0) bytes += e.bytes;
  return bytes;
}

// Runs the backend's attention forward and backward on random inputs with out poisoned; returns
// whether every element of out and dqkv came back finite.
bool backend_attention_writes_finite(Backend& be, int B, int T, int C, int NH) {
  const int64_t N = int64_t(B) * T;
  const auto bf16_tensor = [&](const char* name, int64_t cols, uint64_t seed) {
    Tensor t = be.alloc(name, {N, cols}, DType::BF16, MemCategory::Workspace);
    be.copy_from_host(t, random_bf16(size_t(N * cols), seed, 1.0f).bits.data());
    return t;
  };
  const Tensor qkv = bf16_tensor("qkv", 3 * C, 11), dout = bf16_tensor("dout", C, 12);
  const Tensor out = be.alloc("out", {N, C}, DType::BF16, MemCategory::Workspace);
  const Tensor dqkv = be.alloc("dqkv", {N, 3 * C}, DType::BF16, MemCategory::Workspace);
  const auto state = be.attention_state_shape(B, NH, T);
  const Tensor lse = be.alloc("lse", state, DType::F32, MemCategory::Activations);
  const Tensor scratch = be.alloc("D", state, DType::F32, MemCategory::Workspace);
  be.copy_from_host(out, std::vector<uint16_t>(size_t(N * C), 0xFFFF).data());  // NaN
  const AttentionShape a = AttentionShape::multi_head(NH, C / NH);
  be.attention_forward(out, lse, qkv, B, T, a);
  be.attention_backward(dqkv, scratch, dout, qkv, out, lse, B, T, a);
  const auto all_finite = [](const std::vector<float>& v) {
    return std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); });
  };
  return all_finite(to_host_floats(be, out)) && all_finite(to_host_floats(be, dqkv));
}

TEST(GpuAttentionGemm, BackendTakesTheGemmPathForGpt2Shape) {
  ECO_REQUIRE_GPU();
  auto be = make_cuda_backend();
  EXPECT_TRUE(backend_attention_writes_finite(*be, 8, 1024, 768, 12));
  EXPECT_EQ(gemm_scratch_in_ledger(*be), cuda::attention_gemm_scratch_bytes(1024, 12));
}

TEST(GpuAttentionGemm, BackendFallsBackToTheFlashKernelForHeadSize12) {
  ECO_REQUIRE_GPU();
  auto be = make_cuda_backend();
  EXPECT_TRUE(backend_attention_writes_finite(*be, 2, 64, 36, 3));
  EXPECT_EQ(gemm_scratch_in_ledger(*be), 0u);
}

// ---- the mma.sync path ----------------------------------------------------------------------

TEST(GpuAttentionMma, ForwardMatchesCpuTwin) {
  ECO_REQUIRE_GPU();
  MmaPath mma;
  expect_forward_matches_cpu(mma, kMmaShapes);
}

TEST(GpuAttentionMma, BackwardAccumulatesCpuTwinsGradient) {
  ECO_REQUIRE_GPU();
  MmaPath mma;
  expect_backward_matches_cpu(mma, mma, kMmaShapes);
}

// The same lse as both other paths, in both directions (the backend may mix them).
TEST(GpuAttentionMma, BackwardTakesTheOtherPathsLseAndViceVersa) {
  ECO_REQUIRE_GPU();
  FlashPath flash;
  GemmPath gemm;
  MmaPath mma;
  const std::vector<AttnShape> shapes = {{2, 7, 3, 64}, {1, 257, 2, 64}, {1, 100, 2, 128},
                                         {2, 65, 2, 32}};
  expect_backward_matches_cpu(flash, mma, shapes);
  expect_backward_matches_cpu(mma, flash, shapes);
  expect_backward_matches_cpu(gemm, mma, shapes);
  expect_backward_matches_cpu(mma, gemm, shapes);
}

TEST(GpuAttentionMma, ForwardAndBackwardAreDeterministic) {
  ECO_REQUIRE_GPU();
  MmaPath mma;
  expect_deterministic(mma, {2, 257, 3, 64});
  expect_deterministic(mma, {1, 1024, 12, 64});
  expect_deterministic(mma, {2, 129, 2, 128});
}

// Host-only (runs without a GPU): the conditions the backend chooses the path by.
TEST(GpuAttentionMma, TakesHeadSizes32_64_128_256WithAlignedBuffersOnly) {
  alignas(16) static char buf[64];
  const void* p = buf;
  EXPECT_TRUE(cuda::attention_mma_supported(8, 1024, 768, 12, {p, p}));  // GPT-2 124M
  EXPECT_TRUE(cuda::attention_mma_supported(1, 1, 32, 1, {p}));
  EXPECT_TRUE(cuda::attention_mma_supported(3, 100, 256, 2, {p}));      // hs 128, ragged T
  EXPECT_TRUE(cuda::attention_mma_supported(2, 64, 768, 12, {}));       // the shape alone
  EXPECT_FALSE(cuda::attention_mma_supported(2, 64, 72, 3, {p}));       // hs 24 (GEMM path)
  EXPECT_FALSE(cuda::attention_mma_supported(2, 64, 96 * 4, 4, {p}));   // hs 96: not compiled
  EXPECT_TRUE(cuda::attention_mma_supported(2, 64, 256 * 2, 2, {p}));   // hs 256 (Gemma 3)
  EXPECT_FALSE(cuda::attention_mma_supported(2, 64, 288 * 2, 2, {p}));  // hs 288
  EXPECT_FALSE(cuda::attention_mma_supported(2, 64, 10, 3, {p}));       // C % NH
  EXPECT_FALSE(cuda::attention_mma_supported(2, 0, 768, 12, {p}));      // T 0
  EXPECT_FALSE(cuda::attention_mma_supported(65536, 4, 64, 1, {p}));    // B past the grid's y
  EXPECT_FALSE(cuda::attention_mma_supported(1, 65535 * 64 + 1, 64, 1, {p}));  // tiles past z
  EXPECT_FALSE(cuda::attention_mma_supported(2, 64, 768, 12, {p, buf + 8}));  // misaligned
  EXPECT_FALSE(cuda::attention_mma_supported(2, 64, 768, 12, {p, nullptr}));
}

// Host-only: the checks run before anything touches the (host) buffers.
TEST(GpuAttentionMma, RejectsUnsupportedCallsNamingTheShapes) {
  alignas(16) static char buf[256];
  auto* p = reinterpret_cast<bf16*>(buf);
  auto* f = reinterpret_cast<float*>(buf);
  std::string hs12 = "no error", no_lse = "no error", misaligned = "no error";
  try {
    cuda::attention_mma_forward(p, f, p, 1, 4, 36, 3);  // hs 12
  } catch (const std::exception& e) {  // eco::Error
    hs12 = e.what();
  }
  try {
    cuda::attention_mma_backward(p, f, p, p, p, nullptr, 2, 16, 128, 2);  // lse null
  } catch (const std::exception& e) {
    no_lse = e.what();
  }
  try {
    cuda::attention_mma_backward(p + 1, f, p, p, p, f, 1, 8, 64, 1);  // dqkv off 16 bytes
  } catch (const std::exception& e) {
    misaligned = e.what();
  }
  EXPECT_NE(hs12.find("B=1 T=4 C=36 NH=3: the mma path needs"), std::string::npos) << hs12;
  EXPECT_NE(hs12.find("attention_mma_forward"), std::string::npos) << hs12;
  EXPECT_NE(no_lse.find("B=2 T=16 C=128 NH=2: the mma path needs"), std::string::npos) << no_lse;
  EXPECT_NE(misaligned.find("B=1 T=8 C=64 NH=1: the mma path needs"), std::string::npos)
      << misaligned;
}

// ECO_CUDA_ATTENTION set for one scope (the backend reads it once, at construction).
class ScopedAttentionEnv {
 public:
  explicit ScopedAttentionEnv(const char* value) {
    if (const char* old = std::getenv(kName)) {
      old_ = old;
      had_ = true;
    }
    setenv(kName, value, 1);
  }
  ~ScopedAttentionEnv() {
    if (had_)
      setenv(kName, old_.c_str(), 1);
    else
      unsetenv(kName);
  }

 private:
  static constexpr const char* kName = "ECO_CUDA_ATTENTION";
  std::string old_;
  bool had_ = false;
};

// The backend's attention output for fixed random qkv, as bf16 bits.
std::vector<uint16_t> backend_attention_out(Backend& be, const AttnShape& s) {
  const int64_t N = int64_t(s.B) * s.T;
  const Tensor qkv = be.alloc("qkv", {N, 3 * s.C()}, DType::BF16, MemCategory::Workspace);
  be.copy_from_host(qkv, random_bf16(s.n_qkv(), 21, 1.0f).bits.data());
  const Tensor out = be.alloc("out", {N, s.C()}, DType::BF16, MemCategory::Workspace);
  const Tensor lse =
      be.alloc("lse", be.attention_state_shape(s.B, s.NH, s.T), DType::F32, MemCategory::Workspace);
  be.attention_forward(out, lse, qkv, s.B, s.T, AttentionShape::multi_head(s.NH, s.hs));
  std::vector<uint16_t> bits(s.n_out());
  be.copy_to_host(bits.data(), out);
  return bits;
}

// ECO_CUDA_ATTENTION=mma: the backend's forward is the mma kernel's, bit for bit (the GEMM and
// flash paths round differently), backward runs finite, and no GEMM score scratch is reserved.
TEST(GpuAttentionMma, BackendTakesTheMmaPathWhenAsked) {
  ECO_REQUIRE_GPU();
  const ScopedAttentionEnv env("mma");
  auto be = make_cuda_backend();
  const AttnShape s{2, 257, 3, 64};
  const auto got = backend_attention_out(*be, s);
  auto d_qkv = to_device(random_bf16(s.n_qkv(), 21, 1.0f).bits);
  cuda::DeviceBuffer d_out(s.n_out() * 2), d_lse(s.n_lse() * sizeof(float));
  cuda::attention_mma_forward(bf16_ptr(d_out), d_lse.get<float>(), bf16_ptr(d_qkv), s.B, s.T,
                              s.C(), s.NH);
  ECO_CHECK_CUDA(cudaDeviceSynchronize());
  EXPECT_EQ(got, to_host<uint16_t>(d_out, s.n_out()));
  EXPECT_TRUE(backend_attention_writes_finite(*be, 8, 1024, 768, 12));
  WorkspaceShapes shapes;
  shapes.tokens = 8 * 1024;
  shapes.seq_len = 1024;
  shapes.d_model = 768;
  shapes.n_head = 12;
  shapes.vocab = 50257;
  be->reserve_workspaces(shapes);
  EXPECT_EQ(gemm_scratch_in_ledger(*be), 0u);
}

// ECO_CUDA_ATTENTION=mma with a head size the mma path lacks (24): the GEMM path takes it.
TEST(GpuAttentionMma, BackendFallsBackToTheGemmPathForHeadSize24) {
  ECO_REQUIRE_GPU();
  const ScopedAttentionEnv env("mma");
  auto be = make_cuda_backend();
  EXPECT_TRUE(backend_attention_writes_finite(*be, 2, 64, 72, 3));
  EXPECT_EQ(gemm_scratch_in_ledger(*be), cuda::attention_gemm_scratch_bytes(64, 3));
}

TEST(GpuAttentionMma, BackendRefusesAnUnknownEcoCudaAttention) {
  ECO_REQUIRE_GPU();
  const ScopedAttentionEnv env("fast");
  std::string msg = "no error";
  try {
    make_cuda_backend();
  } catch (const std::exception& e) {  // eco::Error, a usage error (tests/unit checks the kind)
    msg = e.what();
  }
  EXPECT_EQ(msg, "ECO_CUDA_ATTENTION=fast: expected auto, mma, gemm or flash");
}

// ---- grouped-query, sliding-window, query-scaled attention (gemma3) ------------------------------

// Gemma 3 1B's local layer at T 1024 (4 query heads on 1 kv head of 256, window 512, q_scalar
// 256) and its global layer (no window); query heads per kv head 1, 2, 4 and 8 / 2; windows of 1,
// shorter than T and longer than T; a query scalar other than hs; hs 32, 64, 128 and 256 (both
// paths); ragged T (1, 65, 129, 257).
const std::vector<AttnShape> kGqaShapes = {
    {2, 1024, 4, 256, 1, 512, 256.0f}, {1, 1024, 4, 256, 1, 0, 256.0f},
    {2, 257, 8, 64, 2, 100},           {1, 129, 4, 128, 4, 0, 20.0f},
    {2, 65, 2, 32, 1, 1},              {1, 100, 4, 64, 1, 200},
    {1, 1, 4, 256, 1, 512, 256.0f}};
// Head sizes only the flash kernel takes (16, 100).
const std::vector<AttnShape> kGqaFlashOnlyShapes = {{2, 33, 4, 16, 2, 9},
                                                    {1, 77, 2, 100, 1, 30, 50.0f}};

std::vector<AttnShape> flash_gqa_shapes() {
  std::vector<AttnShape> v = kGqaShapes;
  v.insert(v.end(), kGqaFlashOnlyShapes.begin(), kGqaFlashOnlyShapes.end());
  return v;
}

TEST(GpuAttentionGqa, FlashForwardMatchesCpuTwin) {
  ECO_REQUIRE_GPU();
  FlashPath flash;
  expect_forward_matches_cpu(flash, flash_gqa_shapes());
}

TEST(GpuAttentionGqa, FlashBackwardAccumulatesCpuTwinsGradient) {
  ECO_REQUIRE_GPU();
  FlashPath flash;
  expect_backward_matches_cpu(flash, flash, flash_gqa_shapes());
}

TEST(GpuAttentionGqa, MmaForwardMatchesCpuTwin) {
  ECO_REQUIRE_GPU();
  MmaPath mma;
  expect_forward_matches_cpu(mma, kGqaShapes);
}

TEST(GpuAttentionGqa, MmaBackwardAccumulatesCpuTwinsGradient) {
  ECO_REQUIRE_GPU();
  MmaPath mma;
  expect_backward_matches_cpu(mma, mma, kGqaShapes);
}

// The backend may run a forward on one path and its backward on the other: the same lse.
TEST(GpuAttentionGqa, BackwardTakesTheOtherPathsLse) {
  ECO_REQUIRE_GPU();
  FlashPath flash;
  MmaPath mma;
  const std::vector<AttnShape> shapes = {{1, 300, 4, 256, 1, 128, 256.0f}, {2, 65, 2, 32, 1, 1}};
  expect_backward_matches_cpu(flash, mma, shapes);
  expect_backward_matches_cpu(mma, flash, shapes);
}

TEST(GpuAttentionGqa, ForwardAndBackwardAreDeterministic) {
  ECO_REQUIRE_GPU();
  FlashPath flash;
  MmaPath mma;
  expect_deterministic(flash, {2, 1024, 4, 256, 1, 512, 256.0f});
  expect_deterministic(mma, {2, 1024, 4, 256, 1, 512, 256.0f});
  expect_deterministic(mma, {1, 257, 8, 64, 2, 100});
}

// The backend's forward for a grouped-query shape, bit for bit the flash kernel's by default and
// the mma path's under ECO_CUDA_ATTENTION=mma; no GEMM score scratch for a model without plain
// attention (gemma3's WorkspaceShapes).
std::vector<uint16_t> backend_gqa_out(Backend& be, const AttnShape& s) {
  const int64_t N = int64_t(s.B) * s.T;
  const Tensor qkv = be.alloc("qkv", {N, s.qkv_width()}, DType::BF16, MemCategory::Workspace);
  be.copy_from_host(qkv, random_bf16(s.n_qkv(), 31, 1.0f).bits.data());
  const Tensor out = be.alloc("out", {N, s.C()}, DType::BF16, MemCategory::Workspace);
  const Tensor lse =
      be.alloc("lse", be.attention_state_shape(s.B, s.NH, s.T), DType::F32, MemCategory::Workspace);
  be.attention_forward(out, lse, qkv, s.B, s.T, s.attention());
  std::vector<uint16_t> bits(s.n_out());
  be.copy_to_host(bits.data(), out);
  return bits;
}

std::vector<uint16_t> path_gqa_out(AttentionPath& path, const AttnShape& s) {
  auto d_qkv = to_device(random_bf16(s.n_qkv(), 31, 1.0f).bits);
  cuda::DeviceBuffer d_out(s.n_out() * 2), d_lse(s.n_lse() * sizeof(float));
  path.forward(bf16_ptr(d_out), d_lse.get<float>(), bf16_ptr(d_qkv), s);
  ECO_CHECK_CUDA(cudaDeviceSynchronize());
  return to_host<uint16_t>(d_out, s.n_out());
}

WorkspaceShapes gemma3_1b_workspaces() {
  WorkspaceShapes w;
  w.tokens = 16 * 512;
  w.seq_len = 512;
  w.d_model = 1152;
  w.n_head = 4;
  w.head_dim = 256;
  w.plain_attention = false;
  w.vocab = 262144;
  return w;
}

TEST(GpuAttentionGqa, BackendRunsTheFlashKernelByDefaultAndMmaWhenAsked) {
  ECO_REQUIRE_GPU();
  const AttnShape s{2, 300, 4, 256, 1, 128, 256.0f};
  {
    auto be = make_cuda_backend();
    FlashPath flash;
    EXPECT_EQ(backend_gqa_out(*be, s), path_gqa_out(flash, s));
    be->reserve_workspaces(gemma3_1b_workspaces());
    EXPECT_EQ(gemm_scratch_in_ledger(*be), 0u);
  }
  const ScopedAttentionEnv env("mma");
  auto be = make_cuda_backend();
  MmaPath mma;
  EXPECT_EQ(backend_gqa_out(*be, s), path_gqa_out(mma, s));
}

}  // namespace
}  // namespace eco
