// kernels/cuda/qk_norm.cu (emulated): Gemma 3's QK-norm (RMSNorm over each q and k head of the
// fused qkv rows, gains wq and wk; v passes) against the CPU twin eco::cpu::qk_rmsnorm_forward /
// qk_rmsnorm_backward<float> on the same bf16 values. Tolerances (as tests/emu/test_norms.cpp and
// tests/gpu/test_layers_gpu.cu, which explain them): bf16 out and dinp 5e-3 norm-wise (one bf16
// rounding ~1.7e-3; the kernel sums each head's squares in another order), rstd 1e-6 relative
// (fp32 summation order), dwq / dwk 1e-5 norm-wise (summation order only); the v part of out and
// dinp bit for bit (a copy; one fp32 add rounded once). Shapes: 4, 2 and 1 query heads per kv
// head, head sizes 12 (the element path), 32, 256 (Gemma 3 1B's), the 16-byte path and a
// misaligned one, 40 rows (more (row, head) pairs than chunks of the gain reduction: 80 chunks for
// the q gain, 40 filled and 40 empty for the k gain); outputs poisoned, guard bands; the blocks in
// reverse order give the same bits.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/rel_err.h"
#include "emu_common.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cuda/norms.cuh"

namespace {

using namespace emuh;
using bf16 = __nv_bfloat16;
namespace ec = eco::cuda;
using eco::rel_err;

struct QkShape {
  int N, NH, KVH, hd;
  bool misaligned;
};

std::vector<float> widen(const std::vector<uint16_t>& x) {
  std::vector<float> v(x.size());
  for (size_t i = 0; i < x.size(); ++i) v[i] = bf(x[i]);
  return v;
}

// The elements of the v heads (v true) or of the q and k heads of rows (N, QKV).
std::vector<float> part(const std::vector<float>& x, const QkShape& s, bool v) {
  const size_t ld = size_t(s.NH + 2 * s.KVH) * s.hd, v0 = size_t(s.NH + s.KVH) * s.hd;
  std::vector<float> out;
  for (size_t i = 0; i < x.size(); ++i)
    if ((i % ld >= v0) == v) out.push_back(x[i]);
  return out;
}

void qk_case(Tally& tally, const QkShape& s, uint64_t seed) {
  char name[96];
  std::snprintf(name, sizeof name, "N%d NH%d KVH%d hd%d %s", s.N, s.NH, s.KVH, s.hd,
                s.misaligned ? "misaligned" : "aligned");
  const std::string tag = name;
  auto check = [&](bool ok, const std::string& what) {
    ++tally.cases;
    if (!ok) tally.fail(tag + ": " + what);
  };
  const size_t ld = size_t(s.NH + 2 * s.KVH) * s.hd, n = size_t(s.N) * ld;
  const size_t mis = s.misaligned ? 2 : 0, n_rstd = size_t(s.N) * (s.NH + s.KVH);
  const std::vector<uint16_t> inp = to_bf16(randn(n, seed, 2.0f));
  const std::vector<uint16_t> dout = to_bf16(randn(n, seed + 1, 1.0f));
  const std::vector<uint16_t> dinp0 = to_bf16(randn(n, seed + 2, 0.1f));
  std::vector<float> wq = randn(size_t(s.hd), seed + 3, 0.2f),
                     wk = randn(size_t(s.hd), seed + 4, 0.2f);
  for (float& w : wq) w += 1.0f;  // (1 + w) gains, as the model passes them
  for (float& w : wk) w += 1.0f;
  const std::vector<float> dwq0 = randn(size_t(s.hd), seed + 5, 0.1f),
                           dwk0 = randn(size_t(s.hd), seed + 6, 0.1f);
  Guarded<uint16_t> d_inp(inp, mis), d_dout(dout);
  Guarded<float> d_wq(wq), d_wk(wk);
  struct Run {
    std::vector<uint16_t> out, dinp;
    std::vector<float> rstd, dwq, dwk;
    bool ok;
  };
  auto run = [&]() {
    Guarded<uint16_t> d_out{n}, d_dinp(dinp0, mis);  // out: NaN
    Guarded<float> d_rstd{n_rstd}, d_dwq(dwq0), d_dwk(dwk0);
    Guarded<float> scratch(std::vector<float>(ec::qk_norm_backward_scratch_floats(s.hd), NAN));
    const cudaError_t ef = ec::qk_rmsnorm_forward(bf16p(d_out), d_rstd.data(), bf16p(d_inp),
                                                  d_wq.data(), d_wk.data(), s.N, s.NH, s.KVH, s.hd,
                                                  1e-6f);
    const cudaError_t eb = ec::qk_rmsnorm_backward(
        bf16p(d_dinp), d_dwq.data(), d_dwk.data(), bf16p(d_dout), bf16p(d_inp), d_wq.data(),
        d_wk.data(), d_rstd.data(), s.N, s.NH, s.KVH, s.hd, scratch.data());
    const bool guards = d_out.guards_intact() && d_dinp.guards_intact() &&
                        d_rstd.guards_intact() && d_dwq.guards_intact() &&
                        d_dwk.guards_intact() && scratch.guards_intact();
    return Run{d_out.host(), d_dinp.host(), d_rstd.host(), d_dwq.host(), d_dwk.host(),
               ef == cudaSuccess && eb == cudaSuccess && guards};
  };
  const Run got = run();
  emu::reverse_blocks = true;
  const Run rev = run();
  emu::reverse_blocks = false;
  check(got.ok, "launch, guards or scratch bounds");
  check(got.out == rev.out && got.dinp == rev.dinp && differ(got.rstd, rev.rstd) == 0 &&
            differ(got.dwq, rev.dwq) == 0 && differ(got.dwk, rev.dwk) == 0,
        "reversed block order differs");
  check(d_inp.host() == inp && d_dout.host() == dout, "inputs changed");

  const std::vector<float> x = widen(inp), d = widen(dout);
  std::vector<float> out(n), rstd(n_rstd), dx = widen(dinp0), dwq = dwq0, dwk = dwk0;
  eco::cpu::qk_rmsnorm_forward(out.data(), rstd.data(), x.data(), wq.data(), wk.data(), s.N, s.NH,
                               s.KVH, s.hd, 1e-6f);
  eco::cpu::qk_rmsnorm_backward(dx.data(), dwq.data(), dwk.data(), d.data(), x.data(), wq.data(),
                                wk.data(), rstd.data(), s.N, s.NH, s.KVH, s.hd);
  const std::vector<float> o = widen(got.out), g = widen(got.dinp);
  const double e_out = rel_err(part(o, s, false), part(out, s, false));
  check(e_out < 5e-3, "out vs the CPU twin: " + std::to_string(e_out));
  check(got.out.size() == n && differ(part(o, s, true), part(out, s, true)) == 0, "v not copied");
  double e_rstd = 0;
  for (size_t i = 0; i < n_rstd; ++i)
    e_rstd = std::max(e_rstd, std::fabs(double(got.rstd[i]) - rstd[i]) / rstd[i]);
  check(e_rstd < 1e-6, "rstd vs the CPU twin: " + std::to_string(e_rstd));
  const double e_dx = rel_err(part(g, s, false), part(dx, s, false));
  check(e_dx < 5e-3, "dinp vs the CPU twin: " + std::to_string(e_dx));
  std::vector<float> dv_ref = part(dx, s, true);
  check(differ(to_bf16(part(g, s, true)), to_bf16(dv_ref)) == 0, "v's gradient not passed");
  const double e_wq = rel_err(got.dwq, dwq), e_wk = rel_err(got.dwk, dwk);
  check(e_wq < 1e-5 && e_wk < 1e-5,
        "gains vs the CPU twin: dwq " + std::to_string(e_wq) + ", dwk " + std::to_string(e_wk));
  std::printf("[   emu    ] qk-norm %s: out %.2e, rstd %.2e, dinp %.2e, dwq %.2e, dwk %.2e\n",
              name, e_out, e_rstd, e_dx, e_wq, e_wk);
}

}  // namespace

TEST(EmuQkNorm, ForwardAndBackwardMatchCpuTwin) {
  Tally tally;
  uint64_t seed = 1;
  const QkShape shapes[] = {{5, 4, 1, 32, false},  {3, 2, 2, 12, false}, {2, 4, 1, 256, false},
                            {40, 2, 1, 16, false}, {4, 4, 2, 32, true}};
  for (const QkShape& s : shapes) qk_case(tally, s, seed += 10);
  EXPECT_GT(tally.cases, 0);
}

TEST(EmuQkNorm, RefusesBadShapesAndNullBuffers) {
  const long launches = emu::launches;
  bf16* p = reinterpret_cast<bf16*>(16);  // never dereferenced
  bf16* q = reinterpret_cast<bf16*>(32);
  float* f = reinterpret_cast<float*>(64);
  EXPECT_EQ(ec::qk_rmsnorm_forward(q, f, p, f, f, 1, 4, 0, 8, 1e-6f), cudaErrorInvalidValue);
  EXPECT_EQ(ec::qk_rmsnorm_forward(q, f, p, f, f, -1, 4, 1, 8, 1e-6f), cudaErrorInvalidValue);
  EXPECT_EQ(ec::qk_rmsnorm_forward(p, f, p, f, f, 1, 4, 1, 8, 1e-6f), cudaErrorInvalidValue);
  EXPECT_EQ(ec::qk_rmsnorm_forward(q, f, p, nullptr, f, 1, 4, 1, 8, 1e-6f), cudaErrorInvalidValue);
  EXPECT_EQ(ec::qk_rmsnorm_backward(q, f, f, p, p, f, f, f, 1, 4, 1, 8, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(ec::qk_rmsnorm_backward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                    nullptr, 0, 4, 1, 8, nullptr),
            cudaSuccess);
  EXPECT_EQ(emu::launches, launches);
}
