// Specification tests of the CPU reference kernels: float64 finite-difference gradient checks,
// float/double agreement and += semantics for every op (typed tests over op descriptions), plus
// forward checks against naive float64 loops and the determinism of parallel reductions.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "base/math/activations.h"
#include "kernels/cpu/kernels.h"

namespace {

namespace cpu = eco::cpu;

template <class T>
using Tensors = std::vector<std::vector<T>>;

// Uniform [-1, 1) values that are exactly representable in float, so float and double runs see
// identical inputs and a float `dloss` argument carries the double functional weight exactly.
std::vector<double> random_values(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<double> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

template <class T>
std::vector<T> cast(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

// ---- op descriptions --------------------------------------------------------------------------
// Each op lists its differentiable inputs (activations and parameters), runs its forward, and
// runs its backward (recomputing any saved forward state), so the generic checks below apply to
// all of them. Shapes are small and ragged: B=2, T=5, C=12, NH=3 (hs=4), V=11, OC=7.
constexpr int kB = 2, kT = 5, kN = kB * kT, kC = 12, kNH = 3, kV = 11;

struct MatmulOp {
  static constexpr const char* kName = "Matmul";
  static constexpr int OC = 7;
  std::vector<int64_t> input_sizes() const { return {kN * kC, OC * kC, OC}; }  // inp, w, bias
  int64_t output_size() const { return kN * OC; }
  template <class T>
  void forward(std::vector<T>& out, const Tensors<T>& in) const {
    cpu::matmul_forward(out.data(), in[0].data(), in[1].data(), in[2].data(), kN, kC, OC);
  }
  template <class T>
  void backward(Tensors<T>& g, const std::vector<T>& dout, const Tensors<T>& in) const {
    cpu::matmul_backward(g[0].data(), g[1].data(), g[2].data(), dout.data(), in[0].data(),
                         in[1].data(), kN, kC, OC);
  }
};

struct EmbeddingOp {
  static constexpr const char* kName = "Embedding";
  // Repeated tokens (3, 7) exercise the scatter-add.
  const std::vector<int32_t> tokens = {3, 7, 3, 0, 10, 7, 7, 1, 3, 5};
  std::vector<int64_t> input_sizes() const { return {kV * kC, kT * kC}; }  // wte, wpe
  int64_t output_size() const { return kN * kC; }
  template <class T>
  void forward(std::vector<T>& out, const Tensors<T>& in) const {
    cpu::embedding_forward(out.data(), tokens.data(), in[0].data(), in[1].data(), kB, kT, kC);
  }
  template <class T>
  void backward(Tensors<T>& g, const std::vector<T>& dout, const Tensors<T>& in) const {
    cpu::embedding_backward(g[0].data(), g[1].data(), dout.data(), tokens.data(), kB, kT, kC);
  }
};

struct LayernormOp {
  static constexpr const char* kName = "Layernorm";
  std::vector<int64_t> input_sizes() const { return {kN * kC, kC, kC}; }  // inp, weight, bias
  int64_t output_size() const { return kN * kC; }
  template <class T>
  void forward(std::vector<T>& out, const Tensors<T>& in, T* mean = nullptr,
               T* rstd = nullptr) const {
    std::vector<T> m(kN), r(kN);
    cpu::layernorm_forward(out.data(), mean ? mean : m.data(), rstd ? rstd : r.data(), in[0].data(),
                           in[1].data(), in[2].data(), kN, kC, 1e-5f);
  }
  template <class T>
  void backward(Tensors<T>& g, const std::vector<T>& dout, const Tensors<T>& in) const {
    std::vector<T> out(output_size()), mean(kN), rstd(kN);
    forward(out, in, mean.data(), rstd.data());
    cpu::layernorm_backward(g[0].data(), g[1].data(), g[2].data(), dout.data(), in[0].data(),
                            in[1].data(), mean.data(), rstd.data(), kN, kC);
  }
};

struct RmsnormOp {
  static constexpr const char* kName = "Rmsnorm";
  std::vector<int64_t> input_sizes() const { return {kN * kC, kC}; }  // inp, weight
  int64_t output_size() const { return kN * kC; }
  template <class T>
  void forward(std::vector<T>& out, const Tensors<T>& in, T* rstd = nullptr) const {
    std::vector<T> r(kN);
    cpu::rmsnorm_forward(out.data(), rstd ? rstd : r.data(), in[0].data(), in[1].data(), kN, kC,
                         1e-6f);
  }
  template <class T>
  void backward(Tensors<T>& g, const std::vector<T>& dout, const Tensors<T>& in) const {
    std::vector<T> out(output_size()), rstd(kN);
    forward(out, in, rstd.data());
    cpu::rmsnorm_backward(g[0].data(), g[1].data(), dout.data(), in[0].data(), in[1].data(),
                          rstd.data(), kN, kC);
  }
};

struct RopeOp {
  static constexpr const char* kName = "Rope";
  static constexpr float kTheta = 100.f;  // small base: large, varied angles within T=5
  std::vector<int64_t> input_sizes() const { return {kN * 3 * kC}; }  // qkv
  int64_t output_size() const { return kN * 3 * kC; }
  template <class T>
  void forward(std::vector<T>& out, const Tensors<T>& in) const {
    cpu::rope_forward(out.data(), in[0].data(), kB, kT, kC, kNH, kTheta);
  }
  template <class T>
  void backward(Tensors<T>& g, const std::vector<T>& dout, const Tensors<T>& in) const {
    cpu::rope_backward(g[0].data(), dout.data(), kB, kT, kC, kNH, kTheta);
  }
};

struct AttentionOp {
  static constexpr const char* kName = "Attention";
  std::vector<int64_t> input_sizes() const { return {kN * 3 * kC}; }  // qkv
  int64_t output_size() const { return kN * kC; }
  template <class T>
  void forward(std::vector<T>& out, const Tensors<T>& in, std::vector<T>* att = nullptr) const {
    std::vector<T> a(kB * kNH * kT * kT);
    cpu::attention_forward(out.data(), (att ? *att : a).data(), in[0].data(), kB, kT, kC, kNH);
  }
  template <class T>
  void backward(Tensors<T>& g, const std::vector<T>& dout, const Tensors<T>& in) const {
    std::vector<T> out(output_size()), att(kB * kNH * kT * kT), scratch(att.size());
    forward(out, in, &att);
    cpu::attention_backward(g[0].data(), scratch.data(), dout.data(), in[0].data(), att.data(), kB,
                            kT, kC, kNH);
  }
};

struct GeluOp {
  static constexpr const char* kName = "Gelu";
  static constexpr int64_t n = 37;
  std::vector<int64_t> input_sizes() const { return {n}; }
  int64_t output_size() const { return n; }
  template <class T>
  void forward(std::vector<T>& out, const Tensors<T>& in) const {
    cpu::gelu_forward(out.data(), in[0].data(), n);
  }
  template <class T>
  void backward(Tensors<T>& g, const std::vector<T>& dout, const Tensors<T>& in) const {
    cpu::gelu_backward(g[0].data(), in[0].data(), dout.data(), n);
  }
};

struct SwigluOp {
  static constexpr const char* kName = "Swiglu";
  static constexpr int H = 6;
  std::vector<int64_t> input_sizes() const { return {kN * 2 * H}; }  // [gate | up] rows
  int64_t output_size() const { return kN * H; }
  template <class T>
  void forward(std::vector<T>& out, const Tensors<T>& in) const {
    cpu::swiglu_forward(out.data(), in[0].data(), kN, H);
  }
  template <class T>
  void backward(Tensors<T>& g, const std::vector<T>& dout, const Tensors<T>& in) const {
    cpu::swiglu_backward(g[0].data(), dout.data(), in[0].data(), kN, H);
  }
};

// GeGLU (Gemma's MLP): gelu_tanh(gate) * up.
struct GegluOp {
  static constexpr const char* kName = "Geglu";
  static constexpr int H = 6;
  std::vector<int64_t> input_sizes() const { return {kN * 2 * H}; }  // [gate | up] rows
  int64_t output_size() const { return kN * H; }
  template <class T>
  void forward(std::vector<T>& out, const Tensors<T>& in) const {
    cpu::geglu_forward(out.data(), in[0].data(), kN, H);
  }
  template <class T>
  void backward(Tensors<T>& g, const std::vector<T>& dout, const Tensors<T>& in) const {
    cpu::geglu_backward(g[0].data(), dout.data(), in[0].data(), kN, H);
  }
};

// Grouped-query rows: 4 query heads share 2 key/value heads, head size 4 (hs != C / NH): qkv
// rows of (4 + 2 x 2) x 4 = 32, output rows of 16.
constexpr int kGqaNH = 4, kGqaKVH = 2, kGqaHs = 4;
constexpr int kGqaQKV = (kGqaNH + 2 * kGqaKVH) * kGqaHs, kGqaOut = kGqaNH * kGqaHs;

struct RopeGqaOp {
  static constexpr const char* kName = "RopeGqa";
  static constexpr float kTheta = 100.f;
  std::vector<int64_t> input_sizes() const { return {kN * kGqaQKV}; }
  int64_t output_size() const { return kN * kGqaQKV; }
  template <class T>
  void forward(std::vector<T>& out, const Tensors<T>& in) const {
    cpu::rope_forward_gqa(out.data(), in[0].data(), kB, kT, kGqaNH, kGqaKVH, kGqaHs, kTheta);
  }
  template <class T>
  void backward(Tensors<T>& g, const std::vector<T>& dout, const Tensors<T>& in) const {
    cpu::rope_backward_gqa(g[0].data(), dout.data(), kB, kT, kGqaNH, kGqaKVH, kGqaHs, kTheta);
  }
};

// Grouped-query attention in a sliding window of 3 < T = 5 (the first keys of late queries
// drop out), scaled by 7^-1/2 instead of hs^-1/2.
struct GqaWindowAttentionOp {
  static constexpr const char* kName = "GqaWindowAttention";
  static constexpr int kWindow = 3;
  static constexpr float kQScalar = 7.f;
  std::vector<int64_t> input_sizes() const { return {kN * kGqaQKV}; }
  int64_t output_size() const { return kN * kGqaOut; }
  template <class T>
  void forward(std::vector<T>& out, const Tensors<T>& in, std::vector<T>* att = nullptr) const {
    std::vector<T> a(kB * kGqaNH * kT * kT);
    cpu::attention_forward_gqa(out.data(), (att ? *att : a).data(), in[0].data(), kB, kT, kGqaNH,
                               kGqaKVH, kGqaHs, kWindow, kQScalar);
  }
  template <class T>
  void backward(Tensors<T>& g, const std::vector<T>& dout, const Tensors<T>& in) const {
    std::vector<T> out(output_size()), att(kB * kGqaNH * kT * kT), scratch(att.size());
    forward(out, in, &att);
    cpu::attention_backward_gqa(g[0].data(), scratch.data(), dout.data(), in[0].data(), att.data(),
                                kB, kT, kGqaNH, kGqaKVH, kGqaHs, kWindow, kQScalar);
  }
};

// QK-norm over the q and k heads of grouped-query rows; gains wq, wk (hs).
struct QkRmsnormOp {
  static constexpr const char* kName = "QkRmsnorm";
  std::vector<int64_t> input_sizes() const { return {kN * kGqaQKV, kGqaHs, kGqaHs}; }
  int64_t output_size() const { return kN * kGqaQKV; }
  template <class T>
  void forward(std::vector<T>& out, const Tensors<T>& in, T* rstd = nullptr) const {
    std::vector<T> r(kN * (kGqaNH + kGqaKVH));
    cpu::qk_rmsnorm_forward(out.data(), rstd ? rstd : r.data(), in[0].data(), in[1].data(),
                            in[2].data(), kN, kGqaNH, kGqaKVH, kGqaHs, 1e-6f);
  }
  template <class T>
  void backward(Tensors<T>& g, const std::vector<T>& dout, const Tensors<T>& in) const {
    std::vector<T> out(output_size()), rstd(kN * (kGqaNH + kGqaKVH));
    forward(out, in, rstd.data());
    cpu::qk_rmsnorm_backward(g[0].data(), g[1].data(), g[2].data(), dout.data(), in[0].data(),
                             in[1].data(), in[2].data(), rstd.data(), kN, kGqaNH, kGqaKVH, kGqaHs);
  }
};

// The residual's backward is `accumulate` of dout into both inputs.
struct ResidualOp {
  static constexpr const char* kName = "Residual";
  static constexpr int64_t n = 29;
  std::vector<int64_t> input_sizes() const { return {n, n}; }
  int64_t output_size() const { return n; }
  template <class T>
  void forward(std::vector<T>& out, const Tensors<T>& in) const {
    cpu::residual_forward(out.data(), in[0].data(), in[1].data(), n);
  }
  template <class T>
  void backward(Tensors<T>& g, const std::vector<T>& dout, const Tensors<T>& in) const {
    cpu::accumulate(g[0].data(), dout.data(), n);
    cpu::accumulate(g[1].data(), dout.data(), n);
  }
};

// Output: per-row losses, so the functional weights each row's loss. The kernel takes one scalar
// dloss and writes (not adds) dlogits, so the backward runs it row by row with dloss = dout[n]
// and adds the result. One target is ignored (< 0): its row must get neither loss nor gradient.
struct CrossentropyOp {
  static constexpr const char* kName = "Crossentropy";
  const std::vector<int32_t> targets = {4, 0, 10, -1, 4, 7, 2, 9, 1, 6};
  std::vector<int64_t> input_sizes() const { return {kN * kV}; }  // logits
  int64_t output_size() const { return kN; }
  template <class T>
  void forward(std::vector<T>& out, const Tensors<T>& in) const {
    cpu::crossentropy_forward_backward<T>(out.data(), nullptr, in[0].data(), targets.data(), kN, kV,
                                          1.f);
  }
  template <class T>
  void backward(Tensors<T>& g, const std::vector<T>& dout, const Tensors<T>& in) const {
    std::vector<T> dlogits(kV);
    for (int n = 0; n < kN; n++) {
      T loss;
      cpu::crossentropy_forward_backward(&loss, dlogits.data(), in[0].data() + n * kV,
                                         targets.data() + n, 1, kV, float(dout[n]));
      for (int v = 0; v < kV; v++) g[0][n * kV + v] += dlogits[v];
    }
  }
};

// ---- generic checks over an op ------------------------------------------------------------------
template <class Op>
Tensors<double> random_inputs(const Op& op, uint32_t seed) {
  Tensors<double> in;
  for (int64_t size : op.input_sizes()) in.push_back(random_values(size, seed++));
  return in;
}

// L = sum(dout * out): its gradient w.r.t. every input is what backward(dout) computes.
template <class Op>
double functional(const Op& op, const std::vector<double>& dout, const Tensors<double>& in) {
  std::vector<double> out(op.output_size());
  op.forward(out, in);
  double l = 0;
  for (size_t i = 0; i < out.size(); i++) l += dout[i] * out[i];
  return l;
}

// Analytic gradients (in T) of L, computed on top of `prefill` and returned minus it (so an
// overwriting backward fails); inputs and dout are the double values rounded to T.
template <class T, class Op>
Tensors<double> analytic_gradients(const Op& op, const std::vector<double>& dout,
                                   const Tensors<double>& in, const Tensors<double>& prefill) {
  Tensors<T> in_t, g_t;
  for (size_t i = 0; i < in.size(); i++) {
    in_t.push_back(cast<T>(in[i]));
    g_t.push_back(cast<T>(prefill[i]));
  }
  op.backward(g_t, cast<T>(dout), in_t);
  Tensors<double> g;
  for (size_t i = 0; i < in.size(); i++) {
    g.emplace_back(in[i].size());
    for (size_t j = 0; j < in[i].size(); j++) g[i][j] = double(g_t[i][j]) - prefill[i][j];
  }
  return g;
}

template <class Op>
class CpuKernelOp : public ::testing::Test {};

struct OpName {
  template <class Op>
  static std::string GetName(int) {
    return Op::kName;
  }
};

using AllOps = ::testing::Types<MatmulOp, EmbeddingOp, LayernormOp, RmsnormOp, RopeOp, AttentionOp,
                                GeluOp, SwigluOp, ResidualOp, CrossentropyOp, GegluOp, RopeGqaOp,
                                GqaWindowAttentionOp, QkRmsnormOp>;
TYPED_TEST_SUITE(CpuKernelOp, AllOps, OpName);

TYPED_TEST(CpuKernelOp, BackwardMatchesFiniteDifferences) {
  const TypeParam op;
  Tensors<double> in = random_inputs(op, 1);
  const std::vector<double> dout = random_values(op.output_size(), 100);
  const Tensors<double> prefill = random_inputs(op, 200);  // nonzero: backward must add onto it
  const Tensors<double> analytic = analytic_gradients<double>(op, dout, in, prefill);

  // Central differences with h = 1e-6 in float64: truncation O(h^2 L''') ~ 1e-12 and rounding
  // ~ 1e-16 |L| / h ~ 1e-10, so 1e-6 relative to the tensor's largest gradient leaves ample
  // margin, while a wrong formula shows up as an O(1) relative error.
  const double h = 1e-6, tol = 1e-6;
  for (size_t i = 0; i < in.size(); i++) {
    std::vector<double> numeric(in[i].size());
    for (size_t j = 0; j < in[i].size(); j++) {
      const double x = in[i][j];
      in[i][j] = x + h;
      const double lp = functional(op, dout, in);
      in[i][j] = x - h;
      const double lm = functional(op, dout, in);
      in[i][j] = x;
      numeric[j] = (lp - lm) / (2 * h);
    }
    const double scale = std::max(max_abs(numeric), 1e-12);
    ASSERT_GT(max_abs(numeric), 1e-3) << "input " << i << " has a vanishing gradient";
    for (size_t j = 0; j < numeric.size(); j++)
      ASSERT_LE(std::abs(analytic[i][j] - numeric[j]) / scale, tol)
          << "input " << i << " element " << j << ": analytic " << analytic[i][j] << " numeric "
          << numeric[j];
  }
}

TYPED_TEST(CpuKernelOp, FloatAgreesWithDouble) {
  const TypeParam op;
  const Tensors<double> in = random_inputs(op, 11);
  const std::vector<double> dout = random_values(op.output_size(), 111);

  // Same (float-representable) inputs in both precisions; float keeps ~7 digits and these ops
  // sum at most a few dozen terms, so 1e-5 relative to each tensor's largest value.
  const double tol = 1e-5;
  std::vector<float> out_f(op.output_size());
  std::vector<double> out_d(op.output_size());
  Tensors<float> in_f;
  for (const auto& x : in) in_f.push_back(cast<float>(x));
  op.forward(out_f, in_f);
  op.forward(out_d, in);
  for (size_t j = 0; j < out_d.size(); j++)
    ASSERT_NEAR(out_f[j], out_d[j], tol * max_abs(out_d)) << "output element " << j;

  Tensors<double> zeros;
  for (const auto& x : in) zeros.emplace_back(x.size(), 0.0);
  const Tensors<double> g_f = analytic_gradients<float>(op, dout, in, zeros);
  const Tensors<double> g_d = analytic_gradients<double>(op, dout, in, zeros);
  for (size_t i = 0; i < g_d.size(); i++)
    for (size_t j = 0; j < g_d[i].size(); j++)
      ASSERT_NEAR(g_f[i][j], g_d[i][j], tol * max_abs(g_d[i]))
          << "gradient of input " << i << " element " << j;
}

TYPED_TEST(CpuKernelOp, BackwardAccumulatesIntoExistingGradients) {
  const TypeParam op;
  const Tensors<double> in = random_inputs(op, 21);
  const std::vector<double> dout = random_values(op.output_size(), 121);
  Tensors<double> g;
  for (const auto& x : in) g.emplace_back(x.size(), 0.0);
  op.backward(g, dout, in);
  Tensors<double> twice = g;
  op.backward(twice, dout, in);
  // Two backward calls from zero must give twice one call (up to the order BLAS adds in).
  for (size_t i = 0; i < g.size(); i++)
    for (size_t j = 0; j < g[i].size(); j++)
      ASSERT_NEAR(twice[i][j], 2 * g[i][j], 1e-12 * std::max(1.0, max_abs(g[i])))
          << "input " << i << " element " << j;
}

// ---- forward checks against naive float64 loops
// ---------------------------------------------------
TEST(CpuKernels, MatmulForwardMatchesNaiveTripleLoop) {
  const int N = 9, C = 13, OC = 6;
  const auto inp = random_values(N * C, 1), w = random_values(OC * C, 2), b = random_values(OC, 3);
  std::vector<double> out(N * OC), out_nobias(N * OC, 123.0);  // stale values must be overwritten
  cpu::matmul_forward(out.data(), inp.data(), w.data(), b.data(), N, C, OC);
  cpu::matmul_forward<double>(out_nobias.data(), inp.data(), w.data(), nullptr, N, C, OC);
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++) {
      double acc = 0;
      for (int c = 0; c < C; c++) acc += inp[n * C + c] * w[o * C + c];
      EXPECT_NEAR(out[n * OC + o], acc + b[o], 1e-13);
      EXPECT_NEAR(out_nobias[n * OC + o], acc, 1e-13);
    }
}

TEST(CpuKernels, MatmulBackwardSkipsNullInputAndBiasGradients) {
  const int N = 4, C = 5, OC = 3;
  const auto inp = random_values(N * C, 1), w = random_values(OC * C, 2);
  const auto dout = random_values(N * OC, 3);
  std::vector<double> dw(OC * C, 0.0), dw_full(OC * C, 0.0), dinp(N * C, 0.0), db(OC, 0.0);
  cpu::matmul_backward<double>(nullptr, dw.data(), nullptr, dout.data(), inp.data(), w.data(), N, C,
                               OC);
  cpu::matmul_backward(dinp.data(), dw_full.data(), db.data(), dout.data(), inp.data(), w.data(), N,
                       C, OC);
  for (int i = 0; i < OC * C; i++) EXPECT_DOUBLE_EQ(dw[i], dw_full[i]);
}

TEST(CpuKernels, EmbeddingForwardAddsTokenAndPositionRows) {
  const std::vector<int32_t> tokens = {2, 0, 2, 1, 1, 3};  // B=2, T=3
  const int B = 2, Tn = 3, C = 4, V = 4;
  const auto wte = random_values(V * C, 1), wpe = random_values(Tn * C, 2);
  std::vector<double> out(B * Tn * C), out_nopos(B * Tn * C);
  cpu::embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, Tn, C);
  cpu::embedding_forward<double>(out_nopos.data(), tokens.data(), wte.data(), nullptr, B, Tn, C);
  for (int n = 0; n < B * Tn; n++)
    for (int c = 0; c < C; c++) {
      EXPECT_EQ(out[n * C + c], wte[tokens[n] * C + c] + wpe[(n % Tn) * C + c]);
      EXPECT_EQ(out_nopos[n * C + c], wte[tokens[n] * C + c]);
    }
}

TEST(CpuKernels, NormsMatchNaiveFormulas) {
  const int N = 3, C = 7;
  const auto inp = random_values(N * C, 1), w = random_values(C, 2), b = random_values(C, 3);
  std::vector<double> ln(N * C), mean(N), rstd(N), rms(N * C), rms_rstd(N);
  cpu::layernorm_forward(ln.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C,
                         1e-5f);
  cpu::rmsnorm_forward(rms.data(), rms_rstd.data(), inp.data(), w.data(), N, C, 1e-6f);
  for (int n = 0; n < N; n++) {
    double m = 0, ss = 0;
    for (int c = 0; c < C; c++) m += inp[n * C + c] / C;
    for (int c = 0; c < C; c++) ss += inp[n * C + c] * inp[n * C + c];
    double var = 0;
    for (int c = 0; c < C; c++) var += (inp[n * C + c] - m) * (inp[n * C + c] - m) / C;
    const double s = 1 / std::sqrt(var + double(1e-5f)), rs = 1 / std::sqrt(ss / C + double(1e-6f));
    EXPECT_NEAR(mean[n], m, 1e-14);
    EXPECT_NEAR(rstd[n], s, 1e-12);
    EXPECT_NEAR(rms_rstd[n], rs, 1e-12);
    for (int c = 0; c < C; c++) {
      EXPECT_NEAR(ln[n * C + c], (inp[n * C + c] - m) * s * w[c] + b[c], 1e-12);
      EXPECT_NEAR(rms[n * C + c], inp[n * C + c] * rs * w[c], 1e-12);
    }
  }
}

TEST(CpuKernels, RopeForwardMatchesComplexRotationAndPassesValuesThrough) {
  const float theta = 500.f;
  const int hs = kC / kNH, half = hs / 2;
  const auto qkv = random_values(kN * 3 * kC, 1);
  std::vector<double> out(qkv.size());
  cpu::rope_forward(out.data(), qkv.data(), kB, kT, kC, kNH, theta);
  for (int n = 0; n < kN; n++) {
    const int t = n % kT;
    const double* x = &qkv[n * 3 * kC];
    const double* o = &out[n * 3 * kC];
    for (int part = 0; part < 2; part++)
      for (int h = 0; h < kNH; h++)
        for (int i = 0; i < half; i++) {
          // The pair (x_i, x_{i+half}) as a complex number, multiplied by e^{j t freq_i}.
          const int a = part * kC + h * hs + i, b = a + half;
          const double freq = std::exp(-(2.0 * i / hs) * std::log(double(theta)));
          const std::complex<double> z =
              std::complex<double>(x[a], x[b]) * std::polar(1.0, t * freq);
          EXPECT_NEAR(o[a], z.real(), 1e-13);
          EXPECT_NEAR(o[b], z.imag(), 1e-13);
        }
    for (int c = 2 * kC; c < 3 * kC; c++) EXPECT_EQ(o[c], x[c]);
  }
}

TEST(CpuKernels, RopeMakesQueryKeyScoresDependOnlyOnRelativePosition) {
  // The same q and k vectors at every position: after RoPE, q_t . k_s must depend on t - s only.
  const int B = 1, Tn = 6, C = 8, NH = 1;
  const auto qk = random_values(2 * C, 1);
  std::vector<double> qkv(B * Tn * 3 * C, 0.0), out(qkv.size());
  for (int t = 0; t < Tn; t++) std::copy(qk.begin(), qk.end(), qkv.begin() + t * 3 * C);
  cpu::rope_forward(out.data(), qkv.data(), B, Tn, C, NH, 10000.f);
  auto score = [&](int t, int s) {
    double d = 0;
    for (int c = 0; c < C; c++) d += out[t * 3 * C + c] * out[s * 3 * C + C + c];
    return d;
  };
  for (int t = 1; t < Tn; t++)
    for (int s = 1; s < Tn; s++) EXPECT_NEAR(score(t, s), score(t - 1, s - 1), 1e-12);
}

TEST(CpuKernels, AttentionForwardMatchesNaiveCausalAttention) {
  const int hs = kC / kNH;
  const auto qkv = random_values(kN * 3 * kC, 1);
  std::vector<double> out(kN * kC), att(kB * kNH * kT * kT);
  cpu::attention_forward(out.data(), att.data(), qkv.data(), kB, kT, kC, kNH);
  for (int b = 0; b < kB; b++)
    for (int h = 0; h < kNH; h++)
      for (int t = 0; t < kT; t++) {
        auto at = [&](int tt, int part, int i) {
          return qkv[(b * kT + tt) * 3 * kC + part * kC + h * hs + i];
        };
        std::vector<double> p(t + 1);
        double z = 0;
        for (int u = 0; u <= t; u++) {
          double s = 0;
          for (int i = 0; i < hs; i++) s += at(t, 0, i) * at(u, 1, i);
          p[u] = std::exp(s / std::sqrt(double(hs)));
          z += p[u];
        }
        for (int u = 0; u <= t; u++)
          EXPECT_NEAR(att[((b * kNH + h) * kT + t) * kT + u], p[u] / z, 1e-14);
        for (int i = 0; i < hs; i++) {
          double o = 0;
          for (int u = 0; u <= t; u++) o += p[u] / z * at(u, 2, i);
          EXPECT_NEAR(out[(b * kT + t) * kC + h * hs + i], o, 1e-14);
        }
      }
}

// Query head h reads kv head h / (NH / KVH); query t sees keys (t - window, t]; scores are
// scaled by q_scalar^-1/2.
TEST(CpuKernels, GqaWindowAttentionForwardMatchesNaiveLoops) {
  const int W = GqaWindowAttentionOp::kWindow;
  const double qs = GqaWindowAttentionOp::kQScalar;
  const auto qkv = random_values(kN * kGqaQKV, 3);
  std::vector<double> out(kN * kGqaOut), att(kB * kGqaNH * kT * kT, 7.0);
  cpu::attention_forward_gqa(out.data(), att.data(), qkv.data(), kB, kT, kGqaNH, kGqaKVH, kGqaHs,
                             W, float(qs));
  const int group = kGqaNH / kGqaKVH;
  for (int b = 0; b < kB; b++)
    for (int h = 0; h < kGqaNH; h++)
      for (int t = 0; t < kT; t++) {
        const int kv = h / group;
        auto q = [&](int i) { return qkv[(b * kT + t) * kGqaQKV + h * kGqaHs + i]; };
        auto k = [&](int u, int i) {
          return qkv[(b * kT + u) * kGqaQKV + (kGqaNH + kv) * kGqaHs + i];
        };
        auto v = [&](int u, int i) {
          return qkv[(b * kT + u) * kGqaQKV + (kGqaNH + kGqaKVH + kv) * kGqaHs + i];
        };
        std::vector<double> p(kT, 0.0);
        double z = 0;
        for (int u = std::max(0, t - W + 1); u <= t; u++) {
          double s = 0;
          for (int i = 0; i < kGqaHs; i++) s += q(i) * k(u, i);
          p[u] = std::exp(s / std::sqrt(qs));
          z += p[u];
        }
        for (int u = 0; u < kT; u++)
          EXPECT_NEAR(att[((b * kGqaNH + h) * kT + t) * kT + u], p[u] / z, 1e-14)
              << "b " << b << " h " << h << " t " << t << " u " << u;
        for (int i = 0; i < kGqaHs; i++) {
          double o = 0;
          for (int u = 0; u < kT; u++) o += p[u] / z * v(u, i);
          EXPECT_NEAR(out[(b * kT + t) * kGqaOut + h * kGqaHs + i], o, 1e-14);
        }
      }
}

// With KVH = NH, head size C / NH, no window and q_scalar = hs, the general kernels are the
// multi-head ones, bit for bit (llama and gpt2 runs do not change).
TEST(CpuKernels, GqaKernelsReduceToMultiHeadBitForBit) {
  const int hs = kC / kNH;
  const auto qkv = cast<float>(random_values(kN * 3 * kC, 4));
  const auto dout = cast<float>(random_values(kN * kC, 5));
  std::vector<float> o1(kN * kC), o2(o1.size()), a1(kB * kNH * kT * kT), a2(a1.size());
  cpu::attention_forward(o1.data(), a1.data(), qkv.data(), kB, kT, kC, kNH);
  cpu::attention_forward_gqa(o2.data(), a2.data(), qkv.data(), kB, kT, kNH, kNH, hs, 0, float(hs));
  EXPECT_EQ(o1, o2);
  EXPECT_EQ(a1, a2);
  std::vector<float> g1(qkv.size()), g2(qkv.size()), s1(a1.size()), s2(a1.size());
  cpu::attention_backward(g1.data(), s1.data(), dout.data(), qkv.data(), a1.data(), kB, kT, kC, kNH);
  cpu::attention_backward_gqa(g2.data(), s2.data(), dout.data(), qkv.data(), a2.data(), kB, kT, kNH,
                              kNH, hs, 0, float(hs));
  EXPECT_EQ(g1, g2);
  std::vector<float> r1(qkv.size()), r2(qkv.size());
  cpu::rope_forward(r1.data(), qkv.data(), kB, kT, kC, kNH, 100.f);
  cpu::rope_forward_gqa(r2.data(), qkv.data(), kB, kT, kNH, kNH, hs, 100.f);
  EXPECT_EQ(r1, r2);
}

TEST(CpuKernels, AttentionProbabilitiesAreZeroAboveDiagonalAndRowsSumToOne) {
  const auto qkv = cast<float>(random_values(kN * 3 * kC, 2));
  std::vector<float> out(kN * kC), att(kB * kNH * kT * kT, 7.f);  // stale values must vanish
  cpu::attention_forward(out.data(), att.data(), qkv.data(), kB, kT, kC, kNH);
  for (int bh = 0; bh < kB * kNH; bh++)
    for (int t = 0; t < kT; t++) {
      const float* row = &att[(bh * kT + t) * kT];
      double sum = 0;
      for (int u = 0; u <= t; u++) sum += row[u];
      EXPECT_NEAR(sum, 1.0, 1e-6);
      for (int u = t + 1; u < kT; u++) EXPECT_EQ(row[u], 0.f) << "t " << t << " u " << u;
    }
}

TEST(CpuKernels, CrossentropyMatchesLogSumExpAndIsStableForLargeLogits) {
  const CrossentropyOp op;
  const auto logits = random_values(kN * kV, 1);
  std::vector<double> losses(kN);
  op.forward(losses, Tensors<double>{logits});
  // +1000 overflows a naive exp in float; max subtraction makes the shift invisible.
  std::vector<float> shifted(logits.size()), losses_shifted(kN);
  for (size_t i = 0; i < logits.size(); i++) shifted[i] = float(logits[i]) + 1000.f;
  cpu::crossentropy_forward_backward<float>(losses_shifted.data(), nullptr, shifted.data(),
                                            op.targets.data(), kN, kV, 1.f);
  for (int n = 0; n < kN; n++) {
    if (op.targets[n] < 0) continue;
    double z = 0;
    for (int v = 0; v < kV; v++) z += std::exp(logits[n * kV + v]);
    const double expected = std::log(z) - logits[n * kV + op.targets[n]];
    EXPECT_NEAR(losses[n], expected, 1e-14);
    // float logits near 1000 keep ~6e-5 absolute precision
    EXPECT_NEAR(losses_shifted[n], expected, 2e-4);
  }
}

TEST(CpuKernels, CrossentropyIgnoresNegativeTargets) {
  const std::vector<int32_t> targets = {-1, 3, -100};
  const int N = 3, V = 5;
  const auto logits = random_values(N * V, 1);
  std::vector<double> losses(N, 9.0), dlogits(N * V, 9.0);
  cpu::crossentropy_forward_backward(losses.data(), dlogits.data(), logits.data(), targets.data(),
                                     N, V, 0.5f);
  for (int n : {0, 2}) {
    EXPECT_EQ(losses[n], 0.0);
    for (int v = 0; v < V; v++) EXPECT_EQ(dlogits[n * V + v], 0.0);
  }
  EXPECT_GT(losses[1], 0.0);
}

TEST(CpuKernels, CrossentropyGradientInPlaceEqualsSoftmaxMinusOneHotTimesDloss) {
  const CrossentropyOp op;
  const float dloss = 0.25f;
  const auto logits = random_values(kN * kV, 3);
  std::vector<double> in_place = logits, losses(kN), losses_in_place(kN), dlogits(kN * kV);
  cpu::crossentropy_forward_backward(losses.data(), dlogits.data(), logits.data(),
                                     op.targets.data(), kN, kV, dloss);
  cpu::crossentropy_forward_backward(losses_in_place.data(), in_place.data(), in_place.data(),
                                     op.targets.data(), kN, kV, dloss);
  for (int n = 0; n < kN; n++) {
    EXPECT_EQ(losses_in_place[n], losses[n]);
    double z = 0;
    for (int v = 0; v < kV; v++) z += std::exp(logits[n * kV + v]);
    for (int v = 0; v < kV; v++) {
      const double expected =
          op.targets[n] < 0 ? 0.0
                            : (std::exp(logits[n * kV + v]) / z - (v == op.targets[n])) * dloss;
      EXPECT_NEAR(dlogits[n * kV + v], expected, 1e-15);
      EXPECT_EQ(in_place[n * kV + v], dlogits[n * kV + v]);
    }
  }
}

TEST(CpuKernels, SumSquaresAndScaleMatchNaiveLoops) {
  const int64_t n = 100003;  // several blocks plus a ragged tail
  auto x = cast<float>(random_values(n, 5));
  double expected = 0;
  for (float v : x) expected += double(v) * double(v);
  EXPECT_NEAR(cpu::sum_squares(x.data(), n), expected, 1e-12 * expected);
  cpu::scale_inplace(x.data(), 0.5f, n);
  EXPECT_NEAR(cpu::sum_squares(x.data(), n), expected / 4, 1e-12 * expected);
}

// ---- determinism ----------------------------------------------------------------------------
// The non-BLAS reductions own disjoint channel (or element) blocks and add rows in order, so the
// bits must not depend on the thread count at all.
TEST(CpuKernels, ParameterReductionsAreBitwiseIdenticalForAnyThreadCount) {
  const int B = 3, Tn = 40, N = B * Tn, C = 200, V = 17;
  std::vector<int32_t> tokens(N);
  for (int n = 0; n < N; n++) tokens[n] = (n * 7) % V;
  const auto inp = cast<float>(random_values(N * C, 1)),
             dout = cast<float>(random_values(N * C, 2));
  const auto w = cast<float>(random_values(C, 3)), big = cast<float>(random_values(1 << 20, 4));
  auto run = [&](int threads) {
    omp_set_num_threads(threads);
    std::vector<float> dwte(V * C, 0.f), dwpe(Tn * C, 0.f), dw(C, 0.f), db(C, 0.f), dx(N * C, 0.f);
    std::vector<float> dw_rms(C, 0.f), dbias(C, 0.f), out(N * C), mean(N), rstd(N), rms_rstd(N);
    cpu::embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, Tn, C);
    cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), w.data(), N,
                           C, 1e-5f);
    cpu::layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(),
                            mean.data(), rstd.data(), N, C);
    cpu::rmsnorm_forward(out.data(), rms_rstd.data(), inp.data(), w.data(), N, C, 1e-6f);
    cpu::rmsnorm_backward(dx.data(), dw_rms.data(), dout.data(), inp.data(), w.data(),
                          rms_rstd.data(), N, C);
    // column sums of dout viewed as (N, C): matmul's dbias, with the gemm parts on a zero weight
    std::vector<float> zero_w(C * 1, 0.f), dweight(C, 0.f);
    cpu::matmul_backward<float>(nullptr, dweight.data(), dbias.data(), dout.data(), inp.data(),
                                zero_w.data(), N, 1, C);
    const double sum_sq = cpu::sum_squares(big.data(), int64_t(big.size()));
    return std::make_pair(std::vector<std::vector<float>>{dwte, dwpe, dw, db, dw_rms, dbias},
                          sum_sq);
  };
  const int saved = omp_get_max_threads();
  const auto one = run(1), two = run(2), three = run(3);
  omp_set_num_threads(saved);
  EXPECT_EQ(one, two);
  EXPECT_EQ(one, three);
}

}  // namespace
