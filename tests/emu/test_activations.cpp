// kernels/cuda/activations.cu (emulated; the bf16 GELU goes through elementwise.cuh's map_bf16)
// and the fp32 GELU of elementwise.cu:
//  - SwiGLU forward / backward: every bf16 output equal bit for bit to the CPU twin's fp32 result
//    (kernels/cpu/activations.cpp) on the widened inputs, rounded once. Both use expf through
//    src/base/math/activations.h: glibc's on both sides here (CUDA's expf may differ by an ulp
//    on the GPU, hence 5e-3 norm-wise in tests/gpu). The 16-byte path (H % 8 == 0, aligned) and
//    the element path (H ragged, or a buffer misaligned); dinp pre-filled (+= checked).
//  - GELU (bf16) forward / backward: bit for bit against the shared math (gelu_tanh /
//    gelu_tanh_grad with tanhf) on the host, rounded once; and against the CPU twin, whose float
//    tanh is tanh_simd (not tanhf): 5e-3 norm-wise (tests/gpu's kBf16Tol) and, for the forward,
//    per element within 2^-8 |ref| (bf16 rounding) + 2^-22 |x| (0.5 |x| times the two tanh's
//    <= 3.4 ulp apart, ulp <= 2^-24 near 1).
//  - the fp32 gelu_forward (elementwise.cu): bit for bit against gelu_tanh on the host.
//  - GeGLU forward / backward (the gated unit with GELU-tanh): bit for bit against the shared math
//    (gelu_tanh / gelu_tanh_grad with tanhf) on the host, rounded once, and against the CPU twin
//    (tanh_simd) within 5e-3 norm-wise, as GELU; the 16-byte and the element paths.
// n ragged around the 8-element chunk, aligned and misaligned buffers, NaN-poisoned outputs
// and guard bands. No barrier: sequential mode.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/rel_err.h"
#include "emu_common.h"
#include "base/math/activations.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cuda/activations.cuh"
#include "kernels/cuda/elementwise.cuh"

namespace {

using namespace emuh;
using bf16 = __nv_bfloat16;
namespace ec = eco::cuda;

std::vector<float> widen(const std::vector<uint16_t>& x) {
  std::vector<float> v(x.size());
  for (size_t i = 0; i < x.size(); ++i) v[i] = bf(x[i]);
  return v;
}

using eco::rel_err;  // src/core/rel_err.h

// bf16 inputs over a wide range (sd 3, tails to |x| ~ 13) with specials planted.
std::vector<uint16_t> gelu_input(size_t n, uint64_t seed) {
  std::vector<uint16_t> x = to_bf16(randn(n, seed, 3.0f));
  const uint16_t specials[] = {0x0000, 0x8000, 0x4120 /* 10 */, 0xc120 /* -10 */, 0x3c00};
  for (size_t k = 0; k < 5 && 2 * k + 1 < n; ++k) x[k] = x[n - 1 - k] = specials[k];
  return x;
}

void gelu_case(Tally& tally, int64_t n, bool backward, bool misaligned, uint64_t seed) {
  char name[64];
  std::snprintf(name, sizeof name, "gelu %s n%ld %s", backward ? "backward" : "forward", long(n),
                misaligned ? "misaligned" : "aligned");
  const std::string tag = name;
  auto check = [&](bool ok, const std::string& what) {
    ++tally.cases;
    if (!ok) tally.fail(tag + ": " + what);
  };
  const size_t mis = misaligned ? 2 : 0;
  const std::vector<uint16_t> inp = gelu_input(size_t(n), seed);
  const std::vector<uint16_t> dout = to_bf16(randn(size_t(n), seed + 1, 1.0f));
  const std::vector<uint16_t> dinp0 = to_bf16(randn(size_t(n), seed + 2, 1.0f));
  Guarded<uint16_t> d_inp(inp, mis), d_dout(dout), d_dinp(dinp0), d_out{size_t(n)};  // out: NaN
  emu::sequential = true;
  const cudaError_t e = backward ? ec::gelu_backward(bf16p(d_dinp), bf16p(d_inp), bf16p(d_dout), n)
                                 : ec::gelu_forward(bf16p(d_out), bf16p(d_inp), n);
  emu::sequential = false;
  check(e == cudaSuccess, "launch");
  const std::vector<uint16_t> got = backward ? d_dinp.host() : d_out.host();
  const std::vector<float> x = widen(inp), d = widen(dout), d0 = widen(dinp0);
  // The shared math (tanhf), rounded once: bit for bit.
  std::vector<float> shared(static_cast<size_t>(n));
  for (size_t i = 0; i < shared.size(); ++i)
    shared[i] = backward ? d0[i] + eco::gelu_tanh_grad(x[i]) * d[i] : eco::gelu_tanh(x[i]);
  long first = -1;
  const long k = differ(got, to_bf16(shared), &first);
  check(k == 0, std::to_string(k) + " differ from the shared math, first " + std::to_string(first));
  // The CPU twin (tanh_simd).
  std::vector<float> twin = backward ? d0 : std::vector<float>(size_t(n));
  if (backward)
    eco::cpu::gelu_backward(twin.data(), x.data(), d.data(), n);
  else
    eco::cpu::gelu_forward(twin.data(), x.data(), n);
  const std::vector<float> g = widen(got);
  check(rel_err(g, twin) < 5e-3, "vs the CPU twin: norm-wise " + std::to_string(rel_err(g, twin)));
  if (!backward)
    for (size_t i = 0; i < g.size(); ++i)
      if (!(std::fabs(g[i] - twin[i]) <= 0x1p-8 * std::fabs(twin[i]) + 0x1p-22 * std::fabs(x[i]))) {
        check(false, "vs the CPU twin at " + std::to_string(i));
        break;
      }
  check(d_inp.host() == inp && d_dout.host() == dout, "inputs changed");
  check(d_inp.guards_intact() && d_dout.guards_intact() && d_dinp.guards_intact() &&
            d_out.guards_intact(),
        "guards");
}

// The gated units over inp (N, 2H) = [gate | up]: SwiGLU (silu) or GeGLU (gelu_tanh).
enum Glu { SWIGLU, GEGLU };

// Forward (out = act(gate) * up) or backward (dinp += (act'(gate) up dout, act(gate) dout)): bit
// for bit against the shared math (src/base/math/activations.h: glibc expf / tanhf here) on the
// widened inputs, rounded once; against the CPU twin bit for bit for SwiGLU (the same math) and
// within 5e-3 norm-wise for GeGLU (its twin's tanh is tanh_simd).
void gated_case(Tally& tally, Glu glu, int N, int H, bool backward, bool misaligned,
                uint64_t seed) {
  char name[64];  // (snprintf: "N" + std::to_string trips g++ 12's -Wrestrict at -O3)
  std::snprintf(name, sizeof name, "%s %s %dx%d %s", glu == SWIGLU ? "swiglu" : "geglu",
                backward ? "backward" : "forward", N, H, misaligned ? "misaligned" : "aligned");
  const std::string tag = name;
  auto check = [&](bool ok, const std::string& what) {
    ++tally.cases;
    if (!ok) tally.fail(tag + ": " + what);
  };
  const size_t mis = misaligned ? 2 : 0, n_in = size_t(N) * 2 * H, n_out = size_t(N) * H;
  const std::vector<uint16_t> inp =
      glu == SWIGLU ? to_bf16(randn(n_in, seed, 2.0f)) : gelu_input(n_in, seed);
  const std::vector<uint16_t> dout = to_bf16(randn(n_out, seed + 1, 1.0f));
  const std::vector<uint16_t> dinp0 = to_bf16(randn(n_in, seed + 2, 1.0f));
  Guarded<uint16_t> d_inp(inp, mis), d_dout(dout), d_dinp(dinp0), d_out{n_out};  // out: NaN
  emu::sequential = true;
  cudaError_t e;
  if (glu == SWIGLU)
    e = backward ? ec::swiglu_backward(bf16p(d_dinp), bf16p(d_dout), bf16p(d_inp), N, H)
                 : ec::swiglu_forward(bf16p(d_out), bf16p(d_inp), N, H);
  else
    e = backward ? ec::geglu_backward(bf16p(d_dinp), bf16p(d_dout), bf16p(d_inp), N, H)
                 : ec::geglu_forward(bf16p(d_out), bf16p(d_inp), N, H);
  emu::sequential = false;
  check(e == cudaSuccess, "launch");
  const std::vector<float> x = widen(inp), d = widen(dout), d0 = widen(dinp0);
  const auto act = [&](float g) { return glu == SWIGLU ? eco::silu(g) : eco::gelu_tanh(g); };
  const auto act_grad = [&](float g) {
    return glu == SWIGLU ? eco::silu_grad(g) : eco::gelu_tanh_grad(g);
  };
  std::vector<float> shared = backward ? d0 : std::vector<float>(n_out);
  for (int n = 0; n < N; ++n)
    for (int j = 0; j < H; ++j) {
      const size_t gi = size_t(n) * 2 * H + size_t(j), ui = gi + size_t(H), oi = size_t(n) * H + j;
      if (backward) {
        shared[gi] += act_grad(x[gi]) * x[ui] * d[oi];
        shared[ui] += act(x[gi]) * d[oi];
      } else {
        shared[oi] = act(x[gi]) * x[ui];
      }
    }
  const std::vector<uint16_t> got = backward ? d_dinp.host() : d_out.host();
  long first = -1;
  const long k = differ(got, to_bf16(shared), &first);
  check(k == 0, std::to_string(k) + " differ from the shared math, first " + std::to_string(first));
  std::vector<float> twin = backward ? d0 : std::vector<float>(n_out);
  if (glu == SWIGLU && backward) eco::cpu::swiglu_backward(twin.data(), d.data(), x.data(), N, H);
  if (glu == SWIGLU && !backward) eco::cpu::swiglu_forward(twin.data(), x.data(), N, H);
  if (glu == GEGLU && backward) eco::cpu::geglu_backward(twin.data(), d.data(), x.data(), N, H);
  if (glu == GEGLU && !backward) eco::cpu::geglu_forward(twin.data(), x.data(), N, H);
  if (glu == SWIGLU) {
    check(differ(got, to_bf16(twin), &first) == 0,
          "differs from the CPU twin, first " + std::to_string(first));
  } else {
    const double e_twin = rel_err(widen(got), twin);
    check(e_twin < 5e-3, "vs the CPU twin: norm-wise " + std::to_string(e_twin));
  }
  check(d_inp.host() == inp && d_dout.host() == dout, "inputs changed");
  check(d_inp.guards_intact() && d_dout.guards_intact() && d_dinp.guards_intact() &&
            d_out.guards_intact(),
        "guards");
  if (!backward) check(d_dinp.host() == dinp0, "forward wrote dinp");
}

}  // namespace

TEST(EmuActivations, SwigluEqualsCpuTwinRoundedOnce) {
  Tally tally;
  uint64_t seed = 1;
  // tests/gpu's shapes plus H = 8 (one chunk a row), H = 1 and H = 20 (chunks that cross rows:
  // the element path); a misaligned inp takes the element path even when H % 8 == 0.
  const std::pair<int, int> shapes[] = {{1, 16}, {7, 33}, {64, 768}, {257, 1000},
                                        {5, 8},  {9, 1},  {6, 20}};
  for (auto [N, H] : shapes)
    for (bool backward : {false, true})
      for (bool misaligned : {false, true}) {
        if (N == 257 && misaligned) continue;
        gated_case(tally, SWIGLU, N, H, backward, misaligned, seed += 10);
      }
  EXPECT_GT(tally.cases, 0);
}

// Gemma 3's MLP: the shapes of SwiGLU's test (the 16-byte path at H % 8 == 0, the element path
// for ragged H or a misaligned input).
TEST(EmuActivations, GegluEqualsSharedMathAndCpuTwin) {
  Tally tally;
  uint64_t seed = 500;
  const std::pair<int, int> shapes[] = {{1, 16}, {7, 33}, {64, 192}, {5, 8}, {9, 1}, {6, 20}};
  for (auto [N, H] : shapes)
    for (bool backward : {false, true})
      for (bool misaligned : {false, true})
        gated_case(tally, GEGLU, N, H, backward, misaligned, seed += 10);
  EXPECT_GT(tally.cases, 0);
}

TEST(EmuActivations, GeluEqualsSharedMathAndCpuTwin) {
  Tally tally;
  uint64_t seed = 100;
  for (int64_t n : {1, 7, 8, 9, 2112, 2117, 257000})
    for (bool backward : {false, true})
      for (bool misaligned : {false, true}) gelu_case(tally, n, backward, misaligned, seed += 10);
  EXPECT_GT(tally.cases, 0);
}

// The fp32 GELU (elementwise.cu): one thread an element, the shared gelu_tanh: bit for bit.
TEST(EmuActivations, Fp32GeluEqualsSharedMathBitwise) {
  Tally tally;
  emu::sequential = true;
  uint64_t seed = 300;
  for (int64_t n : {1, 255, 257, 10007}) {
    std::vector<float> x = randn(size_t(n), ++seed, 3.0f);
    const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, std::nanf(""), 1e-40f};
    for (size_t k = 0; k < 6 && k < x.size(); ++k) x[x.size() - 1 - k] = specials[k];
    Guarded<float> d_x(x), d_out{size_t(n)};  // out: NaN (0xFFFFFFFF)
    ++tally.cases;
    const cudaError_t e = ec::gelu_forward(d_out.data(), d_x.data(), n);
    std::vector<float> ref(x.size());
    for (size_t i = 0; i < x.size(); ++i) ref[i] = eco::gelu_tanh(x[i]);
    long first = -1;
    const long k = differ(d_out.host(), ref, &first);
    if (e != cudaSuccess || k != 0 || !d_out.guards_intact() || differ(d_x.host(), x) != 0) {
      char what[80];
      std::snprintf(what, sizeof what, "n%ld: %ld differ, first %ld", long(n), k, first);
      tally.fail(what);
    }
  }
  emu::sequential = false;
  EXPECT_GT(tally.cases, 0);
}

TEST(EmuActivations, RefusesNegativeSizesAndNullBuffers) {
  const long launches = emu::launches;
  bf16* p = reinterpret_cast<bf16*>(16);  // never dereferenced
  EXPECT_EQ(ec::swiglu_forward(p, p, -1, 8), cudaErrorInvalidValue);
  EXPECT_EQ(ec::swiglu_forward(nullptr, p, 1, 8), cudaErrorInvalidValue);
  EXPECT_EQ(ec::swiglu_backward(p, nullptr, p, 1, 8), cudaErrorInvalidValue);
  EXPECT_EQ(ec::swiglu_forward(nullptr, nullptr, 0, 8), cudaSuccess);
  EXPECT_EQ(ec::geglu_forward(nullptr, p, 1, 8), cudaErrorInvalidValue);
  EXPECT_EQ(ec::geglu_backward(p, nullptr, p, 1, 8), cudaErrorInvalidValue);
  EXPECT_EQ(ec::geglu_forward(p, p, 1, -8), cudaErrorInvalidValue);
  EXPECT_EQ(ec::gelu_forward(p, nullptr, 5), cudaErrorInvalidValue);
  EXPECT_EQ(ec::gelu_backward(p, p, p, -1), cudaErrorInvalidValue);
  EXPECT_EQ(ec::gelu_forward(static_cast<float*>(nullptr), nullptr, 5), cudaErrorInvalidValue);
  EXPECT_EQ(emu::launches, launches);
}
